from pathlib import Path


def test_count():
    n = sum(1 for line in Path("/app/app.log").read_text().splitlines() if line.split()[2] == "ERROR")
    assert Path("/app/errors.txt").read_text().strip() == str(n)
