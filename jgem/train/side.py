"""The sampler side of a run as the pipeline and dynamic sampling see it (`SamplerSide`): not the trainer, only what
they use of it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jax.sharding import Mesh

from jgem.config import TrainConfig
from jgem.rollout.engine import EpisodeSpec, RolloutEngine
from jgem.sharding.publish import Publisher


@dataclasses.dataclass
class SamplerSide:
    """What the pipeline and dynamic sampling use of a run: the engine (and through it the pool), what each step plays
    (`specs`, `horizon`), the policies it plays with (`policy`: the current one, or with params a kept
    version's; `snapshot`: the current version's params kept past the update, which donates the learner's), the
    publication (split meshes: the sampler's devices play on while the learner's update), the sampler's mesh."""

    cfg: TrainConfig
    engine: RolloutEngine
    specs: Callable[..., list[EpisodeSpec]]
    horizon: Callable[..., int]
    stage: Callable[[int], int]  # the curriculum's stage at a step
    policy: Callable[..., Any]
    snapshot: Callable[[], Any]
    played_params: Callable[[], Any]  # the params the current version plays with (not a copy)
    publisher: Publisher | None
    rollout_mesh: Mesh
    run_dir: Path
