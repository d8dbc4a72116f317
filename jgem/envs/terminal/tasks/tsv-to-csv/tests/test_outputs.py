from pathlib import Path


def test_csv():
    want = Path("/app/data.tsv").read_text().replace("\t", ",")
    assert Path("/app/data.csv").read_text() == want
