#!/bin/bash
set -euo pipefail

awk '{print $1}' /app/access.log | sort | uniq -c | sort -k1,1nr | head -n 3 | awk '{print $2, $1}' > /app/top_ips.txt
