import subprocess
from pathlib import Path


def run(*args, cwd="/app"):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=20, cwd=cwd)


def test_sample():
    r = run("python3", "/app/wc.py", "/app/sample.txt")
    assert r.returncode == 0, r.stderr
    text = Path("/app/sample.txt").read_text(encoding="utf-8")
    assert r.stdout.split() == [str(text.count("\n")), str(len(text.split())), str(len(text))]
