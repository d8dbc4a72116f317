"""A pytest plugin that logs each test's CPU seconds, to find what the suite spends its time on.

    JGEM_TEST_CPU_LOG=/tmp/cpu.jsonl .venv/bin/python -m pytest -p tests.cpu_log -n 2 --dist loadgroup -q tests
    .venv/bin/python -m tests.cpu_log /tmp/cpu.jsonl        # the 30 costliest tests and files

One JSON line per test (setup, call and teardown together): `self`, the CPU seconds of the pytest process (all its
threads: tracing, XLA compilation, execution); `children`, those of the subprocesses it waited for (a training run
started with `python -m ...`); `wall`. On a 2-core box under `-n 2`, wall time is shared with the other worker, CPU
time is not. Processes reaped by others are missed: Chromium's (Playwright's driver reaps them), so a web test's
wall is the better measure of its cost.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections import Counter
from pathlib import Path

import pytest


def _cpu() -> tuple[float, float]:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = os.environ.get("JGEM_TEST_CPU_LOG")
    if not path:
        yield
        return
    (me, kids), start = _cpu(), time.time()
    yield
    (me2, kids2), end = _cpu(), time.time()
    row = {"id": item.nodeid, "self": me2 - me, "children": kids2 - kids, "wall": end - start}
    row |= {"worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "start": start}
    with open(path, "a", encoding="utf-8") as f:  # one short line per append: workers' lines do not interleave
        f.write(json.dumps(row) + "\n")


def summarize(path: str | Path, top: int = 30) -> str:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    cpu = lambda r: r["self"] + r["children"]
    files: Counter[str] = Counter()
    for r in rows:
        files[r["id"].split("::")[0]] += cpu(r)
    out = [f"{len(rows)} tests, {sum(map(cpu, rows)):.0f} CPU s, {sum(r['wall'] for r in rows):.0f} wall s"]
    out += ["", "CPU s  wall s  test"]
    out += [f"{cpu(r):5.1f}  {r['wall']:6.1f}  {r['id']}" for r in sorted(rows, key=cpu, reverse=True)[:top]]
    out += ["", "CPU s  file"] + [f"{s:5.0f}  {f}" for f, s in files.most_common(top)]
    return "\n".join(out)


if __name__ == "__main__":
    print(summarize(sys.argv[1]))
