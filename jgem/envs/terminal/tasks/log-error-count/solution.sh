#!/bin/bash
set -euo pipefail

awk '$3 == "ERROR"' /app/app.log | wc -l | tr -d ' ' > /app/errors.txt
