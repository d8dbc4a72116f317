"""Algorithm comparison: train a preset with each algorithm and seed, then compare final eval success.

    .venv/bin/python -m experiments.ablations.compare_algorithms --dry-run
    .venv/bin/python -m experiments.ablations.compare_algorithms --algorithms rebn grpo ppo --seeds 0 1 --steps 20

Every algorithm runs with the same `--group-size` (default 4), so all see the same start states and the same
number of episodes per step: grpo, drgrpo and rloo normalise within groups and need group_size >= 2; the
others simply get groups of episodes that share a seed. Runs live in `<out>/<algorithm>/seed<s>`; the sweep
writes `<out>/results.md`, `results.json` and `plot.png`. Re-running skips finished runs and resumes the rest.
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
from jgem.algos.algorithms import ALGORITHMS


def build_runs(
    algorithms: Sequence[str],
    seeds: Sequence[int],
    group_size: int,
    out: Path,
    overrides: Sequence[str],
    extra: Sequence[str],
) -> list[Run]:
    """One run per (algorithm, seed), all with the same group size."""
    unknown = [a for a in algorithms if a not in ALGORITHMS]
    if unknown:
        raise SystemExit(f"unknown algorithm(s) {unknown}; choose from {' '.join(ALGORITHMS)}")
    grouped = [a for a in algorithms if ALGORITHMS.get(a).grouped]
    if grouped and group_size < 2:
        raise SystemExit(f"{' '.join(grouped)} normalise within groups of rollouts; use --group-size 2 or more")
    own = (*overrides, "--group-size", str(group_size))
    return [Run(a, s, out / a / f"seed{s}", (*own, "--algorithm", a), tuple(extra)) for a in algorithms for s in seeds]


def main(argv: Sequence[str] | None = None) -> None:
    own, extra = split_argv(argv)
    ap = base_parser(__doc__.splitlines()[0], "runs/ablations/algorithms")
    ap.add_argument("--algorithms", nargs="+", default=list(ALGORITHMS), help=f"from: {' '.join(ALGORITHMS)}")
    ap.add_argument(
        "--group-size",
        type=int,
        default=4,
        help="episodes per start state for every algorithm; must divide episodes_per_step (default 4)",
    )
    args = ap.parse_args(own)
    out = Path(args.out).resolve()
    runs = build_runs(args.algorithms, args.seeds, args.group_size, out, common_overrides(args), extra)
    if args.dry_run:
        dry_run(
            runs, args.preset, ["algorithm", "group_size", "episodes_per_step", "gamma", "seed", "steps", "run_dir"]
        )
        return
    run_all(runs, args.preset, args.steps)
    exit_on_failures(summarize(runs, out, "algorithm", numeric_x=False, metric=args.metric, steps=args.steps))


if __name__ == "__main__":
    main()
