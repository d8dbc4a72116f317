import subprocess

REPO = "/app/repo"


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, check=True).stdout


def test_ignored():
    out = git("check-ignore", "debug.log", "logs/run.log", "build/out.bin")
    assert len(out.split()) == 3


def test_committed_and_clean():
    assert ".gitignore" in git("ls-files").split()
    assert not any(f.endswith(".log") or f.startswith("build/") for f in git("ls-files").split())
    assert git("status", "--porcelain") == ""
