#!/bin/bash
set -euo pipefail

mkdir -p /app/project/src/mypkg /app/project/tests /app/project/docs
: > /app/project/src/mypkg/__init__.py
echo '# mypkg' > /app/project/README.md
