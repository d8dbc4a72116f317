"""Two JAX processes on localhost (gloo CPU collectives): global ReBN statistics and one update equal 1 process."""

import numpy as np
import pytest

from tests.algos import mp_worker
from tests.multiprocess import run_workers


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_processes_match_one(tmp_path):
    outs = [tmp_path / f"p{i}.json" for i in range(2)]
    results = run_workers("tests.algos.mp_worker", outs, devices=1, timeout=420)
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
