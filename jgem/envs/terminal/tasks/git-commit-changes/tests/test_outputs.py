import subprocess

REPO = "/app/repo"


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, check=True).stdout


def test_commit():
    assert git("log", "--format=%s").splitlines() == ["Update docs", "Start"]
    assert git("status", "--porcelain") == ""


def test_content():
    assert git("show", "HEAD:docs.md") == "v2\n" and git("show", "HEAD:extra.md") == "more\n"
