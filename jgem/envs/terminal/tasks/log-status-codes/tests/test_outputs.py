from collections import Counter
from pathlib import Path


def test_counts():
    counts = Counter(line.split()[8] for line in Path("/app/access.log").read_text().splitlines())
    want = [f"{c} {counts[c]}" for c in sorted(counts, key=int)]
    assert [ln.strip() for ln in Path("/app/status_counts.txt").read_text().splitlines() if ln.strip()] == want
