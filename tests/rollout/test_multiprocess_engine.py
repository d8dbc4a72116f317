"""Two JAX processes on localhost (gloo CPU collectives) roll out in lockstep on params sharded over both: no
process holds the whole model, and the episodes equal one process's on the same mesh."""

import numpy as np
import pytest

from tests.multiprocess import run_workers
from tests.rollout import mp_engine_worker as worker


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.xdist_group("rollout-engine-refs")  # with test_engine's sharded runs: one one-process reference
def test_two_processes_sample_on_sharded_params_like_one(tmp_path):
    outs = [tmp_path / f"p{i}.json" for i in range(2)]
    worker.save_params(worker.model()[2], tmp_path / "params.npz")  # the workers sample with these params
    results = run_workers("tests.rollout.mp_engine_worker", outs, devices=2)
    for r in results:  # fsdp=2 splits every big weight between the processes
        assert r["addressable_param_bytes"] < 0.75 * r["param_bytes"], r
        assert r["shared_prefix_tokens"] > 0

    n = worker.EPISODES_PER_PROCESS
    ref = worker.as_json(*worker.one_process(**worker.MESH))  # one process, the same mesh on its 4 devices
    assert ref["addressable_param_bytes"] == ref["param_bytes"]
    got = {**results[0]["episodes"], **results[1]["episodes"]}
    assert sorted(got, key=int) == sorted(ref["episodes"], key=int) == [str(i) for i in range(2 * n)]
    for i, e in ref["episodes"].items():
        assert got[i]["stream"] == e["stream"], i
        for a, b in zip(got[i]["logprobs"], e["logprobs"]):
            np.testing.assert_allclose(a, b, atol=1e-5)
