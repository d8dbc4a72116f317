"""Two policies in one run: does each of two LoRA adapters on one base, trained at its own seat, improve there?

    .venv/bin/python -m experiments.ablations.two_policies --dry-run
    .venv/bin/python -m experiments.ablations.two_policies --seeds 201 --out docs/results/kuhn-two-policies

The preset (default tiny-kuhn-selfplay: Kuhn Poker, the agents workflow, RAE) warm-starts one policy with full
fine-tuning, once per seed (`<out>/warm/seed<s>`, 0 RL steps, exported), and the RL run (`<out>/two-policies/seed<s>`)
starts from that export with two fresh LoRA adapters (`--model.lora.adapters 2`, zero at init: both policies start
as the warm policy) and `--rollout.policies` giving each seat its own: policy 0 plays `--seats`'s first seat, policy
1 the second, against each other, and each adapter trains on its own seat's episodes only. Afterwards each side is
evaluated against the scripted `--opponent` at every seat (`experiments.eval --agents`, `--episodes` held-out games,
the same for both): the warm start at each seat, then each policy at its own seat. Per seat, the win rate after
minus before with its 95% interval (Newcombe's hybrid score, experiments/ablations/power.py), in `<out>/seats.md` /
`seats.json`, besides every sweep's `results.md` / `results.json` / `plot.png`. Re-running the same command skips
finished runs and evaluations.

For a pod: `--preset` a pod preset and `-- --model.path ...` (the runs are `experiments.train` processes; launch each
with experiments/tpu_pod/launch.py there).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from experiments.ablations.common import (
    REPO,
    Run,
    base_parser,
    common_overrides,
    compile_cache_env,
    finish,
    split_argv,
    with_shared_warm_start,
    write_report,
)
from experiments.ablations.power import newcombe

METRICS = ("eval/success_rate", "eval/return")
VARIANT = "two-policies"


def build_runs(
    seeds: Sequence[int], out: Path, overrides: Sequence[str], extra: Sequence[str], *, lora: Sequence[str]
) -> list[Run]:
    """One warm start per seed (full fine-tuning), then the two-policy RL run from its export."""
    runs = [Run(VARIANT, s, out / VARIANT / f"seed{s}", (*overrides, *lora), tuple(extra)) for s in seeds]
    return with_shared_warm_start(runs, out, overrides, extra)


def evaluate(run_dir: Path, sweep: Path, name: str, opponent: str, episodes: int) -> dict:
    """`experiments.eval RUN --agents` against `opponent` on the run's last checkpoint, written to (and read again
    from) `<sweep>/eval/<name>.json`."""
    out = sweep / "eval" / f"{name}.json"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "experiments.eval", str(run_dir), "--agents", "--opponents", opponent]
        cmd += ["--episodes", str(episodes), "--out", str(out)]
        subprocess.run(cmd, cwd=REPO, env=compile_cache_env(sweep), check=True)
    return json.loads(out.read_text())


def seats(runs: Sequence[Run], out: Path, opponent: str, episodes: int) -> dict:
    """Per seed and seat: the warm start's win rate there, its policy's after RL, and the difference with its 95%
    interval; `<out>/seats.json` and `seats.md`."""
    warm = {r.seed: r.run_dir for r in runs if r.is_warm_start}
    result: dict = {"opponent": opponent, "episodes": episodes, "seeds": {}}
    lines = [
        f"# Two policies, each at its own seat: win rate against `{opponent}` ({episodes} held-out games at "
        "alternating seats)",
        "",
        "| seed | seat (policy) | warm start | after RL | difference [95% interval] |",
        "|---|---|---:|---:|---|",
    ]
    for r in runs:
        if r.is_warm_start:
            continue
        before = evaluate(warm[r.seed], out, f"warm-seed{r.seed}", opponent, episodes)
        after = evaluate(r.run_dir, out, f"{VARIANT}-seed{r.seed}", opponent, episodes)
        (b_step,), (a_step,) = before["policy"], after["policy"]
        per_seat = {}
        for p, seat in enumerate(after["seats"]):
            b, a = before["policy"][b_step][opponent][seat], after["policy"][a_step][opponent][seat]
            d = newcombe(b["wins"], b["games"], a["wins"], a["games"])
            per_seat[seat] = {"policy": p, "warm": b, "final": a, **d, "improved": d["ci95"][0] > 0}
            lines.append(
                f"| {r.seed} | {seat} ({p}) | {d['before']:.3f} | {d['after']:.3f} | {d['diff']:+.3f} "
                f"[{d['ci95'][0]:+.3f}, {d['ci95'][1]:+.3f}] |"
            )
        result["seeds"][r.seed] = per_seat
    write_report(out, "seats", result, "\n".join(lines) + "\n")
    return result


def main(argv: Sequence[str] | None = None) -> None:
    own, extra = split_argv(argv)
    ap = base_parser(
        __doc__.splitlines()[0], "runs/ablations/two-policies", preset="tiny-kuhn-selfplay", metrics=METRICS
    )
    ap.add_argument("--seats", nargs=2, default=["player_0", "player_1"], help="the game's seats: policy 0's, 1's")
    ap.add_argument("--rank", type=int, default=16, help="the adapters' LoRA rank (default 16)")
    ap.add_argument("--alpha", type=float, default=32.0, help="the adapters' LoRA alpha (default 32)")
    ap.add_argument(
        "--lr",
        type=float,
        default=2e-4,
        help="the adapters' RL learning rate (default 2e-4: at 2e-3 the pilot collapsed)",
    )
    ap.add_argument("--opponent", default="random", help="the scripted player evaluations play (default random)")
    ap.add_argument("--episodes", type=int, default=2048, help="held-out games per evaluation (default 2048)")
    args = ap.parse_args(own)
    out = Path(args.out).resolve()
    lora = ["--model.lora.rank", str(args.rank), "--model.lora.alpha", str(args.alpha), "--model.lora.adapters", "2"]
    lora += ["--rollout.policies", *args.seats, "--learner.lr", str(args.lr)]
    runs = build_runs(args.seeds, out, common_overrides(args), extra, lora=lora)
    fields = ["model.lora.rank", "model.lora.adapters", "rollout.policies", "learner.lr", "seed", "steps", "run_dir"]
    finish(
        runs,
        args,
        out,
        "variant",
        numeric_x=False,
        fields=fields,
        then=lambda: seats(runs, out, args.opponent, args.episodes),
    )


if __name__ == "__main__":
    main()
