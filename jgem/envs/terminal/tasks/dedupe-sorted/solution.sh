#!/bin/bash
set -euo pipefail

sort -u /app/names.txt > /app/unique_names.txt
