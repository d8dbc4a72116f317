#!/bin/bash
set -euo pipefail

sed -i 's/\r$//' /app/notes/*.txt
