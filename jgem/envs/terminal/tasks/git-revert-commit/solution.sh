#!/bin/bash
set -euo pipefail

cd /app/repo
git revert --no-edit HEAD
