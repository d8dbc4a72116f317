import sys

sys.path.insert(0, "/app")
from stats import mean, total  # noqa: E402


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5
    assert mean([5]) == 5.0


def test_total_unchanged():
    assert total([1, 2, 3]) == 6
