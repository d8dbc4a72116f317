from collections import Counter
from pathlib import Path


def expected():
    return Counter(Path("/app/text.txt").read_text().split()).most_common(3)


def test_top_words():
    lines = Path("/app/top_words.txt").read_text().split("\n")
    got = [tuple(line.split()) for line in lines if line.strip()]
    assert got == [(w, str(c)) for w, c in expected()]
