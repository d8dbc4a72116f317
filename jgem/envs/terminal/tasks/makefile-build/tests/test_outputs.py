import os
import subprocess
from pathlib import Path


def run(*args, cwd="/app"):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=20, cwd=cwd)


def test_built():
    assert os.access("/app/hello", os.X_OK)
    assert run("/app/hello").stdout == "built with make\n"


def test_makefile_targets():
    text = Path("/app/Makefile").read_text()
    assert "hello:" in text and "clean:" in text
