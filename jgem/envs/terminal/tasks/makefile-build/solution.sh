#!/bin/bash
set -euo pipefail

printf 'hello: hello.c\n\tcc -O0 -o hello hello.c\n\nclean:\n\trm -f hello\n\n.PHONY: clean\n' > /app/Makefile
cd /app && make -s
