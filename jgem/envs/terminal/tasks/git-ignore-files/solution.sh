#!/bin/bash
set -euo pipefail

cd /app/repo
printf '*.log\nbuild/\n' > .gitignore
git add .gitignore
git commit -q -m 'Ignore logs and build'
