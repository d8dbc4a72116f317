#!/bin/bash
set -euo pipefail

jq -r '.[] | select(.active) | .name' /app/users.json | sort > /app/active.txt
