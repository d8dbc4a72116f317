#!/bin/bash
set -euo pipefail

cd /app
tar -czf logs.tar.gz logs/*.log
