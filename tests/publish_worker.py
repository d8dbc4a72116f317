"""One process of tests/test_split.py's 2-process test: the sampler's devices are process 0's, the learner's process
1's; the learner's params published device to device (`Publisher`, one program over both processes' devices), then
each process scores the same tokens with its side's copy of the policy.

Usage: python -m tests.publish_worker PROCESS_ID NUM_PROCESSES PORT OUT_JSON
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main() -> None:
    pid, n, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], Path(sys.argv[4])
    from jgem.sharding.mesh import initialize

    initialize(f"127.0.0.1:{port}", n, pid)
    import jax
    import numpy as np
    from flax import nnx

    from jgem.models.config import preset
    from jgem.models.head import token_logprobs
    from jgem.models.transformer import init_model
    from jgem.sharding.config import MeshConfig
    from jgem.sharding.mesh import split_meshes
    from jgem.sharding.publish import Publisher
    from jgem.sharding.rules import tree_shardings

    # 2 devices a side: the learner's params fsdp over process 1's, the sampler's replicated over process 0's
    learner, sampler = split_meshes(
        MeshConfig(fsdp=-1, rollout_devices=jax.device_count() // 2, rollout_placement="first")
    )
    cfg = preset("tiny", num_layers=1, hidden_size=64, intermediate_size=128, num_heads=2, num_kv_heads=1)
    graphdef, params, rest = nnx.split(init_model(cfg, seed=5, mesh=learner), nnx.Param, ...)
    pub = Publisher(learner, sampler)
    on = lambda tree: tree_shardings(tree, sampler)
    s_rest = pub(rest, on(rest))
    s_params = pub(params, on(params))
    # an update: new params on the learner (a program over its devices only), published into the old copy
    params = jax.jit(lambda p: jax.tree.map(lambda x: x * 1.5 + 0.01, p))(params)
    with jax.transfer_guard("disallow"):  # no host copy and no device_put: the program's collective alone
        s_params = pub(params, on(params), s_params)
    mine = lambda mesh: any(d.process_index == pid for d in mesh.devices.flat)
    tokens = np.arange(1, 33, dtype=np.int32)[None] % cfg.vocab_size
    positions = np.arange(32, dtype=np.int32)[None]
    segments = np.ones((1, 32), np.int32)
    score = jax.jit(lambda p, r: token_logprobs(nnx.merge(graphdef, p, r), tokens, positions, segments)[0])
    report = {"process": pid, "collective": pub.collective, "bytes": pub.bytes}
    if mine(learner):
        report["learner"] = np.asarray(score(params, rest)).tolist()
    if mine(sampler):
        report["sampler"] = np.asarray(score(s_params, s_rest)).tolist()
        report["sampler_devices"] = sorted({d.process_index for x in jax.tree.leaves(s_params) for d in x.devices()})
    out.write_text(json.dumps(report))


if __name__ == "__main__":
    main()
