from pathlib import Path


def test_large_files():
    got = [line for line in Path("/app/large.txt").read_text().splitlines() if line.strip()]
    assert got == ["a.bin", "sub/c.log", "sub/deeper/e.dat"]
