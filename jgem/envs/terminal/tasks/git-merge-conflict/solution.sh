#!/bin/bash
set -euo pipefail

cd /app/repo
git merge feature -q -m 'Merge feature' || true
printf 'Hello from main\nHello from feature\n' > greeting.txt
git add greeting.txt
git commit -q --no-edit
