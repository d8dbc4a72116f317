#!/bin/bash
set -euo pipefail

mkdir -p /app/extracted
tar -xzf /app/bundle.tar.gz -C /app/extracted
cp "$(find /app/extracted -name flag.txt | head -n 1)" /app/flag.txt
