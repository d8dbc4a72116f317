from pathlib import Path


def test_renamed():
    names = sorted(p.name for p in Path("/app/photos").iterdir())
    assert names == ["beach.jpg", "cat.png", "city night.jpg", "dog.jpg", "notes.txt"]


def test_content_kept():
    assert Path("/app/photos/city night.jpg").read_text() == "image city night.jpeg\n"
