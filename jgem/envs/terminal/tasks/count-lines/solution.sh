#!/bin/bash
set -euo pipefail

wc -l < /app/data.txt | tr -d ' ' > /app/count.txt
