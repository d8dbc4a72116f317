"""Two JAX processes on localhost (gloo CPU collectives): global ReBN statistics and one update equal 1 process."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.algos import mp_worker

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_processes_match_one(tmp_path):
    port = _free_port()
    env = dict(
        os.environ,
        JAX_PLATFORMS="cpu",
        XLA_FLAGS="--xla_force_host_platform_device_count=1",
        JAX_NUM_CPU_DEVICES="1",
        PYTHONPATH=str(ROOT),
    )
    outs = [tmp_path / f"p{i}.json" for i in range(2)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.algos.mp_worker", str(i), "2", str(port), str(outs[i])],
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
            logs.append(p.communicate(timeout=420)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert all(p.returncode == 0 for p in procs), "\n".join(log[-3000:] for log in logs)
    results = [json.loads(o.read_text()) for o in outs]
    ref = mp_worker.reference()

    # global statistics, identical on both processes and equal to the single-process ones
    rewards, mask = mp_worker.episodes()
    for r in results:
        assert r["rebn_mean"] == pytest.approx(ref["rebn_mean"], rel=1e-6)
        assert r["rebn_std"] == pytest.approx(ref["rebn_std"], rel=1e-6)
    half = mp_worker.E // 2
    g_half = [np.mean(rewards[:half][mask[:half]]), np.mean(rewards[half:][mask[half:]])]
    assert abs(g_half[0] - g_half[1]) > 1.0  # per-process statistics would have been very different
    for k in ("loss", "grad_norm", "adv_mean", "adv_std", "entropy", "kl"):
        for r in results:
            assert r["metrics"][k] == pytest.approx(ref["metrics"][k], rel=1e-4, abs=1e-6), k
    for r in results:
        assert r["param_sq"] == pytest.approx(ref["param_sq"], rel=1e-6)
        np.testing.assert_allclose(r["param_probe"], ref["param_probe"], rtol=1e-4, atol=1e-6)
