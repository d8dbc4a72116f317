"""Sandboxed Python executions per second: jgem's worker pool vs a fresh interpreter per call, and
GEM's PythonCodeTool (gem-llm 0.1.0, sandbox_type="none") on the same snippets in the same run.

    python bench/sandbox.py [--n 60] [--threads 1 2]

Prints one JSON line per implementation and thread count, then ratios (jgem / GEM).
Every implementation must produce the same outputs; the script checks that before timing counts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

SNIPPETS = [
    "print('hello')",
    "print(sum(i * i for i in range(10000)))",
    "n = 2000\ns = [1] * n\nfor i in range(2, n):\n    if s[i]:\n        s[i*i::i] = [0] * len(s[i*i::i])\n"
    "print(sum(s[2:]))",
    "from fractions import Fraction\nprint(sum(Fraction(1, k) for k in range(1, 30)))",
    "words = 'the quick brown fox jumps over the lazy dog'.split()\nprint(sorted(words, key=len)[-1].upper())",
]


def _time(run, n: int, threads: int) -> tuple[float, list[float], list[str]]:
    jobs = [SNIPPETS[i % len(SNIPPETS)] for i in range(n)]

    def one(code: str) -> tuple[float, str]:
        t = time.perf_counter()
        out = run(code)
        return time.perf_counter() - t, out

    t0 = time.perf_counter()
    with ThreadPoolExecutor(threads) as ex:
        results = list(ex.map(one, jobs))
    return time.perf_counter() - t0, [r[0] for r in results], [r[1] for r in results]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=60, help="executions per implementation and thread count")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    # GEM runs `python` from PATH: make that the interpreter running this script, for a fair race.
    os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")

    from jgem.envs.tools.sandbox import Sandbox, SandboxConfig

    impls = {}
    pools = {}
    for threads in args.threads:
        pools[threads] = Sandbox(SandboxConfig(timeout=10.0), workers=threads)
    fresh = Sandbox(SandboxConfig(timeout=10.0), workers=max(args.threads), mode="fresh")
    impls["jgem-pool"] = lambda code, threads: pools[threads].run(code).stdout
    impls["jgem-fresh"] = lambda code, threads: fresh.run(code).stdout
    try:
        from gem.tools.python_code_tool import PythonCodeTool

        gem_tool = PythonCodeTool(timeout=10, sandbox_type="none")
        impls["gem-PythonCodeTool"] = lambda code, threads: gem_tool.execute_action(f"<python>{code}</python>")[
            2
        ].removeprefix("Code execution result: ")[:-1]
    except ImportError:
        print(json.dumps({"bench": "sandbox", "skipped": "gem-llm not installed (pip install jgem[bench])"}))

    env = {"machine": platform.machine(), "cpus": os.cpu_count(), "python": platform.python_version()}
    rates: dict[tuple[str, int], float] = {}
    reference = None
    for threads in args.threads:
        for name, fn in impls.items():
            fn(SNIPPETS[0], threads)  # warm-up: imports, worker start
            total, lat, outs = _time(lambda c, fn=fn, t=threads: fn(c, t), args.n, threads)
            if reference is None:
                reference = outs
            if outs != reference:
                raise SystemExit(f"{name} produced different outputs: {outs[:3]} vs {reference[:3]}")
            rates[(name, threads)] = args.n / total
            lat_ms = sorted(x * 1000 for x in lat)
            print(
                json.dumps(
                    {
                        "bench": "sandbox",
                        "impl": name,
                        "threads": threads,
                        "n": args.n,
                        "execs_per_s": round(args.n / total, 1),
                        "p50_ms": round(statistics.median(lat_ms), 1),
                        "p95_ms": round(lat_ms[int(0.95 * (len(lat_ms) - 1))], 1),
                        **env,
                    }
                ),
                flush=True,
            )
    for threads in args.threads:
        peer = rates.get(("gem-PythonCodeTool", threads))
        if peer:
            print(
                json.dumps(
                    {
                        "bench": "sandbox",
                        "ratio": "jgem / gem-PythonCodeTool",
                        "threads": threads,
                        "pool": round(rates[("jgem-pool", threads)] / peer, 2),
                        "fresh": round(rates[("jgem-fresh", threads)] / peer, 2),
                    }
                )
            )
    for sb in (*pools.values(), fresh):
        sb.close()


if __name__ == "__main__":
    main()
