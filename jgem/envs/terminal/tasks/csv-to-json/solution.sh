#!/bin/bash
set -euo pipefail

python3 - <<'PY'
import csv, json
with open("/app/people.csv") as f:
    rows = [dict(r, age=int(r["age"])) for r in csv.DictReader(f)]
with open("/app/people.json", "w") as f:
    json.dump(rows, f, indent=2)
PY
