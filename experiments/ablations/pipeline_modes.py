"""Pipeline modes and learning: the same preset trained sync, off_policy (lag 1), async and stream (max-staleness 2).

    .venv/bin/python -m experiments.ablations.pipeline_modes --dry-run
    .venv/bin/python -m experiments.ablations.pipeline_modes --seeds 0 1 2 --jobs 2

Every run has the same warm start, steps, episodes per step and env slots (`--env.num-envs`, default 64: two steps'
worth, so the steps ahead have room); the modes differ only in `--pipeline.*`, so each trains on the same number of
episodes. The question (issue 32): does held-out success stay within 0.05 of sync when the learner trains on
episodes one (off_policy) or up to two (async) versions old, or on the groups that finish first (stream)? Runs live
in `<out>/<mode>/seed<s>`; the sweep writes `<out>/results.md`, `results.json` and `plot.png`. Re-running skips
finished runs and resumes the rest.
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
)

MODES = {
    "sync": ("--pipeline.mode", "sync"),
    "off_policy-lag1": ("--pipeline.mode", "off_policy", "--pipeline.lag", "1"),
    "async-staleness2": ("--pipeline.mode", "async", "--pipeline.max-staleness", "2"),
    "stream-staleness2": ("--pipeline.mode", "stream", "--pipeline.max-staleness", "2"),
}


def build_runs(modes: Sequence[str], seeds: Sequence[int], num_envs: int, out: Path, overrides, extra) -> list[Run]:
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise SystemExit(f"unknown mode(s) {unknown}; choose from {' '.join(MODES)}")
    own = (*overrides, "--env.num-envs", str(num_envs))
    return [Run(m, s, out / m / f"seed{s}", (*own, *MODES[m]), tuple(extra)) for m in modes for s in seeds]


def main(argv: Sequence[str] | None = None) -> None:
    own, extra = split_argv(argv)
    ap = base_parser(__doc__.splitlines()[0], "runs/ablations/pipeline")
    ap.add_argument("--modes", nargs="+", default=list(MODES), help=f"from: {' '.join(MODES)}")
    ap.add_argument("--num-envs", type=int, default=64, help="env slots of every run (default 64)")
    args = ap.parse_args(own)
    out = Path(args.out).resolve()
    runs = build_runs(args.modes, args.seeds, args.num_envs, out, common_overrides(args), extra)
    finish(
        runs,
        args,
        out,
        "mode",
        numeric_x=False,
        fields=["pipeline", "env.num_envs", "episodes_per_step", "seed", "steps", "run_dir"],
    )


if __name__ == "__main__":
    main()
