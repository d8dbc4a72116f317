#!/bin/bash
set -euo pipefail

cd /app/docs
find . -name '*.md' | sed 's|^\./||' | zip -q /app/docs.zip -@
