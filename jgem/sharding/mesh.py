"""Device meshes (data, fsdp, tensor) and multi-host initialisation."""

from __future__ import annotations

import logging
import os

import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh

from jgem.sharding.config import AXES, MeshConfig

log = logging.getLogger(__name__)


def make_mesh(cfg: MeshConfig | None = None, devices: list | None = None) -> Mesh:
    """A `Mesh` with axes (data, fsdp, tensor) over `devices` (default: all, across processes).

    Without a config every device goes to `data` (pure data parallelism).
    """
    cfg = cfg or MeshConfig(data=-1)
    devices = list(jax.devices() if devices is None else devices)
    shape = cfg.resolve(len(devices))
    if devices[0].platform == "cpu":
        dev_array = np.asarray(devices, dtype=object).reshape(shape)
    else:  # topology-aware placement (ICI rings on TPU, NVLink islands on GPU)
        # splitting a physical axis lets e.g. tensor=8 sit on a 4x4x4 or 16x16 slice (else NotImplementedError)
        dev_array = mesh_utils.create_device_mesh(shape, devices=devices, allow_split_physical_axes=True)
    return Mesh(dev_array, AXES, axis_types=(AxisType.Auto,) * len(AXES))


def split_meshes(cfg: MeshConfig | None = None, devices: list | None = None) -> tuple[Mesh, Mesh]:
    """(the learner's mesh, the sampler's): with `cfg.rollout_devices` N the sampler's over the first N devices
    (`cfg.rollout()`'s axes), the learner's over the rest; without, one mesh over every device, twice."""
    cfg = cfg or MeshConfig(data=-1)
    devices = list(jax.devices() if devices is None else devices)
    n = cfg.rollout_devices
    if not n:
        mesh = make_mesh(cfg, devices)
        return mesh, mesh
    if errors := cfg.split_errors(len(devices)):
        raise ValueError(errors[0])
    return make_mesh(cfg, devices[n:]), make_mesh(cfg.rollout(), devices[:n])


def process_max(values) -> list[int]:
    """The element-wise maximum of `values` (integers) over all processes: one host all-gather; in one process,
    `values` themselves. Every process must call it, with as many values."""
    if jax.process_count() == 1:
        return [int(v) for v in values]
    from jax.experimental import multihost_utils

    gathered = multihost_utils.process_allgather(np.asarray(values, np.int64))
    return [int(v) for v in np.asarray(gathered).reshape(-1, len(values)).max(axis=0)]


def batch_axis_size(mesh: Mesh) -> int:
    """Number of shards of the batch dimension (data * fsdp)."""
    return mesh.shape["data"] * mesh.shape["fsdp"]


def _on_tpu_vm() -> bool:
    return bool(
        os.environ.get("TPU_WORKER_HOSTNAMES")
        or os.environ.get("TPU_ACCELERATOR_TYPE")
        or os.environ.get("CLOUD_TPU_TASK_ID")
    )


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    local_device_ids: list[int] | None = None,
) -> bool:
    """Start `jax.distributed` for multi-host runs; returns True when it was started.

    Arguments override the env vars JGEM_COORDINATOR (host:port), JGEM_NUM_PROCESSES, JGEM_PROCESS_ID.
    With neither, a TPU VM is auto-detected (jax reads the topology itself); otherwise it is a no-op
    (single process). Call before any other jax call. CPU processes use gloo collectives.
    """
    coordinator_address = coordinator_address or os.environ.get("JGEM_COORDINATOR")
    if num_processes is None and os.environ.get("JGEM_NUM_PROCESSES"):
        num_processes = int(os.environ["JGEM_NUM_PROCESSES"])
    if process_id is None and os.environ.get("JGEM_PROCESS_ID"):
        process_id = int(os.environ["JGEM_PROCESS_ID"])
    given = [coordinator_address is not None, num_processes is not None, process_id is not None]
    if any(given) and not all(given):
        raise ValueError(
            f"multi-host initialize needs coordinator_address, num_processes and process_id together "
            f"(or env JGEM_COORDINATOR, JGEM_NUM_PROCESSES, JGEM_PROCESS_ID); got coordinator={coordinator_address}, "
            f"num_processes={num_processes}, process_id={process_id}"
        )
    if all(given):
        if not 0 <= process_id < num_processes:
            raise ValueError(f"process_id {process_id} is outside [0, {num_processes}); ids run 0..num_processes-1")
        # only affects the CPU backend (harmless on GPU/TPU hosts); without it CPU processes cannot all-reduce
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=coordinator_address,
            num_processes=num_processes,
            process_id=process_id,
            local_device_ids=local_device_ids,
        )
        log.info("jax.distributed: process %d/%d via %s", process_id, num_processes, coordinator_address)
        return True
    if _on_tpu_vm():
        jax.distributed.initialize()
        return True
    return False
