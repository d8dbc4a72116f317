"""GEM's two claims, confirmatory (docs/results/preregistered/gem-confirmatory.md): gamma 0.9 against 1.0 on turns,
ReBN against REINFORCE on success and on turns; three arms, paired by seed, Holm's correction over the three tests.

    .venv/bin/python -m experiments.ablations.confirm_gem --dry-run
    .venv/bin/python -m experiments.ablations.confirm_gem --seeds 1001 1002 ... --jobs 2

The arms, on the preset `tiny-gamma` (one shared warm start for every run, `--warm-seed`'s): `rebn-g0.9` (ReBN,
gamma 0.9: the preset itself, the baseline of both experiments), `rebn-g1.0` (gamma 1.0) and `reinforce-g0.9`
(vanilla REINFORCE, gamma 0.9), each run in `<out>/<arm>/seed<s>`. The primary tests, each a two-sided paired t over
the seeds where both arms finished (experiments/ablations/power.py):
- H1 gamma: `eval/turns`, rebn-g0.9 minus rebn-g1.0;
- H2 algorithm, success: `eval/success_rate`, rebn-g0.9 minus reinforce-g0.9;
- H3 algorithm, turns: `eval/turns`, rebn-g0.9 minus reinforce-g0.9;
with Holm's step-down correction over the three at `--alpha`. The sweep writes `<out>/confirm.md` and
`confirm.json` (each test's mean difference, 95% interval, t, p, Holm-adjusted p and decision, and every seed's
pair), besides every sweep's `results.md` / `results.json` / `plot.png` of the arms' final metrics. Re-running the
same command skips finished runs and resumes the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from experiments.ablations.common import (
    WARM,
    Run,
    base_parser,
    common_overrides,
    final_metric,
    finish,
    split_argv,
    write_report,
)
from experiments.ablations.power import holm, paired_t

ARMS = {
    "rebn-g0.9": ("--algorithm", "rebn", "--gamma", "0.9"),
    "rebn-g1.0": ("--algorithm", "rebn", "--gamma", "1.0"),
    "reinforce-g0.9": ("--algorithm", "reinforce", "--gamma", "0.9"),
}
# name -> (metric, arm, minus arm)
TESTS = {
    "H1 gamma 0.9 vs 1.0, turns": ("eval/turns", "rebn-g0.9", "rebn-g1.0"),
    "H2 ReBN vs REINFORCE, success": ("eval/success_rate", "rebn-g0.9", "reinforce-g0.9"),
    "H3 ReBN vs REINFORCE, turns": ("eval/turns", "rebn-g0.9", "reinforce-g0.9"),
}
METRICS = ("eval/success_rate", "eval/turns", "eval/turns_success")


def build_runs(
    seeds: Sequence[int], out: Path, overrides: Sequence[str], extra: Sequence[str], *, warm_seed: int
) -> list[Run]:
    """The shared warm start (seed `warm_seed`, `<out>/warm/all-seed<w>`), then every arm at every seed from it."""
    warm = Run(WARM, warm_seed, out / "warm" / f"all-seed{warm_seed}", tuple(overrides), tuple(extra))
    runs = [
        Run(arm, s, out / arm / f"seed{s}", (*overrides, *flags), tuple(extra), warm=warm.run_dir)
        for arm, flags in ARMS.items()
        for s in seeds
    ]
    return [warm, *runs]


def confirm(runs: Sequence[Run], out: Path, steps: int | None, alpha: float = 0.05) -> dict:
    """The three primary tests with Holm's correction: `<out>/confirm.json` and `<out>/confirm.md`, returned."""
    seeds = list(dict.fromkeys(r.seed for r in runs if not r.is_warm_start))
    value = {(r.variant, r.seed, m): final_metric(r.run_dir, m, steps) for r in runs for m in METRICS}
    tests = {}
    for name, (metric, arm, base) in TESTS.items():
        pairs = {s: (value[(arm, s, metric)], value[(base, s, metric)]) for s in seeds}
        both = [a - b for a, b in pairs.values() if a is not None and b is not None]
        tests[name] = {
            "metric": metric,
            "arm": arm,
            "minus": base,
            "per_seed": {s: {"arm": a, "minus": b} for s, (a, b) in pairs.items()},
            "test": paired_t(both) if len(both) > 1 else None,
        }
    ok = {n: t["test"]["p"] for n, t in tests.items() if t["test"] is not None}
    for n, h in holm(ok, alpha).items():
        tests[n]["holm"] = h
    result = {"alpha": alpha, "steps": steps, "seeds": seeds, "tests": tests}
    write_report(out, "confirm", result, _table(result))
    return result


def _table(result: dict) -> str:
    lines = [
        "The primary tests: arm minus baseline on the same seeds, the mean difference with its 95% interval "
        f"(Student's t, n - 1 df), t, p, and Holm's adjusted p over the three (family-wise alpha {result['alpha']}).",
        "",
        "| test | metric | seeds | mean difference [95% interval] | t | p | Holm p | rejected |",
        "|---|---|---:|---|---:|---:|---:|---|",
    ]
    for name, t in result["tests"].items():
        r, h = t["test"], t.get("holm")
        if r is None:
            lines.append(f"| {name} | {t['metric']} | - | - | - | - | - | - |")
            continue
        lo, hi = r["ci95"]
        lines.append(
            f"| {name} | {t['metric']} | {r['n']} | {r['mean']:+.3f} [{lo:+.3f}, {hi:+.3f}] | {r['t']:.2f} | "
            f"{r['p']:.4f} | {h['adjusted']:.4f} | {'yes' if h['reject'] else 'no'} |"
        )
    lines += ["", "Per seed:", "", "| test | seed | arm | baseline |", "|---|---:|---:|---:|"]
    fmt = lambda v: "-" if v is None else f"{v:.4f}"
    for name, t in result["tests"].items():
        for seed, v in t["per_seed"].items():
            lines.append(f"| {name} | {seed} | {fmt(v['arm'])} | {fmt(v['minus'])} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    own, extra = split_argv(argv)
    ap = base_parser(__doc__.splitlines()[0], "runs/ablations/gem-confirmatory", preset="tiny-gamma", metrics=METRICS)
    ap.add_argument("--warm-seed", type=int, default=0, help="the seed of the one warm start every run trains from")
    ap.add_argument("--alpha", type=float, default=0.05, help="the family-wise level of the three primary tests")
    args = ap.parse_args(own)
    out = Path(args.out).resolve()
    runs = build_runs(args.seeds, out, common_overrides(args), extra, warm_seed=args.warm_seed)
    fields = ["algorithm", "gamma", "seed", "steps", "warm_start.steps", "run_dir"]
    finish(
        runs, args, out, "arm", numeric_x=False, fields=fields, then=lambda: confirm(runs, out, args.steps, args.alpha)
    )


if __name__ == "__main__":
    main()
