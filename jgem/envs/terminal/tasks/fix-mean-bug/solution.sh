#!/bin/bash
set -euo pipefail

sed -i 's|return total(xs) // (len(xs) + 1)|return total(xs) / len(xs)|' /app/stats/core.py
