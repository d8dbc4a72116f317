"""Helpers for tests that start several JAX processes on localhost (gloo CPU collectives)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Tests compile thousands of small programs and run each a few times: LLVM's optimisations cost them more compile
# time than they save (a tiny model's init compiles in 2.4 s instead of 6.4 s). XLA's own passes (fusion, layout,
# sharding) all still run. XLA:CPU's MLIR fusion emitters compile a fusion in about twice the time of its classic
# loop emitters (a 1-layer model's update: 2.0 s instead of 4.4 s of backend compilation; tests/algos/test_learner.py
# with tests/models/test_transformer.py: 101 s instead of 165 s on 2 workers), so tests use the classic ones; the
# programs compute the same functions. tests/conftest.py sets both for the suite; processes tests start get them
# from `xla_flags`.
TEST_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_cpu_use_fusion_emitters=false"


def xla_flags(devices: int) -> str:
    """XLA_FLAGS for a test's subprocess of `devices` CPU devices."""
    return f"--xla_force_host_platform_device_count={devices} {TEST_XLA_FLAGS}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run_workers(module: str, outs: list[Path], *, devices: int, timeout: float = 600) -> list[dict]:
    """`python -m module PROCESS_ID NUM_PROCESSES PORT OUT_JSON` in len(outs) processes of `devices` CPU devices
    each; waits for all (killing the rest on a failure or timeout) and returns each one's JSON."""
    port, n = free_port(), len(outs)
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        XLA_FLAGS=xla_flags(devices),
        JAX_NUM_CPU_DEVICES=str(devices),
        PYTHONPATH=str(ROOT),
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", module, str(i), str(n), str(port), str(out)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i, out in enumerate(outs)
    ]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=timeout)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(p.returncode == 0 for p in procs), "\n".join(log[-3000:] for log in logs)
    return [json.loads(Path(o).read_text()) for o in outs]
