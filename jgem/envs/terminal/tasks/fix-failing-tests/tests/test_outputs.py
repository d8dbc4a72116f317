import sys

sys.path.insert(0, "/app/inventory")
from inventory.store import Store  # noqa: E402


def test_add_accumulates():
    s = Store()
    s.add("a", 1)
    s.add("a", 4)
    assert s.count("a") == 5


def test_missing_is_zero():
    assert Store().count("nothing") == 0


def test_remove_checks_stock():
    s = Store()
    s.add("b", 1)
    try:
        s.remove("b", 2)
    except ValueError:
        pass
    else:
        raise AssertionError("removing more than the stock must raise ValueError")
