import subprocess
from pathlib import Path

REPO = "/app/repo"


def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True, check=True).stdout


def test_answer():
    want = git("log", "--format=%H", "--grep=^three$").strip()
    assert Path("/app/answer.txt").read_text().strip() == want
