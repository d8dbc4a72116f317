#!/bin/bash
set -euo pipefail

find /app/scripts -name '*.sh' -exec chmod a+x {} +
