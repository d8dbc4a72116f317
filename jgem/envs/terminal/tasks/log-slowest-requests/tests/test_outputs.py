import re
from pathlib import Path


def test_slowest():
    rows = [re.search(r"id=(\S+).*ms=(\d+)$", ln).groups() for ln in Path("/app/requests.log").read_text().splitlines()]
    want = [i for i, _ in sorted(rows, key=lambda r: -int(r[1]))[:5]]
    assert Path("/app/slowest.txt").read_text().split() == want
