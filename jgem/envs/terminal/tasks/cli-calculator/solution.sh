#!/bin/bash
set -euo pipefail

cat > /app/calc.py <<'PY'
import sys

OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b}


def main(argv):
    op, a, b = argv[0], float(argv[1]), float(argv[2])
    if op == "div" and b == 0:
        print("error: division by zero", file=sys.stderr)
        return 1
    r = OPS[op](a, b)
    print(int(r) if r == int(r) else r)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
PY
