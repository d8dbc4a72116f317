import os
import tarfile


def names(path):
    with tarfile.open(path) as t:
        return sorted(m.name for m in t.getmembers() if m.isfile())


def test_script_is_executable():
    assert os.access("/app/backup.sh", os.X_OK)


def test_site_backup():
    assert names("/app/backups/site.tar.gz") == ["site/css/style.css", "site/index.html"]
