#!/bin/bash
set -euo pipefail

gunzip -k /app/data.csv.gz
echo $(( $(wc -l < /app/data.csv) - 1 )) > /app/rows.txt
