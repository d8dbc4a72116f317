"""Two JAX processes on localhost (gloo CPU collectives) roll out in lockstep on params sharded over both: no
process holds the whole model, and the episodes equal one process's on the same mesh."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from tests.rollout import mp_engine_worker as worker

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_processes_sample_on_sharded_params_like_one(tmp_path):
    port = _free_port()
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_force_host_platform_device_count=2",
        JAX_NUM_CPU_DEVICES="2",
        PYTHONPATH=str(ROOT),
    )
    outs = [tmp_path / f"p{i}.json" for i in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.rollout.mp_engine_worker", str(i), "2", str(port), str(outs[i])],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=600)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(p.returncode == 0 for p in procs), "\n".join(log[-3000:] for log in logs)
    results = [json.loads(o.read_text()) for o in outs]
    for r in results:  # fsdp=2 splits every big weight between the processes
        assert r["addressable_param_bytes"] < 0.75 * r["param_bytes"], r
        assert r["shared_prefix_tokens"] > 0

    from jgem.sharding.mesh import MeshConfig, make_mesh

    n = worker.EPISODES_PER_PROCESS
    mesh = make_mesh(MeshConfig(**worker.MESH), devices=jax.devices()[:4])
    ref = worker.collect(mesh, 2 * worker.ENVS_PER_PROCESS, 0, 2 * n)
    assert ref["addressable_param_bytes"] == ref["param_bytes"]
    got = {**results[0]["episodes"], **results[1]["episodes"]}
    assert sorted(got, key=int) == sorted(ref["episodes"], key=int) == [str(i) for i in range(2 * n)]
    for i, e in ref["episodes"].items():
        assert got[i]["stream"] == e["stream"], i
        for a, b in zip(got[i]["logprobs"], e["logprobs"]):
            np.testing.assert_allclose(a, b, atol=1e-5)
