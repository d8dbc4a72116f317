"""Between a run's two sides, the sampler's (envs, engine, the pipeline) and the learner's (state, the update
program, checkpoints): what crosses and how. One interface, three implementations, chosen once when the trainer is
built (`make_transport`):

- `InProcess`: one mesh. Every process plays and trains; the sampler plays the learner's own params: nothing moves.
- `SplitMeshes`: `--mesh.rollout-devices` with `per_process` placement. Every process is on both sides; after each
  update the new params go device to device to the sampler's copy (`Run.sync_sampler`, `jgem.sharding.publish`).
- `ProcessSplit`: a role split (`--mesh.rollout-placement first`), whole processes a side. Episodes, the update's
  metrics and the run's host values go through the coordinator's key-value store (`jgem.train.roles.Roles`); the
  params go device to device, as with split meshes.

The trainer's step is written once against it: `episodes(played)` is what this process trains on, `update(learn,
meanwhile)` the update's metrics on every process (`learn` runs where the learner is; elsewhere the sampler plays on
until they arrive), `publish()` the new policy to the sampler. `from_learners` / `from_samplers` give every process a
value one side works out (the restored host state, an evaluation's metrics, the last checkpoint), `samplers_done` has
the learners wait for the samplers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import jax

from jgem.rollout.episode import Episode
from jgem.train.roles import Roles

T = TypeVar("T")
Meanwhile = Callable[[Callable[[], bool]], None] | None  # `meanwhile(done)`: the sampler's work while an update runs


class InProcess:
    """One mesh: each process plays its episodes and trains on them; the sampler plays the learner's params."""

    samples = learns = True
    checkpoint_processes: list[int] | None = None  # the processes that save checkpoints (None: all)

    def check_checkpoints(self) -> None:
        """Refuse, before a run that checkpoints starts, a layout that cannot save (a role split's one learner)."""

    def episodes(self, played: list[Episode]) -> list[Episode]:
        """The episodes this process trains on, of those its sampler side played this step."""
        return played

    def update(self, learn: Callable[[Meanwhile], dict[str, float]], meanwhile: Meanwhile) -> dict[str, float]:
        """The update's metrics: `learn(meanwhile)` on a learner's process (the sampler's `meanwhile` overlaps it
        where the sides have devices of their own)."""
        return learn(meanwhile)

    def publish(self, *, full: bool = False) -> None:
        """The learner's new policy to the sampler (`full`: its frozen rest too): here the sampler already has it."""

    def from_learners(self, channel: str | None, value: Callable[[], T]) -> T | None:
        """`value()`, worked out on the learner's processes, on every process (`channel` None: on the learner's
        processes only, None elsewhere)."""
        return value()

    def from_samplers(self, channel: str, value: Callable[[], T]) -> T:
        """`value()`, worked out on the sampler's processes (the first one's), on every process."""
        return value()

    def samplers_done(self, channel: str) -> None:
        """The learner's processes wait until every sampler's process has reached this point."""


class SplitMeshes(InProcess):
    """Every process on both sides, on devices of their own: each update's params are published to the sampler's
    copy, device to device (`publish`, the run's `sync_sampler`)."""

    def __init__(self, publish: Callable[..., None]) -> None:
        self._publish = publish

    def publish(self, *, full: bool = False) -> None:
        self._publish(full=full)


class ProcessSplit(SplitMeshes):
    """A role split: a sampler's process plays (and sends its episodes to every learner), a learner's process trains
    its contiguous share of them (and the first learner reports each update's metrics); both join the publication."""

    def __init__(self, roles: Roles, publish: Callable[..., None]) -> None:
        super().__init__(publish)
        self.roles = roles
        self.samples, self.learns = roles.samples, roles.learns
        self.checkpoint_processes = roles.learners
        self.me = jax.process_index()

    def check_checkpoints(self) -> None:
        self.roles.check_checkpoints()

    def episodes(self, played: list[Episode]) -> list[Episode]:
        r = self.roles
        if r.samples:
            r.send("episodes", played)
            return played
        everyone = [e for part in r.receive("episodes", r.samplers) for e in part]  # in global order
        i, n = r.learners.index(self.me), len(r.learners)
        return everyone[i * len(everyone) // n : (i + 1) * len(everyone) // n]

    def update(self, learn: Callable[[Meanwhile], dict[str, float]], meanwhile: Meanwhile) -> dict[str, float]:
        r = self.roles
        if not r.learns:  # the sampler plays on (the steps ahead) until the first learner's metrics arrive
            return r.wait("update", r.lead, meanwhile)
        metrics = learn(None)
        if self.me == r.lead:
            r.send("update", metrics)
        return metrics

    def from_learners(self, channel: str | None, value: Callable[[], T]) -> T | None:
        r = self.roles
        if not r.learns:
            return None if channel is None else r.receive(channel, [r.lead])[0]
        out = value()
        if channel is not None and self.me == r.lead:
            r.send(channel, out)
        return out

    def from_samplers(self, channel: str, value: Callable[[], T]) -> T:
        r = self.roles
        if not r.samples:
            return r.receive(channel, r.samplers[:1])[0]
        out = value()
        if self.me == r.samplers[0]:
            r.send(channel, out)
        return out

    def samplers_done(self, channel: str) -> None:
        r = self.roles
        if r.samples:
            r.send(channel, True)
        else:
            r.receive(channel, r.samplers)


def make_transport(roles: Roles, publish: Callable[..., None], *, split_meshes: bool) -> InProcess:
    """The run's transport: a role split's, split meshes', or one mesh's."""
    if roles.split:
        return ProcessSplit(roles, publish)
    return SplitMeshes(publish) if split_meshes else InProcess()
