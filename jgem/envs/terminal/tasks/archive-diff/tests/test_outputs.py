from pathlib import Path


def test_changed():
    got = [ln for ln in Path("/app/changed.txt").read_text().splitlines() if ln.strip()]
    assert got == ["snap/b", "snap/e", "snap/sub/d"]
