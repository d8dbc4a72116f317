#!/bin/bash
set -euo pipefail

cd /app/repo
git init -q
git add -A
git commit -q -m 'Initial commit'
