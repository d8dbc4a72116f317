"""Publication: the learner's weights onto the sampler's devices, device to device (`--mesh.rollout-devices`).

With split meshes (`split_meshes`) the sampler holds its own copy of the policy on its own devices, laid out by
its own mesh. After each update the learner's new weights move across. Three ways JAX offers, weighed in
`bench/publish.py` (docs/scaling.md, "Split meshes"):

- `jax.device_put` between the two meshes: in one process a copy between devices; across processes it needs
  the cross-host transfer flags (`jax_cross_host_transfer_socket_address`), and then goes through sockets, that
  is through host memory on both sides (DCN), not over the chips' interconnect.
- `jax.experimental.transfer`: a pull-based transfer server per process, the same socket transport (DCN), with
  a side channel for the addresses and request ids.
- **A resharding program over the union of the devices** (used here): one compiled program over both sides'
  devices whose only communication is a collective permute, each learner device sending its shard to the
  sampler device paired with it. Every process runs it (plain multi-controller JAX: each process's devices
  execute their share), the transfer is the program's collective (ICI on a TPU slice, NVLink or the network on
  GPUs, gloo on CPU processes), and the host holds nothing.

The permute pairs the i-th device of the learner's mesh with the i-th of the sampler's (in their meshes' flat
order: on a TPU slice split in two halves, the chips at the same place in each half), so both sides need as many
devices; the learner's shards are first resharded among the learner's own devices to the sampler's layout
(a no-op when the layouts agree). Unequal splits publish with `jax.device_put` (one process only).
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

SIDE = "side"  # the union mesh's extra axis: 0 the learner's devices, 1 the sampler's


def _axes(entry) -> tuple[str, ...]:
    return () if entry is None else ((entry,) if isinstance(entry, str) else tuple(entry))


def union_spec(spec: P) -> P:
    """The spec of a leaf on the union mesh: its first dim split over `side` first (learner rows, then the
    sampler's), then as on the sampler; so each device's block is exactly its shard on its own side."""
    entries = tuple(spec) or (None,)
    return P((SIDE, *_axes(entries[0])), *entries[1:])


def shard_bytes(tree: Any) -> tuple[int, int]:
    """(bytes over every device, the most any one device holds) of `tree`'s arrays, from their shardings (over all
    processes' devices): what a publication into `tree` moves, and what the busiest receiving device takes."""
    per_device: dict[Any, int] = {}
    for leaf in jax.tree.leaves(tree):
        block = int(np.prod(leaf.sharding.shard_shape(leaf.shape))) * leaf.dtype.itemsize
        for d in leaf.sharding.device_set:
            per_device[d] = per_device.get(d, 0) + block
    return sum(per_device.values()), max(per_device.values(), default=0)


def _lost_peer(e: Exception) -> bool:
    """Whether `e` is the runtime's error for a process gone (not a ValueError of jgem's own checks, nor any error
    of a run of one process, which has no peer to lose: an out-of-memory, say)."""
    if jax.process_count() == 1:
        return False
    return isinstance(e, jax.errors.JaxRuntimeError) or str(e).startswith(("UNKNOWN:", "UNAVAILABLE:", "INTERNAL:"))


class Publisher:
    """`publish(tree, shardings, into)`: `tree` (on the learner's mesh) as a new tree of arrays with `shardings` (on
    the sampler's mesh), moved device to device; `into` is the sampler's current copy (its buffers take part in
    the program, which overwrites none of them: the old version stays valid for the episodes still playing it).
    `bytes` / `seconds` are the last publication's."""

    def __init__(self, learner: Mesh, sampler: Mesh) -> None:
        self.learner, self.sampler = learner, sampler
        lrn, smp = list(learner.devices.flat), list(sampler.devices.flat)
        if set(lrn) & set(smp):
            raise ValueError("the learner's and the sampler's meshes share devices; a split needs disjoint devices")
        self.collective = len(lrn) == len(smp)
        if not self.collective and len({d.process_index for d in [*lrn, *smp]}) > 1:
            raise ValueError(
                f"a split across processes needs as many sampler as learner devices (got {len(smp)} and {len(lrn)}): "
                "publication is a collective permute pairing them; set --mesh.rollout-devices to half the devices"
            )
        self.bytes = self.max_device_bytes = 0
        self.seconds = 0.0
        self.cross_process_pairs = 0
        if self.collective:
            # the learner's devices in its own mesh's order (a program's inputs and outputs must list their devices
            # in one order), shaped as the sampler's mesh: the i-th of each mesh's flat order are paired
            mirror = np.asarray(lrn, dtype=object).reshape(sampler.devices.shape)
            self.mirror = Mesh(mirror, sampler.axis_names, axis_types=sampler.axis_types)
            self.union = Mesh(
                np.stack([mirror, sampler.devices]),
                (SIDE, *sampler.axis_names),
                axis_types=(AxisType.Auto, *sampler.axis_types),
            )
            # pairs on different processes: a slower path (another host's chips, or the network); the default
            # per-process placement pairs each process's devices with its own
            self.cross_process_pairs = sum(a.process_index != b.process_index for a, b in zip(lrn, smp))
            self._programs: dict[Any, Any] = {}

    # ------------------------------------------------------------------------------------------------

    def __call__(self, tree: Any, shardings: Any, into: Any = None) -> Any:
        t0 = time.perf_counter()
        leaves, treedef = jax.tree.flatten(tree)
        targets = jax.tree.leaves(shardings, is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))
        if len(targets) != len(leaves):
            raise ValueError(f"publication: {len(leaves)} arrays but {len(targets)} shardings")
        if not leaves:  # nothing to move (a model whose every variable trains has no frozen rest)
            self.bytes = self.max_device_bytes = 0
            self.seconds = 0.0
            return tree
        try:
            if not self.collective:
                out = jax.device_put(leaves, targets, may_alias=False)
            else:
                old = jax.tree.leaves(into) if into is not None else self._empty(leaves, targets)
                out = self._permute(leaves, targets, old)
            out = jax.tree.unflatten(treedef, out)
            jax.block_until_ready(out)
        # a peer gone mid-transfer (killed, preempted): say what failed; gloo reports it as a ValueError, at dispatch
        except (jax.errors.JaxRuntimeError, ValueError) as e:
            if not _lost_peer(e):
                raise
            raise RuntimeError(
                f"publication of the learner's weights to the sampler's devices failed ({str(e).splitlines()[0]}): a "
                "process of the run has probably died; the run stops here, resume it from its last checkpoint"
            ) from e
        self.seconds = time.perf_counter() - t0
        self.bytes, self.max_device_bytes = shard_bytes(out)
        return out

    def compiled(self, avals: list[jax.ShapeDtypeStruct], specs: list[P]):
        """The union program for leaves `avals` placed by `specs` on the sampler's mesh, lowered and compiled (for
        AOT checks: `memory_analysis()`, the HLO's collectives)."""
        shapes = [
            jax.ShapeDtypeStruct(
                (2 * a.shape[0], *a.shape[1:]), a.dtype, sharding=NamedSharding(self.union, union_spec(s))
            )
            for a, s in zip(avals, specs)
        ]
        return self._program(tuple(union_spec(s) for s in specs)).lower(shapes).compile()

    def _program(self, specs: tuple[P, ...]):
        if specs not in self._programs:
            from jax import shard_map

            def send(xs):  # each learner device's block to its paired sampler device; the learner side gets zeros
                return [jax.lax.ppermute(x, SIDE, [(0, 1)]) for x in xs]

            self._programs[specs] = jax.jit(
                shard_map(send, mesh=self.union, in_specs=(list(specs),), out_specs=list(specs))
            )
        return self._programs[specs]

    def _reshard(self, shardings: tuple[NamedSharding, ...]):
        if shardings not in self._programs:
            self._programs[shardings] = jax.jit(lambda xs: xs, out_shardings=list(shardings))
        return self._programs[shardings]

    def _permute(self, leaves: list[jax.Array], targets: list[NamedSharding], old: list[jax.Array]) -> list[jax.Array]:
        specs = []
        for x, t in zip(leaves, targets):
            if x.ndim == 0:
                raise ValueError("publication of a 0-d array is not supported; params are at least 1-d")
            specs.append(t.spec)
        mirror = [NamedSharding(self.mirror, s) for s in specs]
        moved = [i for i, (x, m) in enumerate(zip(leaves, mirror)) if not x.sharding.is_equivalent_to(m, x.ndim)]
        if moved:  # the learner's shards to the sampler's layout, among the learner's own devices
            resharded = self._reshard(tuple(mirror[i] for i in moved))([leaves[i] for i in moved])
            leaves = list(leaves)
            for i, x in zip(moved, resharded):
                leaves[i] = x
        glob = []
        for x, o, s in zip(leaves, old, specs):
            sh = NamedSharding(self.union, union_spec(s))
            shape = (2 * x.shape[0], *x.shape[1:])
            blocks = {b.device: b.data for b in x.addressable_shards} | {b.device: b.data for b in o.addressable_shards}
            order = sh.addressable_devices_indices_map(shape)
            glob.append(jax.make_array_from_single_device_arrays(shape, sh, [blocks[d] for d in order], dtype=x.dtype))
        out = self._program(tuple(union_spec(s) for s in specs))(glob)
        result = []
        for x, y, t in zip(leaves, out, targets):
            blocks = {b.device: b.data for b in y.addressable_shards}
            order = t.addressable_devices_indices_map(x.shape)
            result.append(
                jax.make_array_from_single_device_arrays(x.shape, t, [blocks[d] for d in order], dtype=x.dtype)
            )
        return result

    def _empty(self, leaves: list[jax.Array], targets: list[NamedSharding]) -> list[jax.Array]:
        """Buffers on the sampler's side for a first publication (overwritten by it)."""
        shapes = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in leaves]
        return jax.jit(lambda: [jnp.zeros(s.shape, s.dtype) for s in shapes], out_shardings=targets)()
