"""Helpers for tests that start several JAX processes on localhost (gloo CPU collectives)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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
        XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}",
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
