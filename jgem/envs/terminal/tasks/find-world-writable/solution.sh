#!/bin/bash
set -euo pipefail

cd /app/www
find . -type f -perm -o+w | sed 's|^\./||' | sort > /app/world_writable.txt
find . -type f -perm -o+w -exec chmod o-w {} +
