#!/bin/bash
set -euo pipefail

cat > /app/textutils.py <<'PY'
import re


def slugify(text):
    """"Hello, World!" -> "hello-world"; "  Many   spaces " -> "many-spaces"."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
PY
