import subprocess


def test_runs():
    out = subprocess.run(["python3", "/app/report.py"], capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["bolts: 12", "nuts: 30", "washers: 7", "total: 49"]
