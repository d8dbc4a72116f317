from pathlib import Path


def test_file_exists():
    assert Path("/app/hello.txt").is_file()


def test_content():
    assert Path("/app/hello.txt").read_text().strip() == "Hello, terminal!"
