import subprocess

REPO = "/app/repo"


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, check=True).stdout


def test_reverted():
    subjects = git("log", "--format=%s").splitlines()
    assert len(subjects) == 3 and subjects[1:] == ["Refactor add", "Add calc"]
    assert "Revert" in subjects[0]


def test_code_fixed():
    assert "return a + b" in git("show", "HEAD:calc.py")
    assert git("status", "--porcelain") == ""
