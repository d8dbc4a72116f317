#!/bin/bash
set -euo pipefail

python3 - <<'PY'
import tarfile


def files(path):
    with tarfile.open(path) as t:
        return {m.name: t.extractfile(m).read() for m in t.getmembers() if m.isfile()}


old, new = files("/app/old.tar"), files("/app/new.tar")
changed = sorted(n for n in new if old.get(n) != new[n])
open("/app/changed.txt", "w").write("".join(c + "\n" for c in changed))
PY
