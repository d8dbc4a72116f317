from pathlib import Path


def test_converted():
    assert Path("/app/notes/a.txt").read_bytes() == b"first line\nsecond line\n"
    assert Path("/app/notes/b.txt").read_bytes() == b"one\ntwo\nthree\n"


def test_markdown_untouched():
    assert Path("/app/notes/c.md").read_bytes() == b"keep\r\n"
