from collections import Counter
from pathlib import Path


def test_top_ips():
    counts = Counter(line.split()[0] for line in Path("/app/access.log").read_text().splitlines())
    want = [f"{ip} {n}" for ip, n in counts.most_common(3)]
    assert [ln.strip() for ln in Path("/app/top_ips.txt").read_text().splitlines() if ln.strip()] == want
