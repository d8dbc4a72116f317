from pathlib import Path


def test_extracted():
    assert Path("/app/extracted/payload/deep/er/flag.txt").is_file()


def test_flag():
    assert Path("/app/flag.txt").read_text().strip() == "FLAG-7f3a9c"
