from pathlib import Path


def test_window():
    lines = Path("/app/app.log").read_text().splitlines()
    want = [ln for ln in lines if ln.startswith("2024-03-02 13:")]
    assert want and Path("/app/window.log").read_text().splitlines() == want
