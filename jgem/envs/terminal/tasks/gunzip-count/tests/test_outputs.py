from pathlib import Path


def test_csv():
    lines = Path("/app/data.csv").read_text().splitlines()
    assert lines[0] == "id,v" and len(lines) == 58


def test_rows():
    assert Path("/app/rows.txt").read_text().strip() == "57"
