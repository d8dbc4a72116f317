"""Discount-factor sweep: train a preset at each gamma and seed, then compare final eval success and turns vs gamma.

    .venv/bin/python -m experiments.ablations.gamma_sweep --dry-run
    .venv/bin/python -m experiments.ablations.gamma_sweep --seeds 0 1 2 3 4 --jobs 2
    .venv/bin/python -m experiments.ablations.gamma_sweep --gammas 0.5 1.0 --seeds 0 --steps 5 -- --eval-episodes 16

GEM's finding (issue 30): with gamma < 1 a success in fewer turns has a higher return, so RL should teach the agent
to need fewer turns. The default preset, tiny-gamma, warm-starts on a teacher that needs more turns than it could.
Each seed's warm start runs once, in `<out>/warm/seed<s>` (0 RL steps, exported to its `hf/`), and every gamma of
that seed trains from that export (`--no-shared-warm-start`: each run warm-starts itself); the gammas of a seed
then differ only in RL. `--warm-starts one` runs a single warm start (the first seed's, `<out>/warm/all-seed<s>`)
that every run trains from, as the experiment's design does (docs/results.md). Each run lives in
`<out>/gamma<g>/seed<s>` (metrics.jsonl, summary.json, checkpoints/ as any run). The sweep writes
`<out>/results.md` (per gamma: finished runs, each metric's mean ± 95% interval over seeds, failed seeds; each
gamma's paired differences to `--baseline` (gamma 1); then every seed's values), `results.json` (the same with std
and per-seed values) and `plot.png` (each final metric against gamma with every seed, and the mean `--curve-metric`
curve per gamma).
Re-running the same command skips finished runs and resumes the rest.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from experiments.ablations.common import (
    Run,
    base_parser,
    common_overrides,
    finish,
    split_argv,
    use_shared_warm_start,
    with_shared_warm_start,
)

METRICS = ("eval/success_rate", "eval/turns_success", "eval/turns")


def build_runs(
    gammas: Sequence[float],
    seeds: Sequence[int],
    out: Path,
    overrides: Sequence[str],
    extra: Sequence[str],
    *,
    shared_warm_start: bool = False,
    one_warm_start: bool = False,
) -> list[Run]:
    """One run per (gamma, seed), the gamma override last among the sweep's own overrides; with
    `shared_warm_start`, one warm-start run per seed first, which that seed's runs train from."""
    for g in gammas:
        if not 0.0 <= g <= 1.0:
            raise SystemExit(f"gamma {g} is outside [0, 1]; pass discount factors like 0.5 0.9 1.0")
    runs = [
        Run(f"{g:g}", s, out / f"gamma{g:g}" / f"seed{s}", (*overrides, "--gamma", f"{g:g}"), tuple(extra))
        for g in gammas
        for s in seeds
    ]
    return with_shared_warm_start(runs, out, overrides, extra, one=one_warm_start) if shared_warm_start else runs


def main(argv: Sequence[str] | None = None) -> None:
    own, extra = split_argv(argv)
    ap = base_parser(
        __doc__.splitlines()[0],
        "runs/ablations/gamma",
        preset="tiny-gamma",
        metrics=METRICS,
        curve_metric="rollout/turns",
        shared_warm_start=True,
        baseline="1",
    )
    ap.add_argument("--gammas", type=float, nargs="+", default=[0.5, 0.8, 0.9, 0.99, 1.0], help="discount factors")
    args = ap.parse_args(own)
    out = Path(args.out).resolve()
    overrides = common_overrides(args)
    runs = build_runs(
        args.gammas,
        args.seeds,
        out,
        overrides,
        extra,
        shared_warm_start=use_shared_warm_start(args, extra),
        one_warm_start=args.warm_starts == "one",
    )
    finish(
        runs,
        args,
        out,
        "gamma",
        numeric_x=True,
        fields=["gamma", "seed", "steps", "warm_start.steps", "algorithm", "env.env_id", "run_dir"],
    )


if __name__ == "__main__":
    main()
