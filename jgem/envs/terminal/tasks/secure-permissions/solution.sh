#!/bin/bash
set -euo pipefail

chmod 755 /app/keys
chmod 700 /app/keys/private
chmod 600 /app/keys/private/id.key
chmod 644 /app/keys/public.txt
