"""Multi-agent self-play: does RL from a warm start raise the win rate against a scripted player? Seeds x opponents.

    .venv/bin/python -m experiments.ablations.selfplay --dry-run
    .venv/bin/python -m experiments.ablations.selfplay --seeds 101 102 103 104 105 --jobs 2
    .venv/bin/python -m experiments.ablations.selfplay --opponents self pool --seeds 0 --steps 2 -- --eval-episodes 16

The default preset, tiny-kuhn-selfplay, trains one shared policy at both seats of Kuhn Poker (`--rollout.opponent
self`, RAE) and evaluates it against the scripted random player at alternating seats. Each seed's warm start runs
once, in `<out>/warm/seed<s>` (0 RL steps, evaluated and exported), and every opponent setting of that seed trains
from its export (`--opponents self pool`: self-play, or the opponent pool of past versions), in
`<out>/<opponent>/seed<s>`. The question is paired by seed: each run's final `--metric` minus its own warm start's,
on the same held-out games. The sweep writes `<out>/results.md` / `results.json` / `plot.png` (the final metrics per
opponent setting, as every sweep) and `<out>/rise.md` / `rise.json`: per setting, the warm start's and the final
mean, the mean rise with its 95% interval and the two-sided paired t test (experiments/ablations/power.py), and
every seed's values. Re-running the same command skips finished runs and resumes the rest.

For a pod: the same command with `--preset` a pod preset and `-- --env.env-id ... --model.path ...` (the runs are
`experiments.train` processes; on a pod launch each run with experiments/tpu_pod/launch.py instead).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from experiments.ablations.common import (
    Run,
    base_parser,
    common_overrides,
    final_metric,
    finish,
    split_argv,
    with_shared_warm_start,
    write_report,
)
from experiments.ablations.power import paired_t

METRICS = ("eval/success_rate", "eval/return")


def build_runs(
    opponents: Sequence[str], seeds: Sequence[int], out: Path, overrides: Sequence[str], extra: Sequence[str]
) -> list[Run]:
    """One warm start per seed, then one run per (opponent setting, seed) from it."""
    runs = [
        Run(o, s, out / o / f"seed{s}", (*overrides, "--rollout.opponent", o), tuple(extra))
        for o in opponents
        for s in seeds
    ]
    return with_shared_warm_start(runs, out, overrides, extra)


def rise(runs: Sequence[Run], out: Path, metrics: Sequence[str], steps: int | None) -> dict:
    """Each setting's final metrics minus its seed's warm start's (paired t over the seeds where both finished):
    written to `<out>/rise.json` and `<out>/rise.md`, and returned."""
    warm = {r.seed: r.run_dir for r in runs if r.is_warm_start}
    result: dict = {"metrics": list(metrics), "steps": steps, "settings": {}}
    for setting in dict.fromkeys(r.variant for r in runs if not r.is_warm_start):
        per_metric = {}
        for m in metrics:
            seeds = {}
            for r in runs:
                if r.variant != setting:
                    continue
                before, after = final_metric(warm[r.seed], m, 0), final_metric(r.run_dir, m, steps)
                seeds[r.seed] = {"warm": before, "final": after}
            both = {s: v for s, v in seeds.items() if v["warm"] is not None and v["final"] is not None}
            test = paired_t([v["final"] - v["warm"] for v in both.values()]) if len(both) > 1 else None
            per_metric[m] = {"per_seed": seeds, "test": test}
        result["settings"][setting] = per_metric
    write_report(out, "rise", result, _rise_table(result))
    return result


def _rise_table(result: dict) -> str:
    lines = [
        "Final minus the seed's own warm start, on the same held-out games: the means, the mean rise with its 95% "
        "interval (Student's t, n - 1 df) and the two-sided paired t test.",
        "",
        "| opponent | metric | seeds | warm start | final | rise [95% interval] | t | p |",
        "|---|---|---:|---:|---:|---|---:|---:|",
    ]
    for setting, per_metric in result["settings"].items():
        for m, r in per_metric.items():
            t = r["test"]
            if t is None:
                lines.append(f"| {setting} | {m} | - | - | - | - | - | - |")
                continue
            both = [v for v in r["per_seed"].values() if v["warm"] is not None and v["final"] is not None]
            warm = sum(v["warm"] for v in both) / len(both)
            final = sum(v["final"] for v in both) / len(both)
            lo, hi = t["ci95"]
            lines.append(
                f"| {setting} | {m} | {t['n']} | {warm:.3f} | {final:.3f} | {t['mean']:+.3f} [{lo:+.3f}, {hi:+.3f}] | "
                f"{t['t']:.2f} | {t['p']:.4f} |"
            )
    lines += ["", "Per seed:", "", "| opponent | metric | seed | warm start | final |", "|---|---|---:|---:|---:|"]
    fmt = lambda v: "-" if v is None else f"{v:.3f}"
    for setting, per_metric in result["settings"].items():
        for m, r in per_metric.items():
            for seed, v in r["per_seed"].items():
                lines.append(f"| {setting} | {m} | {seed} | {fmt(v['warm'])} | {fmt(v['final'])} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    own, extra = split_argv(argv)
    ap = base_parser(__doc__.splitlines()[0], "runs/ablations/selfplay", preset="tiny-kuhn-selfplay", metrics=METRICS)
    ap.add_argument(
        "--opponents",
        nargs="+",
        default=["self"],
        help="rollout.opponent settings to train with (self, pool, or a scripted player of the game; default self)",
    )
    args = ap.parse_args(own)
    out = Path(args.out).resolve()
    runs = build_runs(args.opponents, args.seeds, out, common_overrides(args), extra)
    fields = ["rollout.opponent", "algorithm", "group_size", "seed", "steps", "warm_start.steps", "run_dir"]
    finish(
        runs,
        args,
        out,
        "opponent",
        numeric_x=False,
        fields=fields,
        then=lambda: rise(runs, out, args.metrics, args.steps),
    )


if __name__ == "__main__":
    main()
