#!/bin/bash
set -euo pipefail

sed -i 's/for name, qty in items.items()$/for name, qty in items.items():/' /app/report.py
