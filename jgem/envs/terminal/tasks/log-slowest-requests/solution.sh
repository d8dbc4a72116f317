#!/bin/bash
set -euo pipefail

sed -E 's/.*id=([^ ]+).*ms=([0-9]+)$/\2 \1/' /app/requests.log | sort -k1,1nr | head -n 5 | awk '{print $2}' > /app/slowest.txt
