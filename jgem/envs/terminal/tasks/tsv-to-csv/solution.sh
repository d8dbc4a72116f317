#!/bin/bash
set -euo pipefail

tr '\t' ',' < /app/data.tsv > /app/data.csv
