#!/bin/bash
set -euo pipefail

cd /app/repo
git checkout -q -b feature/login main
echo 'def login(): return True' > login.py
git add login.py
git commit -q -m 'Add login'
