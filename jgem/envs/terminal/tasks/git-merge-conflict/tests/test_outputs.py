import subprocess

REPO = "/app/repo"


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, check=True).stdout


def test_merge_commit():
    parents = git("rev-list", "--parents", "-n", "1", "HEAD").split()
    assert len(parents) == 3
    assert git("merge-base", "--is-ancestor", "feature", "HEAD") == ""


def test_resolution():
    assert git("show", "HEAD:greeting.txt") == "Hello from main\nHello from feature\n"
    assert git("show", "HEAD:new.txt") == "y\n"
    assert git("status", "--porcelain") == ""
