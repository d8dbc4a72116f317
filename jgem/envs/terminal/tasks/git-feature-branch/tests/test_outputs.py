import subprocess

REPO = "/app/repo"


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, check=True).stdout


def test_branch_and_commit():
    assert git("rev-parse", "--abbrev-ref", "HEAD").strip() == "feature/login"
    assert git("show", "feature/login:login.py").strip() == "def login(): return True"
    assert git("rev-parse", "feature/login~1") == git("rev-parse", "main")


def test_main_unchanged():
    assert git("log", "--format=%s", "main").splitlines() == ["Start"]
