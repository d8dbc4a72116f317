"""The head-to-head's workloads (bench/peers/tunix.py), fixed before any run; both sides import this module.

Plain Python and numpy only: the Tunix side imports it in Tunix's own virtual environment.

- `single`: a single-turn task, addition of two integers in [1, 20] answered as `\\boxed{n}` (reward 1 for the right
  sum, 0 otherwise). Both sides start from one checkpoint that a short supervised warm start taught the answer
  format and some sums (`bench/peers/tunix.py`'s `sft_addition`), so the reward has room to rise.
- `multi`: GEM's GuessTheNumber-v0-easy (numbers 1-10, at most 4 turns; GEM's rewards per turn: 1 for the number,
  a closeness score on the last turn, -0.1 for a format error), played through jgem's env and chat wrapper on both
  sides; both start from one checkpoint of jgem's warm start on the scripted binary-search player.

Each step plays `prompts_per_step` start states (problems, or game seeds) `group_size` times each, GRPO's
advantage normalises the returns within each group, and one optimizer step (AdamW, global-norm clipping) takes
the PPO-clipped loss with a k3 KL penalty to the starting policy, each sequence's token mean averaged over
sequences. The start states of step s are the seeds `seed * SEED_STRIDE + s * episodes + j`, j < prompts_per_step
(jgem's `Run.specs`), so both sides see the same problems and games in the same order.
"""

from __future__ import annotations

import dataclasses
import re

SEED_STRIDE = 7_919_000  # jgem.train.run.SEED_STRIDE (the parent asserts they agree)


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    env_id: str  # jgem's env id; the Tunix side wraps the same env (multi) or the same problems (single)
    steps: int
    prompts_per_step: int
    group_size: int
    max_new_tokens: int  # per turn
    max_episode_tokens: int  # the whole episode (prompt, actions and observations)
    max_turns: int
    lr: float = 2e-4
    beta: float = 0.04  # the KL penalty's coefficient (k3 estimator, to the starting policy)
    clip: float = 0.2
    max_grad_norm: float = 1.0
    temperature: float = 1.0
    seed: int = 0

    @property
    def episodes_per_step(self) -> int:
        return self.prompts_per_step * self.group_size

    def seeds(self, step: int) -> list[int]:
        """Step `step`'s (0-based) start-state seeds, one per group."""
        base = self.seed * SEED_STRIDE + step * self.episodes_per_step
        return [base + j for j in range(self.prompts_per_step)]

    def quick(self) -> Workload:
        """The smoke run's version: 3 steps of 2 groups."""
        return dataclasses.replace(self, steps=3, prompts_per_step=2)


WORKLOADS = {
    "single": Workload(
        "single-turn addition",
        "bench:Addition-v0",
        steps=60,
        prompts_per_step=16,
        group_size=8,
        max_new_tokens=12,
        max_episode_tokens=64,
        max_turns=1,
    ),
    "multi": Workload(
        "GuessTheNumber-easy (multi-turn)",
        "game:GuessTheNumber-v0-easy",
        steps=20,
        prompts_per_step=4,
        group_size=8,
        max_new_tokens=12,
        max_episode_tokens=512,
        max_turns=10,
    ),
}

MAX_ADDEND = 20


def addition(seed: int) -> dict[str, str]:
    """The single-turn problem of `seed`: {"problem", "answer"} (a pure function of the seed)."""
    import numpy as np

    a, b = (int(x) for x in np.random.default_rng(seed).integers(1, MAX_ADDEND + 1, size=2))
    return {"problem": f"Compute {a} + {b}. Answer as \\boxed{{n}}.", "answer": str(a + b)}


_BOXED = re.compile(r"\\boxed\{\s*(-?\d+)\s*\}")


def grade_addition(action: str, answer: str) -> float:
    """1.0 when the last `\\boxed{n}` of `action` holds the sum, else 0.0."""
    found = _BOXED.findall(action)
    return float(bool(found) and found[-1] == answer)
