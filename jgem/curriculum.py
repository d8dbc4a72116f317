"""Horizon schedules (ScalingInter-RL): the interaction horizon grows in stages as training goes on.

A schedule is a pure function of the training step, so a resumed run reads the same stage and turn
limit at the same step as an uninterrupted one; nothing about it is stored but the config.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Curriculum:
    """Stage i covers steps [i * stage_steps, (i + 1) * stage_steps) and allows `horizons[i]` turns;
    the last stage lasts forever. `horizons=(4, 8, 16), stage_steps=100`: 4 turns for steps 0..99,
    8 for 100..199, 16 from 200 on."""

    horizons: tuple[int, ...]
    stage_steps: int

    def __post_init__(self) -> None:
        horizons = tuple(self.horizons)
        object.__setattr__(self, "horizons", horizons)
        if not horizons:
            raise ValueError("Curriculum needs at least one horizon, e.g. horizons=(4, 8, 16)")
        for h in horizons:
            if isinstance(h, bool) or not isinstance(h, int) or h < 1:
                raise ValueError(f"horizons must be positive ints (turn limits), got {horizons}")
        if any(b < a for a, b in zip(horizons, horizons[1:])):
            raise ValueError(f"horizons must not decrease (ScalingInter-RL grows the horizon), got {horizons}")
        if isinstance(self.stage_steps, bool) or not isinstance(self.stage_steps, int) or self.stage_steps < 1:
            raise ValueError(f"stage_steps must be a positive int, got {self.stage_steps!r}")

    @classmethod
    def constant(cls, max_turns: int) -> Curriculum:
        """A one-stage schedule: always `max_turns`."""
        return cls(horizons=(max_turns,), stage_steps=1)

    @property
    def num_stages(self) -> int:
        return len(self.horizons)

    def stage(self, step: int) -> int:
        """The stage index at training step `step` (0-based)."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        return min(step // self.stage_steps, self.num_stages - 1)

    def max_turns(self, step: int) -> int:
        """The turn limit for episodes collected at training step `step`."""
        return self.horizons[self.stage(step)]

    def stage_start(self, stage: int) -> int:
        """The first step of `stage`."""
        if not 0 <= stage < self.num_stages:
            raise ValueError(f"stage {stage} is outside 0..{self.num_stages - 1}")
        return stage * self.stage_steps
