import tarfile


def test_archive():
    with tarfile.open("/app/logs.tar.gz", "r:gz") as t:
        names = sorted(m.name for m in t.getmembers() if m.isfile())
        assert names == ["logs/a.log", "logs/b.log", "logs/d.log"]
        assert t.extractfile("logs/b.log").read() == b"b\n"
