"""The two sides of a run: which processes play episodes (the sampler's) and which train (the learner's), and the
host messages between them when they are different processes (a role split).

One mesh, or split meshes with `--mesh.rollout-placement per_process`: every process is on both sides, plays its
own episodes and trains on them; nothing here sends anything. With `--mesh.rollout-placement first` the sampler's
devices are whole hosts (a pod's first N chips) and the learner's the rest: a sampler process runs the env pool
and the rollout engine and never the update; a learner process runs the update (and the warm start's teacher
games, which need no model) and has no envs. What crosses between them goes through the JAX coordinator's
key-value store (`jax.distributed`'s, which every multi-controller run has):

- `episodes`: each sampler's finished episodes of a step, to every learner (a pickle, in chunks); each learner
  trains its contiguous share of them, in global order (`share`).
- `update`: the first learner's metrics of each update (JSON, small), which also tells the samplers that the update
  is done: they drive the engine until it arrives, then join the publication of the new weights (device to device,
  `jgem.sharding.publish`).
- `warm`, `eval`, `resume`, `saved`, `checkpoint`: the warm start's per-step metrics (the samplers log them), the
  evaluation's metrics (the learners rank checkpoints by them), whether and where the learners resumed, that every
  sampler has written its pipeline file for a checkpoint (the learners save only then), and at the end the run's
  last checkpoint (the samplers' end note names it).

Weights never go this way: they move device to device. A process that dies stops the others through the
coordinator's heartbeat (`JGEM_HEARTBEAT_TIMEOUT`), or through the transport's error where it notices first, as in
any multi-process run. A process that stops posts why (`jgem.sharding.mesh.exit_at_once_on_error`: it failed, or
another died), and every other process waiting for a message raises it (`RunStopped`), naming the process,
instead of waiting for messages that will not come.
"""

from __future__ import annotations

import os
import pickle
import time
from collections import Counter
from typing import Any

import jax
from jax.sharding import Mesh

from jgem.sharding.mesh import RunStopped, stop_reason

PREFIX = "jgem/roles"
CHUNK = 2 << 20  # bytes per value: the coordinator's messages stay well under gRPC's limits
# how long a side waits for the other's message (a step's rollout or update may take many minutes on a pod)
TIMEOUT_S = float(os.environ.get("JGEM_ROLES_TIMEOUT", 6 * 3600))


def mesh_processes(mesh: Mesh) -> list[int]:
    """The processes that hold devices of `mesh`, in order."""
    return sorted({d.process_index for d in mesh.devices.flat})


class Roles:
    """This process's side(s) of the run and the messages of a role split (module docstring)."""

    def __init__(self, learner_mesh: Mesh, sampler_mesh: Mesh) -> None:
        self.learners, self.samplers = mesh_processes(learner_mesh), mesh_processes(sampler_mesh)
        both = set(self.learners) & set(self.samplers)
        self.split = not both
        if not self.split and self.learners != self.samplers:
            mixed = sorted(set(self.learners) ^ set(self.samplers))
            raise ValueError(
                f"split meshes: processes {sorted(both)} hold devices of both sides and {mixed} of one only; "
                "with --mesh.rollout-placement first choose --mesh.rollout-devices as a multiple of the devices "
                "per process (whole hosts sample), or use per_process"
            )
        me = jax.process_index()
        self.learns, self.samples = me in self.learners, me in self.samplers
        self.lead = self.learners[0]  # the learner that reports each update's metrics
        self._seq: Counter[str] = Counter()
        self._client: Any = None

    def check_checkpoints(self) -> None:
        """Refuse a role split whose learner is one process before a run that checkpoints starts (`Trainer.run`);
        driving `Trainer.train_step` alone, as bench/async.py's `--roles` does, needs no checkpoint."""
        if self.split and len(self.learners) == 1:
            raise ValueError(
                f"a role split with one learner process (process {self.learners[0]}) cannot checkpoint: orbax refuses "
                "to save arrays that one process of several holds whole; give the learner at least 2 processes "
                "(fewer --mesh.rollout-devices), or use --mesh.rollout-placement per_process"
            )

    # -- numbering ---------------------------------------------------------------------------------

    def share(self, per_process: int, *, side: str) -> tuple[int, int]:
        """(first, count): the global indices of the items this process handles of a set of `per_process` per
        process of the run (a step's episodes: `episodes_per_step` each), dealt in contiguous shares over the
        processes of `side` ("sampler" or "learner"). Without a split: process p's are p * n .. p * n + n - 1."""
        procs = self.samplers if side == "sampler" else self.learners
        total = per_process * jax.process_count()
        if total % len(procs):
            raise ValueError(
                f"{total} items a step ({per_process} per process x {jax.process_count()} processes) do not divide "
                f"over the {len(procs)} {side} processes"
            )
        n = total // len(procs)
        return procs.index(jax.process_index()) * n, n

    # -- messages ----------------------------------------------------------------------------------

    @property
    def client(self) -> Any:
        if self._client is None:
            from jax._src import distributed

            self._client = distributed.global_state.client
            if self._client is None:
                raise RuntimeError("a role split needs jax.distributed (jgem.sharding.mesh.initialize) first")
        return self._client

    def _check_abort(self) -> None:
        """Raise `RunStopped` where a process posted why the run stops (it failed, or found another dead)."""
        if (why := stop_reason()) is not None:
            raise RunStopped(why)

    def _key(self, channel: str, seq: int, source: int) -> str:
        return f"{PREFIX}/{channel}/{seq}/{source}"

    def send(self, channel: str, obj: Any) -> None:
        """`obj` as this process's next message on `channel` (a pickle in chunks; the count last, so a reader
        that sees it finds every chunk). `episodes` keeps one message: the previous one is deleted (every reader
        has it: the learners read a step's episodes before its update, whose publication precedes the next)."""
        seq = self._seq[channel]
        self._seq[channel] += 1
        key = self._key(channel, seq, jax.process_index())
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        chunks = [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)] or [b""]
        for i, c in enumerate(chunks):
            self.client.key_value_set_bytes(f"{key}/{i}", c)
        self.client.key_value_set(f"{key}/n", str(len(chunks)))
        if channel == "episodes" and seq:
            self.client.key_value_delete(self._key(channel, seq - 1, jax.process_index()))

    def receive(self, channel: str, sources: list[int]) -> list[Any]:
        """The next message on `channel` from each of `sources`, in their order (blocking)."""
        seq = self._seq[channel]
        self._seq[channel] += 1
        ms = int(TIMEOUT_S * 1000)
        out = []
        for src in sources:
            key = self._key(channel, seq, src)
            deadline = time.monotonic() + TIMEOUT_S
            while True:  # in 1 s waits, between which a failed process's error is looked for
                try:
                    n = int(self.client.blocking_key_value_get(f"{key}/n", 1000))
                    break
                except Exception as e:  # not there yet
                    self._check_abort()
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"role split: no {channel!r} message {seq} from process {src} within {TIMEOUT_S:.0f} s "
                            "(JGEM_ROLES_TIMEOUT); is that process alive?"
                        ) from e
            data = b"".join(self.client.blocking_key_value_get_bytes(f"{key}/{i}", ms) for i in range(n))
            out.append(pickle.loads(data))
        return out

    def poll(self, channel: str, source: int) -> Any:
        """The next message on `channel` from `source` if it has arrived, else None (the message is then still
        the next one)."""
        key = self._key(channel, self._seq[channel], source)
        try:
            self.client.key_value_try_get(f"{key}/n")
        except Exception:  # not there yet (the client raises NOT_FOUND)
            return None
        return self.receive(channel, [source])[0]

    def wait(self, channel: str, source: int, meanwhile: Any = None, interval: float = 0.005) -> Any:
        """The next message on `channel` from `source`; until it arrives, `meanwhile(ready)` (when given) may work,
        with `ready()` telling it whether the message is there."""
        got: list[Any] = []
        checked = [time.monotonic()]

        def ready() -> bool:
            if not got:
                m = self.poll(channel, source)
                if m is not None:
                    got.append(m)
                elif time.monotonic() - checked[0] > 1.0:  # a failed process's error, once a second
                    self._check_abort()
                    checked[0] = time.monotonic()
            return bool(got)

        if meanwhile is not None:
            meanwhile(ready)
        while not ready():
            time.sleep(interval)
        return got[0]
