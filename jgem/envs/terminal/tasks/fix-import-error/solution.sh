#!/bin/bash
set -euo pipefail

sed -i 's/from shop.helpers import/from shop.tools import/' /app/shop/service.py
