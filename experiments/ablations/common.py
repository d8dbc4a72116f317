"""Shared machinery of the ablation scripts: one `experiments.train` subprocess per (variant, seed), each in its
own run dir, then a table and a plot of the final eval success rate per variant.

A run is a subprocess (not an in-process Trainer) so every run starts from a clean JAX and env-pool state and a
crash in one run does not lose the others. Re-running a sweep skips runs whose summary.json is complete and
resumes unfinished ones (the trainer resumes from its run dir).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

METRIC = "eval/success_rate"
REPO = Path(__file__).resolve().parents[2]  # runs start here, so `-m experiments.train` imports this checkout


@dataclass(frozen=True)
class Run:
    """One training run of a sweep: the variant it belongs to, its seed, and its CLI overrides."""

    variant: str
    seed: int
    run_dir: Path
    overrides: tuple[str, ...]
    extra: tuple[str, ...] = field(default=())

    def argv(self, preset: str) -> list[str]:
        """Arguments after `python -m experiments.train`; `extra` (user pass-through) comes last and wins."""
        return [preset, "--run-dir", str(self.run_dir), "--seed", str(self.seed), *self.overrides, *self.extra]

    def command(self, preset: str) -> list[str]:
        return [sys.executable, "-m", "experiments.train", *self.argv(preset)]


def base_parser(description: str, default_out: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        description=description,
        epilog="Arguments after `--` go to every run unchanged, e.g. `-- --eval-episodes 16 --env.num-envs 8`.",
    )
    ap.add_argument("--preset", default="tiny", help="experiments.train preset (default: tiny)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds per variant")
    ap.add_argument("--steps", type=int, default=None, help="training steps per run (default: the preset's)")
    ap.add_argument("--eval-every", type=int, default=None, help="eval interval (default: the preset's)")
    ap.add_argument("--out", default=default_out, help=f"sweep directory (default: {default_out})")
    ap.add_argument(
        "--metric",
        default=METRIC,
        help=f"metric compared across variants (default: {METRIC}; e.g. rollout/success_rate when --eval-every 0)",
    )
    ap.add_argument("--dry-run", action="store_true", help="print each run's command and config, run nothing")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time (at most the machine's cores; default 1)")
    return ap


def split_argv(argv: Sequence[str] | None) -> tuple[list[str], list[str]]:
    """(script args, pass-through args after `--`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def common_overrides(args: argparse.Namespace) -> list[str]:
    out = ["--no-console"]  # many runs: keep the sweep's own output readable
    if args.steps is not None:
        out += ["--steps", str(args.steps)]
    if args.eval_every is not None:
        out += ["--eval-every", str(args.eval_every)]
    return out


def resolve_config(preset: str, argv: Sequence[str]) -> Any:
    """The TrainConfig the train CLI would build from `argv` (parsed by the same tyro CLI), validated for the
    local devices; raises SystemExit/ValueError with tyro's or validate's message on a bad override."""
    import jax
    import tyro

    from experiments.configs import PRESETS
    from jgem.config import validate

    cfg = tyro.extras.overridable_config_cli(PRESETS, args=list(argv), console_outputs=True)
    validate(cfg, jax.device_count())
    return cfg


def dry_run(runs: Sequence[Run], preset: str, fields: Sequence[str]) -> None:
    """Print each run's command and the config fields the sweep varies (after parsing and validation)."""
    import shlex

    for r in runs:
        cfg = resolve_config(preset, r.argv(preset))
        shown = {f: _get(cfg, f) for f in fields}
        print(
            json.dumps(
                {
                    "variant": r.variant,
                    "seed": r.seed,
                    "run_dir": str(r.run_dir),
                    "config": shown,
                    "command": shlex.join(r.command(preset)),
                },
                default=str,
            )
        )


def _get(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


def run_all(runs: Sequence[Run], preset: str, steps: int | None, jobs: int = 1) -> list[Run]:
    """Run each not-yet-finished run, `jobs` at a time; a failed run is reported and the sweep goes on. Returns the
    runs that did not finish (non-zero exit, or no complete summary.json)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(k: int, r: Run) -> Run | None:
        if _finished(r.run_dir, steps):
            print(f"[{k + 1}/{len(runs)}] {r.variant} seed {r.seed}: done already ({r.run_dir})", flush=True)
            return None
        print(f"[{k + 1}/{len(runs)}] {r.variant} seed {r.seed} -> {r.run_dir}", flush=True)
        r.run_dir.mkdir(parents=True, exist_ok=True)
        with open(r.run_dir / "sweep.log", "a", encoding="utf-8") as log:
            rc = subprocess.call(r.command(preset), stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
        if rc or not _finished(r.run_dir, steps):
            why = f"exit code {rc}" if rc else "no complete summary.json"
            print(f"  FAILED: {r.variant} seed {r.seed} ({why}); see {r.run_dir / 'sweep.log'}", flush=True)
            return r
        print(f"  done: {r.variant} seed {r.seed}", flush=True)
        return None

    with ThreadPoolExecutor(max(1, jobs)) as ex:
        return [r for r in ex.map(one, range(len(runs)), runs) if r is not None]


def _finished(run_dir: Path, steps: int | None) -> bool:
    """The trainer wrote summary.json (it does so only at the end of a run), for `steps` steps when given."""
    p = run_dir / "summary.json"
    if not p.is_file():
        return False
    try:
        s = json.loads(p.read_text())
    except json.JSONDecodeError:
        return False
    return isinstance(s, dict) and (steps is None or s.get("steps") == steps)


def final_metric(run_dir: Path, metric: str = METRIC, steps: int | None = None) -> float | None:
    """A finished run's last value of `metric`: summary.json's final_eval, else the last metrics.jsonl row that has
    it (a metric eval does not log, e.g. rollout/success_rate). None for a run that did not finish: a crashed
    run's metrics (often only the random-init eval) are not a result."""
    if not _finished(run_dir, steps):
        return None
    v = json.loads((run_dir / "summary.json").read_text()).get("final_eval", {}).get(metric)
    if v is not None:
        return float(v)
    m = run_dir / "metrics.jsonl"
    if m.is_file():
        from jgem.metrics import read_jsonl

        vals = [r[metric] for r in read_jsonl(m) if r.get(metric) is not None]
        if vals:
            return float(vals[-1])
    return None


def curve(run_dir: Path, metric: str = METRIC) -> list[tuple[int, float]]:
    from jgem.metrics import read_jsonl

    m = run_dir / "metrics.jsonl"
    if not m.is_file():
        return []
    return sorted((int(r["step"]), float(r[metric])) for r in read_jsonl(m) if r.get(metric) is not None)


def summarize(
    runs: Sequence[Run], out: Path, xlabel: str, *, numeric_x: bool, metric: str = METRIC, steps: int | None = None
) -> list[dict]:
    """Write results.json, results.md (variant, finished runs, mean, std, per seed, failed seeds) and plot.png;
    return the rows. A run that did not finish (for `steps` steps when given) is listed as failed, never averaged."""
    rows = []
    for variant in dict.fromkeys(r.variant for r in runs):
        mine = [r for r in runs if r.variant == variant]
        failed = [r.seed for r in mine if not _finished(r.run_dir, steps)]
        vals = {r.seed: final_metric(r.run_dir, metric, steps) for r in mine if r.seed not in failed}
        got = [v for v in vals.values() if v is not None]
        rows.append(
            {
                "variant": variant,
                "n": len(got),
                "mean": statistics.mean(got) if got else None,
                "std": statistics.stdev(got) if len(got) > 1 else 0.0 if got else None,
                "per_seed": vals,
                "failed": failed,
            }
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(rows, indent=2))
    lines = [f"| {xlabel} | runs | {metric} mean | std | per seed | failed seeds |", "|---|---:|---:|---:|---|---|"]
    for r in rows:
        per = ", ".join(f"{s}: {_fmt(v)}" for s, v in r["per_seed"].items())
        failed = ", ".join(map(str, r["failed"])) or "-"
        lines.append(f"| {r['variant']} | {r['n']} | {_fmt(r['mean'])} | {_fmt(r['std'])} | {per} | {failed} |")
    table = "\n".join(lines) + "\n"
    (out / "results.md").write_text(table)
    print(table)
    _plot(runs, rows, out / "plot.png", xlabel, numeric_x=numeric_x, metric=metric)
    print(f"wrote {out / 'results.md'}, {out / 'results.json'}, {out / 'plot.png'}")
    return rows


def exit_on_failures(rows: list[dict]) -> None:
    """Exit non-zero when any run of the sweep failed, naming them (after the table is written)."""
    failed = [f"{r['variant']} seed {s}" for r in rows for s in r["failed"]]
    if failed:
        raise SystemExit(f"{len(failed)} run(s) failed: {', '.join(failed)}; their sweep.log says why")


def _fmt(v: float | None) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def _plot(runs: Sequence[Run], rows: list[dict], path: Path, xlabel: str, *, numeric_x: bool, metric: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    done = [r for r in rows if r["mean"] is not None]
    xs = [float(r["variant"]) for r in done] if numeric_x else list(range(len(done)))
    ax1.errorbar(
        xs,
        [r["mean"] for r in done],
        yerr=[r["std"] for r in done],
        marker="o",
        capsize=4,
        linestyle="-" if numeric_x else "none",
    )
    for x, r in zip(xs, done):  # every seed, so the spread is visible
        ax1.scatter([x] * r["n"], [v for v in r["per_seed"].values() if v is not None], s=12, alpha=0.4, color="gray")
    if not numeric_x:
        ax1.set_xticks(xs, [r["variant"] for r in done], rotation=30)
    ax1.set_xlabel(xlabel)
    ax1.set_ylabel(f"final {metric}")
    ax1.grid(alpha=0.3)
    per_seed = {r["variant"]: r["per_seed"] for r in rows}  # finished runs only
    for variant in dict.fromkeys(r.variant for r in runs):  # mean curve over seeds, on the steps all share
        curves = [dict(curve(r.run_dir, metric)) for r in runs if r.variant == variant and r.seed in per_seed[variant]]
        curves = [c for c in curves if c]
        if not curves:
            continue
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        ax2.plot(steps, [statistics.mean(c[s] for c in curves) for s in steps], marker=".", label=f"{xlabel} {variant}")
    ax2.set_xlabel("step")
    ax2.set_ylabel(f"{metric} (mean over seeds)")
    ax2.grid(alpha=0.3)
    if ax2.lines:
        ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
