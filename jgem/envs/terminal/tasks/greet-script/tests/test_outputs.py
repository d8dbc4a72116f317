import subprocess


def run(*args, cwd="/app"):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=20, cwd=cwd)


def test_with_name():
    assert run("/app/greet.sh", "Ada").stdout == "Hello, Ada!\n"


def test_without_name():
    assert run("/app/greet.sh").stdout == "Hello, world!\n"
