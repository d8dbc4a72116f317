"""EnvPool vs GEM 0.1.0's vector envs (SyncVectorEnv, AsyncVectorEnv): env steps per second. JSON lines.

(a) cheap games, 64 envs, a scripted agent that plays a fixed per-env action table (the same table and
    the same per-step agent work on both sides): jgem's backends vs GEM's Sync and Async vector envs.
    `jgem-pool/gem-envs` runs jgem's pool over GEM's own env objects, isolating pool overhead.
(b) a latency-bound env (each step sleeps a heavy-tailed 5-200 ms, same class and seeds on both sides):
    jgem's thread pool with partial batches vs GEM's lockstep AsyncVectorEnv (SyncVectorEnv sleeps serially).

Counting: only steps count; resets are part of the timed loop on both sides (GEM resets inside `step`
with autoreset, jgem resets finished envs explicitly), so both pay for the same episodes.

    python bench/env_pool.py [--seconds 1.5] [--repeats 3] [--num-envs 64]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from jgem.core import Env  # noqa: E402
from jgem.envs.pool import EnvPool  # noqa: E402

ACTIONS = 64  # actions per env in the scripted table


def emit(**record: Any) -> None:
    print(json.dumps(record), flush=True)


def action_table(game: str, num_envs: int, seed: int = 0) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    if "GuessTheNumber" in game:
        return [[f"\\boxed{{{int(x)}}}" for x in rng.integers(1, 11, ACTIONS)] for _ in range(num_envs)]
    if "Sudoku" in game:
        return [[f"\\boxed{{{r} {c} {n}}}" for r, c, n in rng.integers(1, 5, (ACTIONS, 3))] for _ in range(num_envs)]
    raise ValueError(f"no action table for {game}")


# -- the two loops --------------------------------------------------------------------------------


def run_jgem(pool: EnvPool, table: list[list[str]], seconds: float) -> float:
    """Scripted agent on an EnvPool: act on every returned env, reset the finished ones."""
    n = pool.num_envs
    ptr = [0] * n
    pool.reset(seeds=list(range(n)))
    steps = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while True:
        b = pool.recv()
        done, live, acts = [], [], []
        for i, term, trunc in zip(b.env_ids.tolist(), b.terminated.tolist(), b.truncated.tolist()):
            if term or trunc:
                done.append(i)
            else:
                live.append(i)
                acts.append(table[i][ptr[i] % ACTIONS])
                ptr[i] += 1
        steps += len(b) - int(b.is_reset.sum())
        if time.perf_counter() > deadline:
            break
        if done:
            pool.reset(done)
        if live:
            pool.send(live, acts)
    elapsed = time.perf_counter() - t0
    while pool.num_in_flight:
        pool.recv()
    return steps / elapsed


def run_gem(vec: Any, table: list[list[str]], seconds: float) -> float:
    """The same scripted agent on a GEM vector env (which auto-resets finished envs inside step)."""
    n = vec.num_envs
    ptr = [0] * n
    vec.reset(seed=0)
    steps = 0
    t0 = time.perf_counter()
    deadline = t0 + seconds
    while time.perf_counter() < deadline:
        acts = []
        for i in range(n):
            acts.append(table[i][ptr[i] % ACTIONS])
            ptr[i] += 1
        vec.step(acts)
        steps += n
    return steps / (time.perf_counter() - t0)


# -- (b) a latency-bound env ----------------------------------------------------------------------


class LatencyEnv(Env):
    """Each step sleeps 5-200 ms, Pareto-tailed (shape 1.5, mean about 13 ms); episodes last 10 steps."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed=seed)
        self.t = 0

    def reset(self, seed: int | None = None) -> tuple[str, dict]:
        super().reset(seed)
        self.t = 0
        return "start", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        time.sleep(min(0.2, 0.005 * (1.0 + self.np_random.pareto(1.5))))
        self.t += 1
        return f"t{self.t}", 0.0, self.t >= 10, False, {}


def latency_table(num_envs: int) -> list[list[str]]:
    return [["\\boxed{go}"] * ACTIONS for _ in range(num_envs)]


# -- driver ---------------------------------------------------------------------------------------


def measure(name: str, build: Callable[[], Any], run: Callable[[Any, float], float], seconds: float) -> float:
    obj = build()
    try:
        return run(obj, seconds)
    finally:
        close = getattr(obj, "close", None)
        if close is not None and isinstance(obj, EnvPool):
            close()
        elif hasattr(obj, "thread_pool_executer"):
            obj.thread_pool_executer.shutdown(wait=True)


def compare(suite: str, game: str, configs: dict[str, tuple[Callable, Callable]], args: argparse.Namespace) -> dict:
    samples: dict[str, list[float]] = {k: [] for k in configs}
    for _ in range(args.repeats):  # interleaved, so machine-load drift hits every config alike
        for name, (build, run) in configs.items():
            samples[name].append(measure(name, build, run, args.seconds))
    med = {k: statistics.median(v) for k, v in samples.items()}
    for name, v in samples.items():
        emit(
            suite=suite,
            game=game,
            num_envs=args.num_envs,
            config=name,
            steps_per_s=round(med[name], 1),
            samples=[round(x, 1) for x in v],
        )
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=1.5, help="timed seconds per sample")
    ap.add_argument("--repeats", type=int, default=3, help="samples per config (median reported)")
    ap.add_argument("--num-envs", type=int, default=64)
    ap.add_argument("--skip-latency", action="store_true")
    args = ap.parse_args()
    n = args.num_envs

    with contextlib.redirect_stdout(io.StringIO()):  # gem prints on import and per vector env
        import gem
        from gem.vector.async_vector_env import AsyncVectorEnv
    emit(
        bench="env_pool",
        python=platform.python_version(),
        cpus=os.cpu_count(),
        machine=platform.machine(),
        gem=getattr(gem, "__version__", "0.1.0"),
        seconds=args.seconds,
        repeats=args.repeats,
    )

    def gem_vec(game: str, async_mode: bool) -> Callable[[], Any]:
        def build() -> Any:
            with contextlib.redirect_stdout(io.StringIO()):
                return gem.make_vec([game] * n, async_mode=async_mode)

        return build

    games = ["game:GuessTheNumber-v0-easy"]
    if importlib.util.find_spec("jgem.envs.games.sudoku") is not None:
        games.append("game:Sudoku-v0-easy")
    for game in games:
        table = action_table(game, n)
        jr = lambda pool, s, table=table: run_jgem(pool, table, s)  # noqa: E731
        gr = lambda vec, s, table=table: run_gem(vec, table, s)  # noqa: E731
        gem_env = lambda game=game: gem.make(game)  # noqa: E731
        configs = {
            "jgem/inline": (lambda game=game: EnvPool(game, n, backend="inline"), jr),
            "jgem/thread-4": (lambda game=game: EnvPool(game, n, backend="thread", num_workers=4), jr),
            "jgem/process-2": (lambda game=game: EnvPool(game, n, backend="process", num_workers=2), jr),
            "jgem-pool/gem-envs/inline": (lambda gem_env=gem_env: EnvPool(gem_env, n, backend="inline"), jr),
            "gem/sync": (gem_vec(game, False), gr),
            "gem/async": (gem_vec(game, True), gr),
        }
        med = compare("cheap", game, configs, args)
        jgem_best = max((k for k in med if k.startswith("jgem/")), key=med.get)
        gem_best = max((k for k in med if k.startswith("gem/")), key=med.get)
        emit(
            suite="cheap",
            game=game,
            summary=True,
            jgem_best=jgem_best,
            gem_best=gem_best,
            ratio=round(med[jgem_best] / med[gem_best], 2),
            pool_overhead_ratio=round(med["jgem-pool/gem-envs/inline"] / med["gem/sync"], 2),
        )

    if not args.skip_latency:
        from gem.vector.async_vector_env import AsyncVectorEnv

        table = latency_table(n)
        jr = lambda pool, s: run_jgem(pool, table, s)  # noqa: E731
        gr = lambda vec, s: run_gem(vec, table, s)  # noqa: E731
        fns = [lambda i=i: LatencyEnv(seed=i) for i in range(n)]
        configs = {
            f"jgem/thread/batch{n // 4}": (lambda: EnvPool(LatencyEnv, n, backend="thread", batch_size=n // 4), jr),
            f"jgem/thread/batch{n}": (lambda: EnvPool(LatencyEnv, n, backend="thread"), jr),
            "gem/async": (lambda: AsyncVectorEnv(env_ids=["latency"] * n, env_fns=fns), gr),
        }
        args_b = argparse.Namespace(**{**vars(args), "seconds": max(args.seconds, 3.0)})
        med = compare("latency", "LatencyEnv(5-200ms)", configs, args_b)
        emit(
            suite="latency",
            summary=True,
            jgem=f"jgem/thread/batch{n // 4}",
            gem="gem/async",
            ratio=round(med[f"jgem/thread/batch{n // 4}"] / med["gem/async"], 2),
        )


if __name__ == "__main__":
    main()
