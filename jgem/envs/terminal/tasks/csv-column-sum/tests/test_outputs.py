import csv
from pathlib import Path


def test_total():
    with open("/app/sales.csv") as f:
        total = sum(float(r["amount"]) for r in csv.DictReader(f))
    assert Path("/app/total.txt").read_text().strip() == f"{total:.2f}"
