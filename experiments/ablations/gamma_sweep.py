"""Discount-factor sweep: train a preset at each gamma and seed, then compare final eval success vs gamma.

    .venv/bin/python -m experiments.ablations.gamma_sweep --dry-run
    .venv/bin/python -m experiments.ablations.gamma_sweep --gammas 0.5 0.9 1.0 --seeds 0 1 --steps 20
    .venv/bin/python -m experiments.ablations.gamma_sweep --steps 5 -- --eval-episodes 16 --warm-start.steps 10

Each run lives in `<out>/gamma<g>/seed<s>` (metrics.jsonl, summary.json, checkpoints/ as any run); the sweep
writes `<out>/results.md`, `results.json` and `plot.png` (final eval success per gamma with every seed, and
the mean eval curve per gamma). Re-running the same command skips finished runs and resumes the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from experiments.ablations.common import (
    Run,
    base_parser,
    common_overrides,
    dry_run,
    exit_on_failures,
    run_all,
    split_argv,
    summarize,
)


def build_runs(
    gammas: Sequence[float], seeds: Sequence[int], out: Path, overrides: Sequence[str], extra: Sequence[str]
) -> list[Run]:
    """One run per (gamma, seed); the gamma override is added last among the sweep's own overrides."""
    for g in gammas:
        if not 0.0 <= g <= 1.0:
            raise SystemExit(f"gamma {g} is outside [0, 1]; pass discount factors like 0.5 0.9 1.0")
    return [
        Run(f"{g:g}", s, out / f"gamma{g:g}" / f"seed{s}", (*overrides, "--gamma", f"{g:g}"), tuple(extra))
        for g in gammas
        for s in seeds
    ]


def main(argv: Sequence[str] | None = None) -> None:
    own, extra = split_argv(argv)
    ap = base_parser(__doc__.splitlines()[0], "runs/ablations/gamma")
    ap.add_argument("--gammas", type=float, nargs="+", default=[0.0, 0.5, 0.9, 0.99, 1.0], help="discount factors")
    args = ap.parse_args(own)
    out = Path(args.out).resolve()
    runs = build_runs(args.gammas, args.seeds, out, common_overrides(args), extra)
    if args.dry_run:
        dry_run(runs, args.preset, ["gamma", "seed", "steps", "algorithm", "env.env_id", "run_dir"])
        return
    run_all(runs, args.preset, args.steps)
    exit_on_failures(summarize(runs, out, "gamma", numeric_x=True, metric=args.metric, steps=args.steps))


if __name__ == "__main__":
    main()
