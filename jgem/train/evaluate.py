"""Evaluation's numbers: a set of episodes' metrics, and an evaluation's (held-out seeds, the horizons used)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from jgem.rollout.episode import Episode

if TYPE_CHECKING:
    from jgem.train.run import Run


def episode_metrics(episodes: list[Episode], prefix: str) -> dict[str, float]:
    """`prefix/`success_rate, return, turns, action_tokens (means) and faults (a count) of `episodes`, and
    turns_success, the mean turns of the successful ones (absent when none succeeded)."""
    if not episodes:
        return {}
    won = [e.num_turns for e in episodes if e.success]
    return {
        f"{prefix}/success_rate": float(np.mean([e.success for e in episodes])),
        f"{prefix}/return": float(np.mean([e.episode_return for e in episodes])),
        f"{prefix}/turns": float(np.mean([e.num_turns for e in episodes])),
        f"{prefix}/action_tokens": float(np.mean([e.num_action_tokens for e in episodes])),
        f"{prefix}/faults": float(sum(e.fault is not None for e in episodes)),
    } | ({f"{prefix}/turns_success": float(np.mean(won))} if won else {})


def eval_metrics(run: Run, step: int, episodes: list[Episode]) -> dict[str, float]:
    """An evaluation's metrics at `step`: its episodes', the horizon it ran at and the training horizon then."""
    return episode_metrics(episodes, "eval") | {
        "eval/max_turns": float(run.horizon(step, eval=True)),
        "eval/train_max_turns": float(run.horizon(step)),
    }
