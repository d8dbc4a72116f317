import os
import stat


def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def test_scripts_executable():
    for p in ("/app/scripts/build.sh", "/app/scripts/tools/deploy.sh"):
        assert mode(p) & 0o111 == 0o111, p


def test_others_not():
    for p in ("/app/scripts/README", "/app/scripts/tools/config.yaml"):
        assert mode(p) & 0o111 == 0, p
