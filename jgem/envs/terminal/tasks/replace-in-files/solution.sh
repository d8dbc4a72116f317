#!/bin/bash
set -euo pipefail

find /app/src -name '*.py' -exec sed -i 's/foo_api/bar_api/g' {} +
