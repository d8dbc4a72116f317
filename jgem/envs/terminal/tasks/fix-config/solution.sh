#!/bin/bash
set -euo pipefail

sed -i '/^\[server\]/,/^\[/{s/^port = .*/port = 8080/;s/^debug = .*/debug = false/}' /app/config.ini
