from pathlib import Path

P = Path("/app/project")


def test_dirs():
    assert all((P / d).is_dir() for d in ("src/mypkg", "tests", "docs"))


def test_files():
    assert (P / "src/mypkg/__init__.py").read_text() == ""
    assert (P / "README.md").read_text().splitlines()[0] == "# mypkg"
