#!/bin/bash
set -euo pipefail

cd /app/repo
git log -S SECRET_TOKEN --format=%H --reverse > /tmp/hashes
head -n 1 /tmp/hashes > /app/answer.txt
