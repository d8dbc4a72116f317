import os
import stat
from pathlib import Path


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_list():
    got = [ln for ln in Path("/app/world_writable.txt").read_text().splitlines() if ln.strip()]
    assert got == ["upload/a.php", "upload/b.txt"]


def test_fixed():
    for p in Path("/app/www").rglob("*"):
        assert mode(p) & 0o002 == 0, p
    assert mode("/app/www/upload/a.php") == 0o664
