"""`make demo`: train the embedded default (tiny model, shipped tokenizer, GuessTheNumber-easy) on CPU.

Runs the `tiny` preset from scratch in a fresh run directory and prints a table of held-out evaluation
before training, after the supervised warm start on a scripted player, and after RL, plus the
learning-curve PNG. Extra arguments go to the preset (e.g. `--steps 30`).
"""

from __future__ import annotations

import shutil
import sys
import time


def main() -> None:
    import dataclasses

    import tyro
    from rich.console import Console
    from rich.table import Table

    from experiments.configs import tiny
    from jgem.train import train

    cfg = tyro.cli(type(tiny()), default=tiny(), args=sys.argv[1:])
    cfg = dataclasses.replace(cfg, run_dir="runs/demo", resume=False)
    import jax

    from experiments.train import fail
    from jgem.config import ConfigError, validate

    try:
        validate(cfg, jax.device_count())  # a bad override: the message alone, with flag names, before the wipe
    except ConfigError as e:
        fail(e.render())
    shutil.rmtree(cfg.run_dir, ignore_errors=True)
    console = Console()
    console.print(
        f"[bold]jgem demo[/bold]: {cfg.algorithm} (gamma {cfg.gamma}) on {cfg.env.env_id}, "
        f"tiny model from scratch, {cfg.warm_start.steps} warm-start + {cfg.steps} RL steps"
    )
    t0 = time.perf_counter()
    summary = train(cfg)
    minutes = (time.perf_counter() - t0) / 60

    table = Table(title=f"Held-out evaluation ({cfg.eval_episodes} episodes, unseen seeds)")
    for col in ("phase", "success rate", "mean turns", "mean return"):
        table.add_column(col, justify="right" if col != "phase" else "left")
    teacher = "scripted solver" + (f", {cfg.warm_start.epsilon:.0%} random guesses" if cfg.warm_start.epsilon else "")
    phases = [
        ("random init", "initial_eval"),
        (f"after warm start ({cfg.warm_start.steps} steps imitating the {teacher})", "warm_start_eval"),
        (f"after RL ({cfg.steps} {cfg.algorithm} steps)", "final_eval"),
    ]
    for name, key in phases:
        m = summary.get(key) or {}
        if m:
            table.add_row(name, f"{m['eval/success_rate']:.2f}", f"{m['eval/turns']:.2f}", f"{m['eval/return']:.3f}")
    console.print(table)
    console.print(
        f"learning curves: {summary.get('plot')}   metrics: {cfg.run_dir}/metrics.jsonl   wall time: {minutes:.1f} min"
    )


if __name__ == "__main__":
    main()
