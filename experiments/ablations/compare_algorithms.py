"""Algorithm comparison: train a preset with each algorithm and seed, then compare final eval success.

    .venv/bin/python -m experiments.ablations.compare_algorithms --dry-run
    .venv/bin/python -m experiments.ablations.compare_algorithms --algorithms rebn grpo ppo --seeds 0 1 --steps 20
    .venv/bin/python -m experiments.ablations.compare_algorithms --jobs 2 --metric eval/success_rate eval/turns

Every algorithm runs with the same `--group-size` (default 4), so all see the same start states and the same
number of episodes per step: grpo, drgrpo and rloo normalise within groups and need group_size >= 2; the
others simply get groups of episodes that share a seed. When the preset warm-starts, each seed's warm start runs
once, in `<out>/warm/seed<s>` (0 RL steps, exported to its `hf/`), and every algorithm of that seed trains from
that export (`--no-shared-warm-start`: each run warm-starts itself; `--warm-starts one`: one warm start, the
first seed's, for every run): the algorithms of a seed then differ only in
RL (PPO's critic starts from the warm-started policy's trunk rather than the random init's). Runs live in
`<out>/<algorithm>/seed<s>`; the sweep writes `<out>/results.md` (per algorithm: finished runs, each `--metric`'s
mean ± 95% interval over seeds, failed seeds; then every seed's values), `results.json` (the same with std and
per-seed values) and `plot.png` (each final metric per algorithm with every seed, and the mean `--curve-metric`
curve per algorithm). Re-running skips finished runs and resumes the rest.
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
from jgem.algos.algorithms import ALGORITHMS


def build_runs(
    algorithms: Sequence[str],
    seeds: Sequence[int],
    group_size: int,
    out: Path,
    overrides: Sequence[str],
    extra: Sequence[str],
    *,
    shared_warm_start: bool = False,
    one_warm_start: bool = False,
) -> list[Run]:
    """One run per (algorithm, seed), all with the same group size; with `shared_warm_start`, one warm-start run
    per seed first, which that seed's runs train from."""
    unknown = [a for a in algorithms if a not in ALGORITHMS]
    if unknown:
        raise SystemExit(f"unknown algorithm(s) {unknown}; choose from {' '.join(ALGORITHMS)}")
    grouped = [a for a in algorithms if ALGORITHMS.get(a).grouped]
    if grouped and group_size < 2:
        raise SystemExit(f"{' '.join(grouped)} normalise within groups of rollouts; use --group-size 2 or more")
    own = (*overrides, "--group-size", str(group_size))
    runs = [Run(a, s, out / a / f"seed{s}", (*own, "--algorithm", a), tuple(extra)) for a in algorithms for s in seeds]
    return with_shared_warm_start(runs, out, overrides, extra, one=one_warm_start) if shared_warm_start else runs


def main(argv: Sequence[str] | None = None) -> None:
    own, extra = split_argv(argv)
    ap = base_parser(__doc__.splitlines()[0], "runs/ablations/algorithms", shared_warm_start=True, baseline="rebn")
    ap.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), help=f"from: {' '.join(ALGORITHMS)}")
    ap.add_argument(
        "--group-size",
        type=int,
        default=4,
        help="episodes per start state for every algorithm; must divide episodes_per_step (default 4)",
    )
    args = ap.parse_args(own)
    out = Path(args.out).resolve()
    shared = use_shared_warm_start(args, extra)
    runs = build_runs(
        args.algorithms,
        args.seeds,
        args.group_size,
        out,
        common_overrides(args),
        extra,
        shared_warm_start=shared,
        one_warm_start=args.warm_starts == "one",
    )
    fields = ["algorithm", "group_size", "episodes_per_step", "gamma", "seed", "steps", "warm_start.steps", "run_dir"]
    finish(runs, args, out, "algorithm", numeric_x=False, fields=fields)


if __name__ == "__main__":
    main()
