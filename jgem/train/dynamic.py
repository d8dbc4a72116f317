"""Dynamic sampling (DAPO, Yu et al. 2025): train only on groups whose episodes' returns differ.

A group estimator (GRPO, Dr. GRPO, RLOO) compares the episodes of one start state: when their returns are all equal
every advantage of the group is 0 and its tokens only dilute the batch. With `--rollout.dynamic-sampling` the
trainer drops such groups and plays extra rounds of groups until the step holds its number of groups
(`episodes_per_step / group_size` per process), at most `--rollout.max-resample-rounds` extra rounds; then it
trains on the groups it has. `GroupFilter` is the bookkeeping (whole groups in, kept groups out) and knows nothing
of how episodes are played, so a producer that finishes groups one by one can feed it the same way.

Deterministic: round r of step s plays the episodes `Run.specs(s, round=r)` (ids, groups and seeds of their own,
from the run's seed, step and round), so the same seed gives the same run, and a resumed run the same steps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from jgem.rollout.episode import Episode
from jgem.sharding.mesh import process_max

if TYPE_CHECKING:
    from jgem.train.side import SamplerSide


def episode_return(episode: Episode, gamma: float) -> np.float32:
    """The return the group estimators compare, G_0 = sum_k gamma^k r_k, in float32 as the step's program sums it."""
    g = np.float32(0.0)
    for r in episode.rewards[::-1]:
        g = np.float32(r + np.float32(gamma) * g)
    return g


def has_signal(group: list[Episode], gamma: float) -> bool:
    """Whether a group's returns differ (over its episodes the learner trains on: no fault, at least one turn); with
    several policies, within one policy's episodes of it (each policy's estimator groups its own episodes)."""
    returns: dict[int, set[float]] = {}
    for e in group:
        if e.fault is None and e.num_turns > 0:
            returns.setdefault(e.policy, set()).add(float(episode_return(e, gamma)))
    return any(len(r) > 1 for r in returns.values())


def groups_of(episodes: list[Episode]) -> list[list[Episode]]:
    """Episodes by group id, groups in the order of their first episode."""
    groups: dict[int, list[Episode]] = {}
    for e in episodes:
        groups.setdefault(e.group_id, []).append(e)
    return list(groups.values())


@dataclasses.dataclass
class GroupFilter:
    """Keeps whole groups whose returns differ, in the order they come, until it holds `target` of them."""

    target: int
    gamma: float
    kept: list[list[Episode]] = dataclasses.field(default_factory=list)
    dropped: int = 0

    def add(self, episodes: list[Episode]) -> None:
        for group in groups_of(episodes):
            if has_signal(group, self.gamma):
                self.kept.append(group)
            else:
                self.dropped += 1

    @property
    def missing(self) -> int:
        return max(0, self.target - len(self.kept))

    def episodes(self) -> list[Episode]:
        """The first `target` kept groups' episodes."""
        return [e for group in self.kept[: self.target] for e in group]


def dynamic_sample(
    run: SamplerSide, step: int, episodes: list[Episode], play: Callable[[int], list[Episode]]
) -> tuple[list[Episode], dict[str, float]]:
    """Step `step`'s training episodes from its played `episodes` (round 0): groups without signal dropped, extra
    rounds played while any process misses groups (every process plays a round together: the engine runs in
    lockstep), at most `rollout.max_resample_rounds`. With no group kept at all, the step trains on its own episodes,
    as without dynamic sampling. `run`: the sampler side (its config and mesh). `play(r)`: round r's episodes (the
    pipeline's, `jgem.train.pipeline`, whose engine counts their work with the step's). Metrics:
    rollout/groups_dropped, rollout/groups_kept (trained), rollout/resample_rounds."""
    cfg = run.cfg
    found = GroupFilter(cfg.episodes_per_step // cfg.group_size, cfg.gamma)
    found.add(episodes)
    rounds = 0
    while rounds < cfg.rollout.max_resample_rounds and process_max([found.missing], run.rollout_mesh)[0] > 0:
        rounds += 1
        found.add(play(rounds))
    kept = found.episodes()
    metrics = {
        "rollout/groups_dropped": float(found.dropped),
        "rollout/groups_kept": float(min(len(found.kept), found.target)),
        "rollout/resample_rounds": float(rounds),
    }
    return kept or episodes, metrics
