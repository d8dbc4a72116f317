#!/bin/bash
set -euo pipefail

tr -s ' \n' '\n\n' < /app/text.txt | grep -v '^$' | sort | uniq -c | sort -k1,1nr -k2 | head -3 | awk '{print $2, $1}' > /app/top_words.txt
