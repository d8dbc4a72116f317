from pathlib import Path


def test_python_files_changed():
    for p in Path("/app/src").rglob("*.py"):
        text = p.read_text()
        assert "foo_api" not in text and "bar_api" in text, p


def test_other_files_unchanged():
    assert Path("/app/src/README.md").read_text() == "Uses foo_api.\n"
    assert Path("/app/src/notes.txt").read_text() == "foo_api stays here\n"
