from pathlib import Path


def test_unique_sorted():
    names = Path("/app/names.txt").read_text().split()
    assert Path("/app/unique_names.txt").read_text().split() == sorted(set(names))
