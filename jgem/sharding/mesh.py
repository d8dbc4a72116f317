"""Device meshes (data, fsdp, tensor) and multi-host initialisation."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import traceback

import jax
import numpy as np
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jgem.sharding.config import AXES, MeshConfig

log = logging.getLogger(__name__)


def make_mesh(cfg: MeshConfig | None = None, devices: list | None = None, *, any_devices: bool = False) -> Mesh:
    """A `Mesh` with axes (data, fsdp, tensor) over `devices` (default: all, across processes).

    Without a config every device goes to `data` (pure data parallelism). `any_devices`: the devices may be any
    subset (a side of a split), laid out in id order where they form no box of the slice.
    """
    cfg = cfg or MeshConfig(data=-1)
    devices = list(jax.devices() if devices is None else devices)
    shape = cfg.resolve(len(devices))
    if devices[0].platform == "cpu":
        dev_array = np.asarray(devices, dtype=object).reshape(shape)
    else:  # topology-aware placement (ICI rings on TPU, NVLink islands on GPU)
        # splitting a physical axis lets e.g. tensor=8 sit on a 4x4x4 or 16x16 slice (else NotImplementedError)
        try:
            dev_array = mesh_utils.create_device_mesh(shape, devices=devices, allow_split_physical_axes=True)
        except (AssertionError, ValueError, NotImplementedError) as e:
            if not any_devices:
                raise
            # a set of chips that is no box of the slice (one side of a per-process split: some chips of each
            # host): jax cannot lay rings over it; the devices in id order
            log.warning("mesh %s over %d devices in id order: %s", shape, len(devices), str(e).splitlines()[0][:200])
            dev_array = np.asarray(sorted(devices, key=lambda d: d.id), dtype=object).reshape(shape)
    return Mesh(dev_array, AXES, axis_types=(AxisType.Auto,) * len(AXES))


def split_meshes(cfg: MeshConfig | None = None, devices: list | None = None) -> tuple[Mesh, Mesh]:
    """(the learner's mesh, the sampler's): with `cfg.rollout_devices` N the sampler's over N devices
    (`cfg.rollout()`'s axes), the learner's over the rest; without, one mesh over every device, twice.

    `per_process` (the default): each process gives the sampler the same share of its own devices (its first
    N / processes, by id): every process keeps both roles, its envs' episodes are trained where they were played,
    and a publication pairs devices of one host (on a TPU VM, chips next to each other). `first`: the first N
    devices (in one process the same). In one process both are the first N devices."""
    cfg = cfg or MeshConfig(data=-1)
    devices = list(jax.devices() if devices is None else devices)
    n = cfg.rollout_devices
    if not n:
        mesh = make_mesh(cfg, devices)
        return mesh, mesh
    if errors := cfg.split_errors(len(devices)):
        raise ValueError(errors[0])
    if cfg.rollout_placement == "first":
        return make_mesh(cfg, devices[n:], any_devices=True), make_mesh(cfg.rollout(), devices[:n], any_devices=True)
    by_process: dict[int, list] = {}
    for d in sorted(devices, key=lambda d: (d.process_index, d.id)):
        by_process.setdefault(d.process_index, []).append(d)
    if n % len(by_process):
        raise ValueError(
            f"mesh.rollout_devices {n} is not a multiple of the {len(by_process)} processes: each process gives the "
            f"sampler the same share of its devices; use a multiple of {len(by_process)}"
        )
    k = n // len(by_process)
    sampler = [d for ds in by_process.values() for d in ds[:k]]
    learner = [d for ds in by_process.values() for d in ds[k:]]
    return make_mesh(cfg, learner, any_devices=True), make_mesh(cfg.rollout(), sampler, any_devices=True)


EXIT_GRACE_S = 10.0  # process 0's wait before it ends on an error (the others poll for errors once a second)


@contextlib.contextmanager
def exit_at_once_on_error():
    """Around a multi-process program's work: an error (not a SystemExit) prints its traceback and ends this
    process at once (`os._exit(1)`). Its peers may be blocked in a collective with it, which no message reaches;
    the coordinator's heartbeat (`JGEM_HEARTBEAT_TIMEOUT`) stops them once this process is gone, where a normal
    exit would hold every process in jax's shutdown barrier for minutes. Process 0 hosts the coordinator: it
    stays up `EXIT_GRACE_S` first, so that the others can still read an error posted there (`jgem.train.roles`)
    and leave with it. One process: a normal raise."""
    try:
        yield
    except (Exception, KeyboardInterrupt):
        if jax.process_count() == 1:
            raise
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        if jax.process_index() == 0:
            time.sleep(EXIT_GRACE_S)
        os._exit(1)


def process_max(values, mesh: Mesh | None = None) -> list[int]:
    """The element-wise maximum of `values` (integers) over the processes of `mesh` (default: all devices, so
    all processes): one small all-gather program; in one process, `values` themselves. Every process that holds
    devices of `mesh`, and only those, must call it, with as many values.

    With split meshes a side agrees over its own devices: a program over every device would wait behind the other
    side's work (the sampler's rounds behind the learner's update), and on CPU processes (gloo) a program over
    some devices must not run while one over a superset of them does. In a role split (whole processes on each
    side, `jgem.train.roles`) only that side's processes take part."""
    devices = sorted(jax.devices() if mesh is None else mesh.devices.flat, key=lambda d: d.id)
    if len({d.process_index for d in devices}) == 1:
        return [int(v) for v in values]
    # a row per device of the set, each process's on its own devices: the program runs on the same devices as the
    # side's others (on CPU processes a program over part of a set of devices must not overlap one over all of it)
    line = Mesh(np.asarray(devices, dtype=object), ("p",))
    v = np.asarray(values, np.int64).reshape(1, -1)
    if v.size and (v.min() < -(2**31) or v.max() >= 2**31):
        raise OverflowError(f"process_max takes int32 values, got {v.min()}..{v.max()}")
    mine = [jax.device_put(v.astype(np.int32), d) for d in devices if d.process_index == jax.process_index()]
    arr = jax.make_array_from_single_device_arrays((len(devices), v.shape[1]), NamedSharding(line, P("p")), mine)
    try:
        out = np.asarray(replicated(line)(arr).addressable_data(0))
    except (jax.errors.JaxRuntimeError, ValueError) as e:  # gloo reports a lost peer as a ValueError
        raise RuntimeError(
            f"the processes' agreement (process_max) failed ({str(e).splitlines()[0][:300]}): a process of the run "
            "has probably died; the run stops here, resume it from its last checkpoint"
        ) from e
    return [int(x) for x in out.max(axis=0)]


_REPLICATED: dict = {}


def replicated(mesh: Mesh):
    """A program that copies an array (or a tree of them) whole onto every device of `mesh`, one per mesh; only
    the processes of `mesh` run it."""
    if mesh not in _REPLICATED:
        _REPLICATED[mesh] = jax.jit(lambda a: a, out_shardings=NamedSharding(mesh, P()))
    return _REPLICATED[mesh]


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

    Arguments override the env vars JGEM_COORDINATOR (host:port), JGEM_NUM_PROCESSES, JGEM_PROCESS_ID;
    JGEM_HEARTBEAT_TIMEOUT (seconds, default 100) is how long a dead process goes unnoticed before the others stop.
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
        # how long the coordinator waits for a silent process before it stops the others (jax's default: 100 s)
        heartbeat = int(os.environ.get("JGEM_HEARTBEAT_TIMEOUT", "100"))
        jax.distributed.initialize(
            coordinator_address=coordinator_address,
            num_processes=num_processes,
            process_id=process_id,
            local_device_ids=local_device_ids,
            heartbeat_timeout_seconds=heartbeat,
        )
        log.info("jax.distributed: process %d/%d via %s", process_id, num_processes, coordinator_address)
        return True
    if _on_tpu_vm():
        jax.distributed.initialize()
        return True
    return False
