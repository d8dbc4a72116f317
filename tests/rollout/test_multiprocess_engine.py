"""Two JAX processes on localhost (gloo CPU collectives) roll out in lockstep on params sharded over both: no
process holds the whole model, and the episodes equal one process's on the same mesh."""

import jax
import numpy as np
import pytest

from tests.multiprocess import run_workers
from tests.rollout import mp_engine_worker as worker


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_processes_sample_on_sharded_params_like_one(tmp_path):
    outs = [tmp_path / f"p{i}.json" for i in range(2)]
    results = run_workers("tests.rollout.mp_engine_worker", outs, devices=2)
    for r in results:  # fsdp=2 splits every big weight between the processes
        assert r["addressable_param_bytes"] < 0.75 * r["param_bytes"], r
        assert r["shared_prefix_tokens"] > 0

    from jgem.sharding.config import MeshConfig
    from jgem.sharding.mesh import make_mesh

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
