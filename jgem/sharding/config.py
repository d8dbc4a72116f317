"""MeshConfig: the device mesh's axis sizes (data, fsdp, tensor, and expert for a mixture of experts); plain data,
light to import."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

AXES = ("data", "fsdp", "tensor")
# a mesh with expert parallelism (MeshConfig.expert > 1): `expert` between the batch axes and `tensor`, so tensor
# keeps the innermost (fastest) links and the experts' all-gather / reduce-scatter the next ones
EP_AXES = ("data", "fsdp", "expert", "tensor")
BATCH_AXES = ("data", "fsdp", "expert")  # the axes that split the rows (those the mesh has)


@dataclass(frozen=True)
class MeshConfig:
    """Mesh axis sizes; one axis may be -1 to take the devices the others leave."""

    data: int = 1
    fsdp: int = 1
    tensor: int = 1
    rollout_devices: int = 0
    """split meshes: the sampler (rollout engine) on the first N devices, the learner on the rest, each with its own
    mesh; after each update the weights move device to device (`jgem.sharding.publish`). 0: both on every device"""
    rollout_placement: Literal["per_process", "first"] = "per_process"
    """which devices sample: `per_process` each process's first N / processes (every process plays and trains its
    own episodes; a publication pairs devices of one host), `first` the first N of all (a contiguous part of a pod
    slice: whole hosts sample, the others train, `jgem.train.roles`; N a multiple of the devices per process)"""
    rollout_data: int = -1
    """the sampler's mesh, with --mesh.rollout-devices: its data axis (its own layout, e.g. more data-parallel rows)"""
    rollout_fsdp: int = 1
    rollout_tensor: int = 1
    """the sampler's tensor axis (KV heads split over it)"""
    expert: int = 1
    """expert parallelism (a mixture of experts, jgem.models.moe): the experts split over this axis, which also splits
    the rows (as fsdp) and the other weights' `embed` dimension; 1 (the default): no `expert` axis in the mesh"""
    rollout_expert: int = 1
    """the sampler's expert axis, with --mesh.rollout-devices"""

    def rollout(self) -> MeshConfig:
        """The sampler's mesh axes (with `rollout_devices`)."""
        return MeshConfig(self.rollout_data, self.rollout_fsdp, self.rollout_tensor, expert=self.rollout_expert)

    def axis_names(self) -> tuple[str, ...]:
        """The mesh's axes: (data, fsdp, tensor), with `expert` before tensor when `expert` is not 1."""
        return AXES if self.expert == 1 else EP_AXES

    def split_errors(self, num_devices: int) -> list[str]:
        """What is wrong with the split of `num_devices` devices (empty when there is none, or it is sound)."""
        n = self.rollout_devices
        if n == 0:
            return []
        if num_devices < 2:
            return [
                f"mesh.rollout_devices {n}: a split needs 2 devices or more and this run has {num_devices} (on CPU, "
                "simulate more with JAX_NUM_CPU_DEVICES=8 before jax starts)"
            ]
        if not 0 < n < num_devices:
            return [
                f"mesh.rollout_devices {n} must leave devices to the learner and take some: 0 (no split) or 1.."
                f"{num_devices - 1} of the {num_devices} devices"
            ]
        try:
            self.rollout().resolve(n)
        except ValueError as e:
            return [f"the sampler's mesh (--mesh.rollout-*): {e}"]
        return []

    def resolve(self, num_devices: int) -> tuple[int, ...]:
        """Axis sizes for `num_devices` devices, in `axis_names()` order (the batch axes first, tensor last), or a
        ValueError saying which sizes would work."""
        names = self.axis_names()
        sizes = [getattr(self, a) for a in names]
        fill = [i for i, s in enumerate(sizes) if s == -1]
        bad = [(a, s) for a, s in zip(names, sizes) if s == 0 or s < -1]
        if bad:
            raise ValueError(f"mesh axis {bad[0][0]} has size {bad[0][1]}; use a positive size or -1 (fill)")
        if len(fill) > 1:
            raise ValueError(f"only one mesh axis may be -1, got {[names[i] for i in fill]}; give the others sizes")
        fixed = math.prod(s for s in sizes if s != -1)
        if fill:
            if num_devices % fixed:
                raise ValueError(
                    f"mesh {dict(zip(names, sizes))}: {num_devices} devices are not divisible by the fixed axes' "
                    f"product {fixed}; make the fixed axes multiply to a divisor of {num_devices}"
                )
            sizes[fill[0]] = num_devices // fixed
        elif fixed != num_devices:
            raise ValueError(
                f"mesh {dict(zip(names, sizes))} needs {fixed} devices but {num_devices} are available; "
                f"make {'*'.join(names)} = {num_devices} or set one axis to -1"
            )
        return tuple(sizes)
