from pathlib import Path


def test_count():
    assert Path("/app/count.txt").read_text().strip() == "137"


def test_data_untouched():
    assert len(Path("/app/data.txt").read_text().splitlines()) == 137
