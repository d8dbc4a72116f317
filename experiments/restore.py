"""A run's policy, restored for evaluation and export: `resolve` a run dir or checkpoint path, `load_run` it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any


def resolve(path: str | Path) -> tuple[Path, int | None]:
    """(run dir, checkpoint step or None for the latest) from a run dir or a `run/checkpoints/STEP` dir."""
    p = Path(path)
    if _is_hf_export(p):
        raise FileNotFoundError(
            f"{path} is a Hugging Face export (its config.json describes a model), not a run directory: evaluate "
            f"the run it was exported from (python -m experiments.eval RUN_DIR), or train from it with "
            f"`python -m experiments.train PRESET --model.path {path}`"
        )
    if (p / "config.json").is_file():
        return p, None
    if p.name.isdigit() and p.parent.name == "checkpoints" and (p.parent.parent / "config.json").is_file():
        return p.parent.parent, int(p.name)
    raise FileNotFoundError(
        f"{path} is neither a run directory (with config.json) nor a checkpoint step (RUN_DIR/checkpoints/STEP)"
    )


def _is_hf_export(p: Path) -> bool:
    """`p` holds a Hugging Face checkpoint (`experiments.export`'s output): its config.json names a model."""
    try:
        doc = json.loads((p / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and ("architectures" in doc or "model_type" in doc)


def load_run(path: str | Path, **overrides: Any):
    """A `Run` built from the run's config (with `overrides` of TrainConfig fields; `env` takes a dict of
    EnvConfig fields) without an optimizer, holding the policy of the checkpoint `path` names (read alone: the
    optimizer's moments and the critic stay on disk). Returns (run, step)."""
    from jgem.checkpoint import CheckpointConfig, Checkpointer
    from jgem.config import load_run_config
    from jgem.train.run import Run

    run_dir, step = resolve(path)
    cfg = load_run_config(run_dir)
    env = overrides.pop("env", {})
    # the warm start is history here (its solver need not exist for another env); nothing is written to run_dir
    cfg = dataclasses.replace(
        cfg,
        env=dataclasses.replace(cfg.env, **env),
        warm_start=dataclasses.replace(cfg.warm_start, steps=0),
        **overrides,
    )
    if step is None:
        with Checkpointer(CheckpointConfig(str(run_dir / "checkpoints"))) as ckpt:
            step = ckpt.latest_step()
        if step is None:
            raise FileNotFoundError(f"{run_dir / 'checkpoints'} holds no checkpoint; train the run first")
    run = Run(cfg, optimizer=False)
    try:
        run.restore_policy(run_dir / "checkpoints", step)
    except BaseException:
        run.close()
        raise
    return run, step


def run_env(path: str | Path) -> tuple[str, dict[str, Any]]:
    """(env id, env kwargs) the run at `path` (a run dir or a checkpoint of one) was trained with."""
    from jgem.config import load_run_config

    env = load_run_config(resolve(path)[0]).env
    return env.env_id, dict(env.env_kwargs)
