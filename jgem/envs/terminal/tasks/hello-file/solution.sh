#!/bin/bash
set -euo pipefail

echo "Hello, terminal!" > /app/hello.txt
