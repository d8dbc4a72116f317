#!/bin/bash
set -euo pipefail

cd /app/inbox
for f in *.*; do [ -f "$f" ] || continue; ext="${f##*.}"; mkdir -p "$ext"; mv -- "$f" "$ext/"; done
