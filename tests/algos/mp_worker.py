"""One process of the 2-process localhost test: global ReBN + one sharded update under jax.distributed.

Usage: python -m tests.algos.mp_worker PROCESS_ID NUM_PROCESSES PORT OUT_JSON
Without arguments, `reference()` computes the same on one device in the calling process.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

E, K = 16, 2  # one row per episode, one packed segment per turn (see helpers.make_batch)


def episodes():
    rng = np.random.default_rng(7)
    rewards = (rng.normal(size=(E, K)) + np.arange(E)[:, None] * 0.3).astype(np.float32)  # halves differ
    mask = np.ones((E, K), bool)
    mask[::3, 1] = False
    return rewards, mask


def run(mesh, rewards, mask, batch):
    """rebn over the (global) episodes, spread onto action tokens, then one update; returns host results."""
    import jax
    import jax.numpy as jnp

    from jgem.algos.advantages import masked_mean_std, rebn
    from jgem.algos.config import LearnerConfig
    from jgem.algos.learner import init_train_state, update
    from tests.algos.helpers import CFG, tiny_model

    @jax.jit
    def advantages(rewards, mask, segment_ids, loss_mask):
        out = rebn(rewards, mask, gamma=0.9)
        mean, std = masked_mean_std(out.returns, mask)
        seg = jnp.clip(segment_ids - 1, 0, K - 1)
        per_token = jnp.take_along_axis(out.advantages, seg, axis=1)
        return jnp.where(loss_mask, per_token, 0.0), mean, std

    adv, mean, std = advantages(rewards, mask, batch.segment_ids, batch.loss_mask)
    batch = batch.replace(advantages=adv)
    state = init_train_state(tiny_model(), LearnerConfig(**{**CFG.__dict__, "micro_batch_size": 2}), mesh)
    state, metrics = update(state, batch)
    local = lambda x: np.asarray(x.addressable_data(0))
    leaves = jax.tree.leaves(state.params)
    return {
        "rebn_mean": float(local(mean)),
        "rebn_std": float(local(std)),
        "metrics": {k: float(local(v)) for k, v in metrics.items()},
        "param_sq": float(sum(np.sum(local(x).astype(np.float64) ** 2) for x in leaves)),
        "param_probe": local(leaves[0]).ravel()[:64].tolist(),
    }


def reference() -> dict:
    import jax

    from tests.algos.helpers import make_batch

    rewards, mask = episodes()
    batch = jax.device_put(make_batch(), jax.devices()[0])
    return run(None, rewards, mask, batch)


def main(process_id: int, num_processes: int, port: int, out: str) -> None:
    from jgem.sharding.mesh import initialize

    initialize(f"localhost:{port}", num_processes, process_id)
    import jax

    from jgem.sharding.config import MeshConfig
    from jgem.sharding.mesh import make_mesh
    from jgem.sharding.rules import shard_batch
    from tests.algos.helpers import make_batch

    assert jax.process_count() == num_processes and len(jax.devices()) == num_processes
    mesh = make_mesh(MeshConfig(data=num_processes))
    rows = slice(process_id * E // num_processes, (process_id + 1) * E // num_processes)
    rewards, mask = episodes()
    full = make_batch()
    local_batch = jax.tree.map(lambda x: np.asarray(x)[rows], full)
    rewards_g, mask_g, batch = shard_batch((rewards[rows], mask[rows], local_batch), mesh, process_local=True)
    result = run(mesh, rewards_g, mask_g, batch)
    result["process_id"] = process_id
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
