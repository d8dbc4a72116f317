"""Web envs: steps/s and reset latency per pool backend (a browser per thread vs a browser per process), per
observation (WebArena's accessibility tree vs the text rendering), and the memory of one browser.

Each configuration runs `--envs` WebEnvs in an `EnvPool` and plays shipped tasks with their scripted solver
(`jgem.envs.web.solver`, reading each task from the reset info, so it works across processes): every env is
driven on its own, its next action sent as soon as its result arrives (`send`/`recv` partial batches), a finished
episode reset at once on the next seed, until `--episodes` episodes ended. The first `--envs` episodes warm up
(browser and site start, first page loads) and are not timed. Reported per configuration: env steps/s, reset
latency (median and p90 of reset-to-result), the solver's score (1.0: every task solved), and the memory (PSS)
of the browsers (the chromium processes started, per env) and of the pool's worker processes. Ratios against
the first configuration (thread backend, accessibility tree) follow.

    .venv/bin/python bench/web.py                           # Shop-v0-easy, 4 envs, 24 episodes per configuration
    .venv/bin/python bench/web.py --env web:Forum-v0-hard --envs 2 --episodes 8
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import psutil

from jgem.envs.pool import EnvPool
from jgem.envs.web.solver import WebSolver

CONFIGS = (("thread", "accessibility_tree"), ("process", "accessibility_tree"), ("thread", "text"))


def chromium_pss() -> dict[int, int]:
    """pid -> proportional set size (bytes; shared pages split among their sharers, so a sum over chromium's
    processes does not count its shared libraries once per process) of every chromium process on the machine."""
    out = {}
    for p in psutil.process_iter(["name", "memory_full_info"]):
        if "chrom" in (p.info["name"] or "") and p.info["memory_full_info"] is not None:
            out[p.pid] = p.info["memory_full_info"].pss
    return out


def run(env_id: str, backend: str, observation: str, num_envs: int, episodes: int) -> dict:
    before = set(chromium_pss())
    pool = EnvPool(env_id, num_envs, backend=backend, num_workers=num_envs, env_kwargs={"observation": observation})
    try:
        solvers = [WebSolver() for _ in range(num_envs)]
        next_seed = 0
        reset_at: dict[int, float] = {}

        def reset(i: int) -> None:
            nonlocal next_seed
            reset_at[i] = time.perf_counter()
            pool.reset([i], seeds=[next_seed])
            next_seed += 1

        for i in range(num_envs):
            reset(i)
        ended, steps, scores, resets, t0 = 0, 0, [], [], None
        while ended < episodes + num_envs:
            b = pool.recv()
            now = time.perf_counter()
            for k, i in enumerate(b.env_ids.tolist()):
                obs, info = b.obs[k], b.infos[k]
                if "fault" in info:
                    raise RuntimeError(f"env {i} faulted: {info['fault']}")
                if b.is_reset[k]:
                    if t0 is not None:
                        resets.append(now - reset_at[i])
                    solvers[i].reset(obs, info, None)
                elif b.terminated[k] or b.truncated[k]:
                    ended += 1
                    if t0 is not None:
                        scores.append(float(b.rewards[k]))
                    if ended == num_envs and t0 is None:  # warm-up over: every env has played an episode
                        t0, steps = now, 0
                    reset(i)
                    continue
                if t0 is not None:
                    steps += 1
                pool.send([i], [solvers[i].act(obs, info, None)])
        wall = time.perf_counter() - t0
        browsers = {pid: m for pid, m in chromium_pss().items() if pid not in before}
        workers = pool._backend.pids if backend == "process" else []
        worker_pss = sum(psutil.Process(p).memory_full_info().pss for p in workers if psutil.pid_exists(p))
    finally:
        pool.close()
    return {
        "backend": backend,
        "observation": observation,
        "steps_per_s": steps / wall,
        "reset_ms_median": 1e3 * statistics.median(resets),
        "reset_ms_p90": 1e3 * statistics.quantiles(resets, n=10)[-1],
        "score": statistics.fmean(scores),
        "episodes": len(scores),
        "steps": steps,
        "browser_mib_per_env": sum(browsers.values()) / num_envs / 2**20,
        "chromium_processes_per_env": len(browsers) / num_envs,
        "worker_mib_per_env": worker_pss / num_envs / 2**20,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="web:Shop-v0-easy")
    ap.add_argument("--envs", type=int, default=4)
    ap.add_argument("--episodes", type=int, default=24, help="timed episodes per configuration")
    args = ap.parse_args()
    rows = [run(args.env, b, o, args.envs, args.episodes) for b, o in CONFIGS]
    for r in rows:
        print(json.dumps({"env": args.env, "envs": args.envs, **r}))
    base = rows[0]
    print(f"\n{args.env}, {args.envs} envs, {args.episodes} timed episodes per configuration")
    print("| backend | observation | steps/s | vs thread+tree | reset ms (median / p90) | score | browser MiB/env |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['backend']} | {r['observation']} | {r['steps_per_s']:.1f} | "
            f"{r['steps_per_s'] / base['steps_per_s']:.2f}x | {r['reset_ms_median']:.0f} / {r['reset_ms_p90']:.0f} | "
            f"{r['score']:.2f} | {r['browser_mib_per_env']:.0f} |"
        )


if __name__ == "__main__":
    main()
