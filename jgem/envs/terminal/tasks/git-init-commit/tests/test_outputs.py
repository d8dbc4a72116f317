import subprocess

REPO = "/app/repo"


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, check=True).stdout


def test_one_commit():
    assert git("log", "--format=%s").splitlines() == ["Initial commit"]


def test_files_committed_and_clean():
    assert sorted(git("ls-files").split()) == ["README.md", "main.py"]
    assert git("status", "--porcelain") == ""
