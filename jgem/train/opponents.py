"""The opponent pool of a multi-agent run (`--rollout.opponent pool`): past versions of the policy, frozen, that play
the other seats of its games (`jgem.rollout.workflows.agents`, which draws a version per game).

The pool at policy version v is `pool_versions(v)`: versions 0, `pool_every`, 2 `pool_every`, ... up to v, the last
`pool_size` of them. It is a function of v alone, so every process (and a resumed run) agrees on it. The sampler
side keeps a member's params from the update that would donate them (`before_update`): on one mesh a copy, as
off_policy's kept versions; with split meshes the sampler's copy, which publications leave alone. A version is dropped
once no queued or live game can draw it or plays it (a game holds the version it drew from its start, `Context.hold`):
`pool_size` copies of the trained params on the sampler's devices (with LoRA, of the adapters only), plus those
games still play that the window has passed, plus, with episodes submitted ahead at older versions (off_policy lag
K, async and stream), the older windows they will draw from (about K / `pool_every` more).

A checkpoint first writes the members its resume needs that are not on disk yet to `<run>/pool/<version>` (orbax,
params only, by the sampler's processes, before the learners save the checkpoint); a resume restores them onto the
sampler's devices, so the games after it draw and play what the uninterrupted run's would have (sync and off_policy:
exactly; in async and stream the draws and the members' params depend on timing anyway). Versions below every
committed checkpoint's pool are removed from disk with the pipeline's files; a run that starts at step s first
removes the versions from s on (written by a run that went further, or by another run in the directory).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax

from jgem.checkpoint import CheckpointConfig, Checkpointer, committed_steps
from jgem.rollout.workflows.agents import pool_span, pool_versions
from jgem.sharding.mesh import process_max
from jgem.train.roles import mesh_processes
from jgem.train.side import SamplerSide


class OpponentPool:
    """The members' params on the sampler side (module docstring): `models` for the engine, `before_update` to keep
    and drop, `save` / `prune` / `restore` around checkpoints."""

    def __init__(self, side: SamplerSide) -> None:
        r = side.cfg.rollout
        self.side, self.every, self.size = side, r.pool_every, r.pool_size
        self.params: dict[int, Any] = {}  # version -> the sampler's params of that version
        self._store: Checkpointer | None = None

    @property
    def directory(self) -> Path:
        return Path(self.side.run_dir) / "pool"

    def versions(self, version: int) -> list[int]:
        """The pool at policy version `version`."""
        return pool_versions(version, self.every, self.size)

    def models(self) -> dict[int, Any]:
        """The members kept, as the engine plays them (the current version is the pipeline's to add)."""
        return {v: self.side.policy(p) for v, p in self.params.items()}

    def before_update(self, step: int, kept: dict[int, Any]) -> None:
        """Before the update of step `step` (the learner at version `step`): drop the members no queued or live game
        can draw (the pools of the runs' versions, and of version `step + 1`) or holds, agreed over the sampler's
        processes (they keep the same ones), and keep version `step`'s params when it is one of them (`kept`:
        off_policy's copy of it, when it has one)."""
        engine = self.side.engine
        held = engine.versions_in_use(pinned=True)
        members = sorted(self.params)
        agreed = process_max(
            [-min(engine.versions_in_use(), default=step + 1), *(v in held for v in members), step in held],
            self.side.rollout_mesh,
        )
        oldest, flags = -agreed[0], agreed[1:]
        needed = set(pool_span(min(oldest, step + 1), step + 1, self.every, self.size))
        needed |= {v for v, f in zip([*members, step], flags) if f}
        self.params = {v: p for v, p in self.params.items() if v in needed}
        if step in needed and step not in self.params:
            self.params[step] = kept[step] if step in kept else self.side.snapshot()

    def age(self, episodes: list, step: int) -> dict[str, float]:
        """`pool/opponent_age_mean`: how many updates older than the learner the played opponents were."""
        ages = [step - e.opponent for e in episodes if e.opponent is not None]
        return {"pool/opponent_age_mean": float(sum(ages) / len(ages)) if ages else 0.0}

    # -- on disk -----------------------------------------------------------------------------------

    def store(self) -> Checkpointer:
        """The pool's orbax directory, saved and restored by the sampler's processes."""
        if self._store is None:
            processes = mesh_processes(self.side.rollout_mesh)
            mine = None if len(processes) == jax.process_count() else processes
            config = CheckpointConfig(str(self.directory), keep_last=1 << 30, keep_best=0, async_save=False)
            self._store = Checkpointer(config, processes=mine)
        return self._store

    def save(self, step: int) -> None:
        """Before checkpoint `step` is saved: the members a resume from it needs (`versions(step)` but `step`, the
        checkpoint's own params) that are not on disk yet."""
        store = self.store()
        on_disk = set(store.all_steps())
        for v in self.versions(step):
            if v != step and v not in on_disk and not store.save(v, self.params[v], {"version": v}):
                raise RuntimeError(f"{self.directory}: orbax did not save policy version {v} of the opponent pool")
        store.wait()

    def prune(self, checkpoints: Path) -> None:
        """Remove the versions on disk below the oldest that a committed checkpoint's pool or the pool now holds
        (agreed over the sampler's processes, which see the learners' checkpoints come and go at their own moments:
        every one deletes the same versions)."""
        if self._store is None:
            return
        keep = [*self.params, *(self.versions(c)[0] for c in committed_steps(checkpoints))]
        floor = -process_max([-min(keep, default=0)], self.side.rollout_mesh)[0]
        for v in self._store.all_steps():
            if v < floor:
                self._store.delete(v)

    def restore(self, step: int) -> None:
        """Starting at step `step` (a fresh run: 0): the versions on disk from `step` on removed; resuming, the
        members of the pool at `step` but `step` itself, from disk onto the sampler's devices."""
        store = self.store()
        for v in store.all_steps():
            if v >= step:  # not this run's up to `step`: a run that went further, or another run in the directory
                store.delete(v)
        wanted = [v for v in self.versions(step) if v != step]
        if not wanted:
            return
        missing = sorted(set(wanted) - set(store.all_steps()))
        if missing:
            raise FileNotFoundError(
                f"{self.directory}: policy versions {missing} of the opponent pool at step {step} are missing (a "
                "checkpoint saves them beside it); resume from a checkpoint whose pool is there, or start the run "
                "again"
            )
        target = self.side.played_params()
        self.params = {v: store.restore(v, target).state for v in wanted}

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
