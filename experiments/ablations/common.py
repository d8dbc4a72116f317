"""Shared machinery of the ablation scripts: one `experiments.train` subprocess per (variant, seed), each in its
own run dir, then a table and a plot of the final metrics per variant with 95% intervals over seeds.

A run is a subprocess (not an in-process Trainer) so every run starts from a clean JAX and env-pool state and a
crash in one run does not lose the others. Re-running a sweep skips runs whose summary.json is complete and
resumes unfinished ones (the trainer resumes from its run dir).

With a shared warm start (`with_shared_warm_start`) each seed's supervised warm start runs once, as a run of 0 RL
steps in `<out>/warm/seed<s>` exported to `<out>/warm/seed<s>/hf`, and every variant of that seed trains from that
export with no warm start of its own: the variants of a seed then start from the same policy (paired), and the
warm start is paid once per seed instead of once per run. With `--warm-starts one` a single warm start (the
first seed's, in `<out>/warm/all-seed<s>`) serves every seed: the seeds then differ only in RL (sampling, the
evaluation's games), and the warm start is paid once per sweep.

The runs of a sweep share one persistent JAX compilation cache (`<out>/.jax_cache`, unless
`JAX_COMPILATION_CACHE_DIR` is set): they compile the same programs (one model, one config but the variant), so
every run after the first loads them instead of compiling again.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

METRIC = "eval/success_rate"
CURVE_METRIC = "rollout/success_rate"
WARM = "warm-start"  # the variant name of a shared warm-start run
PROGRESS_EVERY = 60.0  # seconds between progress lines while runs execute
REPO = Path(__file__).resolve().parents[2]  # runs start here, so `-m experiments.train` imports this checkout
# t_{0.975} of Student's t with 1..30 degrees of freedom: the 95% interval of a mean over n seeds uses df n - 1
T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


@dataclass(frozen=True)
class Run:
    """One training run of a sweep: the variant it belongs to, its seed, and its CLI overrides."""

    variant: str
    seed: int
    run_dir: Path
    overrides: tuple[str, ...]
    extra: tuple[str, ...] = field(default=())
    warm: Path | None = None
    """the shared warm-start run this run trains from (its export `<warm>/hf`); None: the run's own warm start"""

    @property
    def is_warm_start(self) -> bool:
        return self.variant == WARM

    def argv(self, preset: str) -> list[str]:
        """Arguments after `python -m experiments.train`; `extra` (user pass-through) comes after the sweep's
        overrides and wins, except over the shared warm start's flags (`pinned`), which come last."""
        run = [preset, "--run-dir", str(self.run_dir), "--seed", str(self.seed)]
        return [*run, *self.overrides, *self.extra, *self.pinned()]

    def command(self, preset: str) -> list[str]:
        return [sys.executable, "-m", "experiments.train", *self.argv(preset)]

    def pinned(self) -> list[str]:
        """The flags after the pass-through: a shared warm start trains 0 RL steps; a run that starts from one
        loads its export, does not warm-start again, and does not evaluate it again (the warm start's run did)."""
        if self.is_warm_start:
            return ["--steps", "0"]
        if self.warm is not None:
            return ["--model.path", str(self.warm / "hf"), "--warm-start.steps", "0", "--no-eval-at-start"]
        return []

    def export_command(self) -> list[str]:
        """Exports a shared warm start's policy to `<run_dir>/hf`, the checkpoint its seed's runs start from."""
        return [sys.executable, "-m", "experiments.export", str(self.run_dir), "--out", str(self.run_dir / "hf")]

    def steps(self, sweep_steps: int | None) -> int | None:
        """The steps its summary.json must record to count as finished: 0 for a shared warm start."""
        return 0 if self.is_warm_start else sweep_steps


def base_parser(
    description: str,
    default_out: str,
    *,
    preset: str = "tiny",
    metrics: Sequence[str] = (METRIC,),
    curve_metric: str = CURVE_METRIC,
    shared_warm_start: bool = False,
    baseline: str | None = None,
) -> argparse.ArgumentParser:
    """The options every sweep has; `shared_warm_start` adds --shared-warm-start / --no-shared-warm-start and
    --warm-starts per-seed | one."""
    ap = argparse.ArgumentParser(
        description=description,
        epilog="Arguments after `--` go to every run unchanged, e.g. `-- --eval-episodes 16 --env.num-envs 8`.",
    )
    ap.add_argument("--preset", default=preset, help=f"experiments.train preset (default: {preset})")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="seeds per variant")
    ap.add_argument("--steps", type=int, default=None, help="training steps per run (default: the preset's)")
    ap.add_argument("--eval-every", type=int, default=None, help="eval interval (default: the preset's)")
    ap.add_argument("--out", default=default_out, help=f"sweep directory (default: {default_out})")
    ap.add_argument(
        "--metric",
        dest="metrics",
        metavar="METRIC",
        nargs="+",
        default=list(metrics),
        help=f"final metrics compared across variants, the first the primary one (default: {' '.join(metrics)}; "
        "e.g. rollout/success_rate when --eval-every 0)",
    )
    ap.add_argument(
        "--curve-metric",
        default=curve_metric,
        help=f"per-step metric of the learning-curve panel (default: {curve_metric})",
    )
    ap.add_argument(
        "--baseline",
        default=baseline,
        help="the variant the others are compared with seed by seed (paired differences with 95%% intervals in "
        f"results.md; default: {baseline})",
    )
    ap.add_argument("--dry-run", action="store_true", help="print each run's command and config, run nothing")
    ap.add_argument("--jobs", type=int, default=1, help="runs at a time (at most the machine's cores; default 1)")
    if shared_warm_start:
        ap.add_argument(
            "--shared-warm-start",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="warm-start once per seed (<out>/warm/seed<s>) and train every variant of that seed from it "
            "(default: on when the runs have a warm start)",
        )
        ap.add_argument(
            "--warm-starts",
            choices=["per-seed", "one"],
            default="per-seed",
            help="with the shared warm start: one per seed (default), or one for the whole sweep (the first "
            "seed's, <out>/warm/all-seed<s>), which every seed's runs train from",
        )
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


def use_shared_warm_start(args: argparse.Namespace, extra: Sequence[str]) -> bool:
    """--shared-warm-start as given; by default on when the runs (the preset with the sweep's overrides and the
    pass-through) have a warm start to share."""
    if args.shared_warm_start is False:
        return False
    warm_steps = resolve_config(args.preset, [args.preset, *common_overrides(args), *extra]).warm_start.steps
    if args.shared_warm_start and not warm_steps:
        raise SystemExit("--shared-warm-start: the runs have no warm start to share (warm_start.steps is 0)")
    return warm_steps > 0


def with_shared_warm_start(
    runs: Sequence[Run], out: Path, overrides: Sequence[str], extra: Sequence[str], *, one: bool = False
) -> list[Run]:
    """One warm-start run per seed in `<out>/warm/seed<s>` (the sweep's common `overrides`, none of a variant's),
    then `runs`, each training from its seed's export; with `one`, a single warm start with the first seed, in
    `<out>/warm/all-seed<s>`, that every run trains from. The warm starts come first: `run_all` starts them first."""
    seeds = list(dict.fromkeys(r.seed for r in runs))
    if one:
        w = Run(WARM, seeds[0], out / "warm" / f"all-seed{seeds[0]}", tuple(overrides), tuple(extra))
        warm = dict.fromkeys(seeds, w)
    else:
        warm = {s: Run(WARM, s, out / "warm" / f"seed{s}", tuple(overrides), tuple(extra)) for s in seeds}
    firsts = list({w.run_dir: w for w in warm.values()}.values())
    return [*firsts, *(dataclasses.replace(r, warm=warm[r.seed].run_dir) for r in runs)]


def resolve_config(preset: str, argv: Sequence[str]) -> Any:
    """The TrainConfig the train CLI would build from `argv` (parsed by the same tyro CLI, after importing the
    `--import` modules, which may register the env ids and model presets the runs name), validated for the local
    devices; raises SystemExit/ValueError with tyro's or validate's message on a bad override."""
    import importlib

    import jax
    import tyro

    from experiments.configs import PRESETS
    from experiments.train import pop_imports
    from jgem.config import validate

    modules, args = pop_imports(argv)
    for m in modules:
        importlib.import_module(m)
    cfg = tyro.extras.overridable_config_cli(PRESETS, args=args, console_outputs=True)
    validate(cfg, jax.device_count())
    return cfg


def dry_run(runs: Sequence[Run], preset: str, fields: Sequence[str]) -> None:
    """Print each run's command and the config fields the sweep varies (after parsing and validation). A run
    that starts from a shared warm start not exported yet is validated without `--model.path` (validation wants
    the checkpoint there), the path it will load shown as `starts_from`."""
    import shlex

    for r in runs:
        argv = r.argv(preset)
        row: dict[str, Any] = {"variant": r.variant, "seed": r.seed, "run_dir": str(r.run_dir)}
        if r.warm is not None:
            row["starts_from"] = str(r.warm / "hf")
            if not (r.warm / "hf" / "config.json").is_file():
                i = argv.index("--model.path")
                del argv[i : i + 2]
        cfg = resolve_config(preset, argv)
        row |= {"config": {f: _get(cfg, f) for f in fields}, "command": shlex.join(r.command(preset))}
        print(json.dumps(row, default=str))


def _get(cfg: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        cfg = getattr(cfg, part)
    return cfg


# -- running -----------------------------------------------------------------------------------------


def cap_jobs(jobs: int) -> int:
    """`jobs`, at most the machine's cores: each run is a JAX process that keeps a core busy."""
    if jobs < 1:
        raise SystemExit(f"--jobs {jobs}: need at least 1")
    cores = os.cpu_count() or 1
    if jobs > cores:
        print(f"--jobs {jobs} is more than this machine's {cores} cores; running {cores} at a time", flush=True)
    return min(jobs, cores)


def run_all(
    runs: Sequence[Run], preset: str, steps: int | None, jobs: int = 1, progress_every: float = PROGRESS_EVERY
) -> list[Run]:
    """Run each not-yet-finished run, `jobs` at a time (capped at the cores), printing progress every
    `progress_every` seconds; a failed run is reported and the sweep goes on. Shared warm starts are queued first
    and exported when done; a run that starts from one waits for it, and fails without running if it failed.
    Returns the runs that did not finish (non-zero exit, or no complete summary.json or export)."""
    from concurrent.futures import ThreadPoolExecutor

    ordered = sorted(runs, key=lambda r: not r.is_warm_start)  # the pool is FIFO: no run waits on a queued one
    progress = _Progress(len(runs), progress_every)
    done: dict[Path, Future[bool]] = {}
    with ThreadPoolExecutor(cap_jobs(jobs)) as ex, progress:
        for k, r in enumerate(ordered):
            done[r.run_dir] = ex.submit(
                _run_one, r, f"[{k + 1}/{len(runs)}]", preset, steps, progress, done.get(r.warm)
            )
        return [r for r in runs if not done[r.run_dir].result()]


def _run_one(r: Run, tag: str, preset: str, steps: int | None, progress: _Progress, warm: Future[bool] | None) -> bool:
    """Train (and export, for a shared warm start) one run unless complete already; whether it is complete."""
    name = f"{r.variant} seed {r.seed}"
    if _complete(r, steps):
        print(f"{tag} {name}: done already ({r.run_dir})", flush=True)
        return progress.ended(True)
    r.run_dir.mkdir(parents=True, exist_ok=True)
    log_path = r.run_dir / "sweep.log"
    if warm is not None and not warm.result():
        log_path.write_text(f"not run: its shared warm start failed; see {r.warm / 'sweep.log'}\n")
        print(f"  FAILED: {name} (its warm start failed); see {r.warm / 'sweep.log'}", flush=True)
        return progress.ended(False)
    print(f"{tag} {name} -> {r.run_dir}", flush=True)
    progress.started(r)
    env = compile_cache_env(r.run_dir.parents[1])  # every run dir is <out>/<variant or warm>/<seed dir>
    with open(log_path, "a", encoding="utf-8") as log:
        rc = 0
        if not _finished(r.run_dir, r.steps(steps)):
            rc = subprocess.call(r.command(preset), stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        if not rc and r.is_warm_start and _finished(r.run_dir, 0) and not _exported(r):
            rc = subprocess.call(r.export_command(), stdout=log, stderr=subprocess.STDOUT, cwd=REPO, env=env)
    if rc or not _complete(r, steps):
        why = f"exit code {rc}" if rc else "no complete summary.json"
        print(f"  FAILED: {name} ({why}); see {log_path}", flush=True)
        return progress.ended(False, r)
    print(f"  done: {name}", flush=True)
    return progress.ended(True, r)


def compile_cache_env(out: Path) -> dict[str, str]:
    """The environment of a sweep's runs: one persistent compilation cache for all of them, `<out>/.jax_cache`
    (the variable set already wins), keeping every program however short its compile."""
    env = dict(os.environ)
    env.setdefault("JAX_COMPILATION_CACHE_DIR", str(out / ".jax_cache"))
    env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    return env


def _complete(r: Run, steps: int | None) -> bool:
    """Finished, and for a shared warm start exported too."""
    return _finished(r.run_dir, r.steps(steps)) and (not r.is_warm_start or _exported(r))


def _exported(r: Run) -> bool:
    return (r.run_dir / "hf" / "config.json").is_file()


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


class _Progress:
    """While runs execute, a line every `every` seconds: runs ended of all, and where each running run is."""

    def __init__(self, total: int, every: float):
        self.total, self.every = total, every
        self.running: dict[Path, Run] = {}
        self.ok = self.failed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> _Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def started(self, r: Run) -> None:
        with self._lock:
            self.running[r.run_dir] = r

    def ended(self, ok: bool, r: Run | None = None) -> bool:
        """Count a run as ended (`r`: one that was running); returns `ok`."""
        with self._lock:
            if r is not None:
                self.running.pop(r.run_dir, None)
            self.ok += ok
            self.failed += not ok
        return ok

    def line(self) -> str:
        with self._lock:
            running = list(self.running.values())
            ended = f"{self.ok + self.failed}/{self.total} runs done" + (
                f" ({self.failed} failed)" if self.failed else ""
            )
        where = ", ".join(f"{r.variant} seed {r.seed} at {position(r.run_dir)}" for r in running)
        return f"progress: {ended}" + (f"; running: {where}" if where else "")

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            print(self.line(), flush=True)


def position(run_dir: Path) -> str:
    """Where a running run stands, from its config.json (the totals) and the last step of its metrics.jsonl:
    "warm-start k/W" during its warm start (logged at steps -W .. 0), else "step k/N"."""
    try:
        cfg = json.loads((run_dir / "config.json").read_text())
        steps, warm = int(cfg["steps"]), int(cfg["warm_start"]["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return "start"
    step = _last_step(run_dir / "metrics.jsonl")
    if step is None:
        return "start"
    if step < 0 or (warm and not steps):
        return f"warm-start {step + warm}/{warm}"
    return f"step {step}/{steps}"


def _last_step(path: Path) -> int | None:
    """The `step` of the last complete line of a metrics.jsonl (read from its end: the file only grows)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 65536))
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return None


# -- results -----------------------------------------------------------------------------------------


def final_metric(run_dir: Path, metric: str = METRIC, steps: int | None = None) -> float | None:
    """A finished run's last value of `metric`: an eval metric from summary.json's final_eval (absent there, e.g.
    eval/turns_success when no episode succeeded, it is missing: an earlier eval's value is not the final one);
    another metric from the last metrics.jsonl row that has it (e.g. rollout/success_rate). None for a run that
    did not finish: a crashed run's metrics (often only the random-init eval) are not a result."""
    if not _finished(run_dir, steps):
        return None
    final_eval = json.loads((run_dir / "summary.json").read_text()).get("final_eval", {})
    if metric in final_eval or metric.startswith("eval/"):
        v = final_eval.get(metric)
        return None if v is None else float(v)
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


def interval(values: Sequence[float]) -> dict[str, Any]:
    """n, mean, sample std and the 95% interval of the mean (Student's t at n - 1 df; 1.96 past 30 df) of
    `values`; std and the interval are None for fewer than 2 values, everything but n for none."""
    n = len(values)
    out: dict[str, Any] = {"n": n, "mean": None, "std": None, "half_width": None, "ci95": None}
    if n:
        out["mean"] = statistics.mean(values)
    if n > 1:
        out["std"] = statistics.stdev(values)
        out["half_width"] = (T975[n - 2] if n - 1 <= len(T975) else 1.96) * out["std"] / math.sqrt(n)
        out["ci95"] = [out["mean"] - out["half_width"], out["mean"] + out["half_width"]]
    return out


def summarize(
    runs: Sequence[Run],
    out: Path,
    xlabel: str,
    *,
    numeric_x: bool,
    metrics: Sequence[str] = (METRIC,),
    steps: int | None = None,
    curve_metric: str = CURVE_METRIC,
    baseline: str | None = None,
) -> list[dict]:
    """Write results.json (per variant: finished runs, failed seeds, and per metric the per-seed values, mean,
    std and 95% interval; with a `baseline` variant, each other variant's paired differences to it), results.md
    (one table, the paired table, then the per-seed values) and plot.png; return the rows.
    `metrics[0]` is the primary metric. Shared warm starts are not variants. A run that did not finish (for
    `steps` steps when given) is listed as failed and left out of every statistic; a finished run without a
    metric is left out of that metric's only."""
    runs = [r for r in runs if not r.is_warm_start]
    rows = []
    for variant in dict.fromkeys(r.variant for r in runs):
        mine = [r for r in runs if r.variant == variant]
        failed = [r.seed for r in mine if not _finished(r.run_dir, steps)]
        finished = [r for r in mine if r.seed not in failed]
        stats = {}
        for m in metrics:
            per_seed = {r.seed: final_metric(r.run_dir, m, steps) for r in finished}
            stats[m] = interval([v for v in per_seed.values() if v is not None]) | {"per_seed": per_seed}
        rows.append({"variant": variant, "runs": len(finished), "failed": failed, "metrics": stats})
    base = next((r for r in rows if r["variant"] == baseline), None)
    for r in rows if base is not None else ():
        if r is not base:
            r["paired"] = {m: paired(r["metrics"][m]["per_seed"], base["metrics"][m]["per_seed"]) for m in metrics}
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(
        json.dumps({"metrics": list(metrics), "steps": steps, "baseline": baseline, "variants": rows}, indent=2)
    )
    table = _table(rows, xlabel, metrics, baseline if base is not None else None)
    (out / "results.md").write_text(table)
    print(table)
    _plot(runs, rows, out / "plot.png", xlabel, numeric_x=numeric_x, metrics=metrics, curve_metric=curve_metric)
    print(f"wrote {out / 'results.md'}, {out / 'results.json'}, {out / 'plot.png'}")
    return rows


def paired(values: dict[int, float | None], base: dict[int, float | None]) -> dict[str, Any]:
    """`interval` of the per-seed differences `values[s] - base[s]` over the seeds where both have a value (the
    same seed: the same warm start, evaluation games and sampling stream; a paired comparison), with the seeds."""
    seeds = [s for s in values if values[s] is not None and base.get(s) is not None]
    return interval([values[s] - base[s] for s in seeds]) | {"seeds": seeds}


def _table(rows: list[dict], xlabel: str, metrics: Sequence[str], baseline: str | None = None) -> str:
    """results.md: per variant and metric "mean ± half-width of the 95% interval" (with its n where a finished
    run lacks the metric); with a `baseline`, each variant's paired differences to it; then every finished run's
    values."""
    lines = [
        f"Final metrics over finished seeds: mean ± half-width of the 95% interval of the mean (Student's t, n - 1 "
        f"df); (n=k) where only k finished runs have the metric. Failed seeds are left out. Primary: {metrics[0]}.",
        "",
        f"| {xlabel} | runs | {' | '.join(metrics)} | failed seeds |",
        "|---|---:|" + "---:|" * len(metrics) + "---|",
    ]
    for r in rows:
        cells = [_cell(r["metrics"][m], r["runs"]) for m in metrics]
        failed = ", ".join(map(str, r["failed"])) or "-"
        lines.append(f"| {r['variant']} | {r['runs']} | {' | '.join(cells)} | {failed} |")
    if baseline is not None:
        lines += [
            "",
            f"Paired by seed: each {xlabel} minus {xlabel} {baseline} on the same seeds, the mean difference and "
            "its 95% interval [lo, hi]:",
            "",
            f"| {xlabel} | seeds | {' | '.join(metrics)} |",
            "|---|---:|" + "---:|" * len(metrics),
        ]
        for r in rows:
            if "paired" in r:
                d = r["paired"]
                cells = [_diff(d[m]) for m in metrics]
                lines.append(f"| {r['variant']} | {d[metrics[0]]['n']} | {' | '.join(cells)} |")
    lines += ["", "Per seed (finished runs):", "", f"| {xlabel} | seed | {' | '.join(metrics)} |"]
    lines.append("|---|---:|" + "---:|" * len(metrics))
    for r in rows:
        for seed in r["metrics"][metrics[0]]["per_seed"]:
            values = " | ".join(_fmt(r["metrics"][m]["per_seed"][seed]) for m in metrics)
            lines.append(f"| {r['variant']} | {seed} | {values} |")
    return "\n".join(lines) + "\n"


def _diff(s: dict) -> str:
    """A paired difference: its mean, signed, and the 95% interval."""
    if s["mean"] is None:
        return "-"
    lo_hi = f" [{s['ci95'][0]:+.3f}, {s['ci95'][1]:+.3f}]" if s["ci95"] else ""
    return f"{s['mean']:+.3f}{lo_hi}"


def _cell(s: dict, runs: int) -> str:
    text = _fmt(s["mean"]) + (f" ± {_fmt(s['half_width'])}" if s["half_width"] is not None else "")
    return text + (f" (n={s['n']})" if s["n"] != runs and s["mean"] is not None else "")


def finish(
    runs: Sequence[Run],
    args: argparse.Namespace,
    out: Path,
    xlabel: str,
    *,
    numeric_x: bool,
    fields: Sequence[str],
    then: Callable[[], Any] | None = None,
) -> None:
    """The end of every sweep's main: with --dry-run, each run's command and the config `fields` it varies; else
    run the unfinished runs, write the table and plot (and `then`'s own, a sweep's tests), and exit non-zero if any
    run failed."""
    if args.dry_run:
        dry_run(runs, args.preset, fields)
        return
    run_all(runs, args.preset, args.steps, args.jobs)
    rows = summarize(
        runs,
        out,
        xlabel,
        numeric_x=numeric_x,
        metrics=args.metrics,
        steps=args.steps,
        curve_metric=args.curve_metric,
        baseline=args.baseline,
    )
    if then is not None:
        then()
    exit_on_failures(rows)


def write_report(out: Path, stem: str, result: dict, table: str) -> None:
    """A sweep's own report: `<out>/<stem>.json` (`result`) and `<out>/<stem>.md` (`table`, also printed)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=2))
    (out / f"{stem}.md").write_text(table)
    print(table)


def exit_on_failures(rows: list[dict]) -> None:
    """Exit non-zero when any run of the sweep failed, naming them (after the table is written)."""
    failed = [f"{r['variant']} seed {s}" for r in rows for s in r["failed"]]
    if failed:
        raise SystemExit(f"{len(failed)} run(s) failed: {', '.join(failed)}; their sweep.log says why")


def _fmt(v: float | None) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"


def _plot(
    runs: Sequence[Run],
    rows: list[dict],
    path: Path,
    xlabel: str,
    *,
    numeric_x: bool,
    metrics: Sequence[str],
    curve_metric: str,
) -> None:
    """One panel per metric (mean per variant with its 95% interval, every seed a gray dot) and one of the mean
    learning curve of `curve_metric` per variant, over its finished seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(metrics) + 1, figsize=(4.5 * (len(metrics) + 1), 4), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        done = [r for r in rows if r["metrics"][m]["mean"] is not None]
        xs = [float(r["variant"]) for r in done] if numeric_x else list(range(len(done)))
        ax.errorbar(
            xs,
            [r["metrics"][m]["mean"] for r in done],
            yerr=[r["metrics"][m]["half_width"] or 0.0 for r in done],
            marker="o",
            capsize=4,
            linestyle="-" if numeric_x else "none",
        )
        for x, r in zip(xs, done):  # every seed, so the spread is visible
            vals = [v for v in r["metrics"][m]["per_seed"].values() if v is not None]
            ax.scatter([x] * len(vals), vals, s=12, alpha=0.4, color="gray")
        if not numeric_x:
            ax.set_xticks(xs, [r["variant"] for r in done], rotation=30)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"final {m} (95% interval)")
        ax.grid(alpha=0.3)
    ax = axes[0][-1]
    finished = {r["variant"]: r["metrics"][metrics[0]]["per_seed"] for r in rows}
    for variant in finished:  # mean curve over finished seeds, on the steps all share
        curves = [
            dict(curve(r.run_dir, curve_metric)) for r in runs if r.variant == variant and r.seed in finished[variant]
        ]
        curves = [c for c in curves if c]
        if not curves:
            continue
        steps = sorted(set.intersection(*(set(c) for c in curves)))
        ax.plot(steps, [statistics.mean(c[s] for c in curves) for s in steps], marker=".", label=f"{xlabel} {variant}")
    ax.set_xlabel("step")
    ax.set_ylabel(f"{curve_metric} (mean over seeds)")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
