#!/bin/bash
set -euo pipefail

cd /app/repo
git add -A
git commit -q -m 'Update docs'
