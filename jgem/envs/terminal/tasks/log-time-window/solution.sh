#!/bin/bash
set -euo pipefail

awk '$1 == "2024-03-02" && $2 >= "13:00:00" && $2 <= "13:59:59"' /app/app.log > /app/window.log
