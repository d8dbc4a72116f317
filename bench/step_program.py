"""The training step after the rollout: one device program (this checkout) vs the host round trips it replaced.

Peer: the trainer at a baseline commit (default a05aae2, the last one before issue 29), checked out into a git
worktree and run by this same script: there a step is `make_batch` (packing, the reference log-probs, the critic's
values and the bootstrap batch read back to the host, advantages as a program of their own, the batch uploaded
again) then `update`. Here it is `Trainer.learn`: one upload, `train_step`, one download. Both sides play the same
episodes (the same seed and rollout code) once, then time `--reps` steps on them after one untimed step (compile).
Workers alternate sides per model, so machine load hits both alike.

    .venv/bin/python bench/step_program.py --models tiny 100m
Prints one JSON line per (model, algorithm, side) and the ratios.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CASES = (("rebn", 0.0), ("grpo", 0.0), ("ppo", 0.1), ("reinforce_pp", 0.1))  # (algorithm, kl_coef)


def worker(model: str, episodes: int, reps: int, run_dir: str) -> None:
    from experiments.configs import tiny
    from jgem.config import ModelSpec, WarmStartConfig
    from jgem.train import Trainer

    for algorithm, kl in CASES:
        base = tiny()
        cfg = dataclasses.replace(
            base,
            run_dir=f"{run_dir}/{model}-{algorithm}",
            algorithm=algorithm,
            group_size=4 if algorithm == "grpo" else 1,
            episodes_per_step=episodes,
            env=dataclasses.replace(base.env, num_envs=episodes),
            model=ModelSpec(preset=model),
            learner=dataclasses.replace(base.learner, kl_coef=kl),
            warm_start=WarmStartConfig(steps=0),
            curriculum=dataclasses.replace(base.curriculum, horizons=(4,), stage_steps=1000),  # some cut: bootstrap
        )
        tr = Trainer(cfg)
        eps = tr.collect(0)
        step = functools.partial(_step, tr, eps)
        step()  # compiles
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            step()
            times.append(time.perf_counter() - t)
        tr.pool.close()
        print(
            json.dumps(
                {
                    "model": model,
                    "algorithm": algorithm,
                    "kl_coef": kl,
                    "episodes": len(eps),
                    "step_s": statistics.median(times),
                    "times": [round(t, 4) for t in times],
                    "jgem": str(Path(sys.modules["jgem"].__file__).parents[1]),
                }
            ),
            flush=True,
        )


def _step(tr, eps) -> float:
    """One step after the rollout, as the checkout's trainer makes it."""
    import jax

    if hasattr(tr, "learn"):  # one upload, one program, one download
        return tr.learn(eps)["loss"]
    batch, _ = tr.learner.make_batch(eps)  # the baseline: make_batch's round trips, then update
    tr.state, m = tr._update(tr.state, batch)
    return float(jax.device_get(m)["loss"])


def run_side(root: Path, model: str, args) -> list[dict]:
    cmd = [sys.executable, str(REPO / "bench" / "step_program.py"), "--worker", model]
    cmd += ["--episodes", str(args.episodes[model]), "--reps", str(args.reps), "--run-dir", args.run_dir]
    env = {"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, check=False)
    if out.returncode:
        raise SystemExit(f"worker in {root} failed:\n{out.stderr[-3000:]}")
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    wrong = {r["jgem"] for r in rows} - {str(root)}
    if wrong:
        raise SystemExit(f"the worker for {root} imported jgem from {wrong}")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["tiny", "100m"])
    ap.add_argument("--baseline", default="a05aae2", help="the commit whose trainer is the peer")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--run-dir", default="/tmp/jgem-step-bench")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--episodes", type=int, default=None, help="episodes a step (default: 32 tiny, 16 100m)")
    args = ap.parse_args()
    if args.worker:
        worker(args.worker, args.episodes, args.reps, args.run_dir)
        return
    args.episodes = {m: args.episodes or (32 if m == "tiny" else 16) for m in args.models}
    base = Path(f"/tmp/jgem-baseline-{args.baseline}")
    if not base.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(base), args.baseline], cwd=REPO, check=True)
    print(json.dumps({"bench": "step_program", "baseline": args.baseline, "models": args.models, "reps": args.reps}))
    for model in args.models:
        rows = {}
        for side, root in (("baseline", base), ("jgem", REPO)):
            for r in run_side(root, model, args):
                rows[(r["algorithm"], side)] = r
                print(json.dumps({**r, "side": side}), flush=True)
        for algorithm, _ in CASES:
            b, j = rows[(algorithm, "baseline")]["step_s"], rows[(algorithm, "jgem")]["step_s"]
            print(json.dumps({"model": model, "algorithm": algorithm, "baseline_over_jgem": round(b / j, 3)}))


if __name__ == "__main__":
    main()
