#!/bin/bash
set -euo pipefail

cd /app/data && find . -type f -size +1024c | sed 's|^\./||' | sort > /app/large.txt
