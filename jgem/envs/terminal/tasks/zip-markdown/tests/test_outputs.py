import zipfile


def test_zip():
    with zipfile.ZipFile("/app/docs.zip") as z:
        assert sorted(z.namelist()) == ["guide/intro.md", "index.md"]
        assert z.read("guide/intro.md") == b"# intro\n"
