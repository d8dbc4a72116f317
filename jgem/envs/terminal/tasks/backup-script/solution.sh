#!/bin/bash
set -euo pipefail

cat > /app/backup.sh <<'SH'
#!/bin/bash
set -euo pipefail
dir=$(cd "$1" && pwd)
mkdir -p /app/backups
tar -czf "/app/backups/$(basename "$dir").tar.gz" -C "$(dirname "$dir")" "$(basename "$dir")"
SH
chmod +x /app/backup.sh
/app/backup.sh /app/site
