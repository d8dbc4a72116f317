#!/bin/bash
set -euo pipefail

cd /app/inventory/inventory
sed -i 's/self.items\[name\] = qty/self.items[name] = self.items.get(name, 0) + qty/' store.py
sed -i 's/return self.items\[name\]/return self.items.get(name, 0)/' store.py
