import subprocess
import sys

sys.path.insert(0, "/app")
import calc  # noqa: E402


def out(*args, capsys):
    code = calc.main(list(args))
    return code, capsys.readouterr()


def test_operations(capsys):
    assert out("add", "2", "3", capsys=capsys)[1].out.strip() == "5"
    assert out("sub", "2", "5", capsys=capsys)[1].out.strip() == "-3"
    assert out("mul", "4", "2.5", capsys=capsys)[1].out.strip() == "10"
    assert out("div", "7", "2", capsys=capsys)[1].out.strip() == "3.5"


def test_division_by_zero():
    r = subprocess.run(["python3", "/app/calc.py", "div", "1", "0"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 1 and r.stderr.strip() and not r.stdout.strip()
