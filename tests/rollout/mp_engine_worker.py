"""One process of the 2-process rollout engine test: lockstep sampling on params sharded over both processes.

Usage: python -m tests.rollout.mp_engine_worker PROCESS_ID NUM_PROCESSES PORT OUT_JSON
`collect(mesh, num_envs, first, n)` is what both the workers and the single-process reference run.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

MESH = dict(fsdp=2, tensor=2)  # 4 devices: 2 processes x 2 (fsdp across them, tensor within), or 1 x 4
ENVS_PER_PROCESS, EPISODES_PER_PROCESS = 4, 6


def collect(mesh, num_envs: int, first: int, n: int) -> dict:
    """Episodes first .. first+n-1 on `num_envs` envs of this process, params sharded on `mesh` by the rules."""
    import jax
    from flax import nnx

    from jgem.envs.pool import EnvPool
    from jgem.models.config import preset
    from jgem.models.tokenizer import ChatFormat, load_tokenizer
    from jgem.models.transformer import init_model
    from jgem.registry import register
    from jgem.rollout.config import RolloutConfig
    from jgem.rollout.engine import EpisodeSpec, RolloutEngine, wrappers_for_view
    from jgem.sharding.rules import shard_tree
    from tests.rollout.envs import TalkEnv

    register("test:talk", TalkEnv, overwrite=True)
    chat = ChatFormat(load_tokenizer())
    cfg = preset("tiny", num_layers=2, hidden_size=64, intermediate_size=128, num_heads=4, num_kv_heads=2)
    graphdef, state = nnx.split(init_model(cfg, seed=0))
    state = shard_tree(state, mesh)
    addressable = total = 0
    for leaf in jax.tree.leaves(state):
        total += leaf.nbytes
        seen = {str(s.index): s.data.nbytes for s in leaf.addressable_shards}  # one copy of each distinct shard
        addressable += sum(seen.values())
    rcfg = RolloutConfig(max_new_tokens=8, temperature=1.0)
    with EnvPool("test:talk", num_envs, wrappers=wrappers_for_view("chat")) as pool:
        engine = RolloutEngine(cfg, pool, chat, rcfg, env_name="test:talk", mesh=mesh)
        specs = [EpisodeSpec(i, i // 2, 100 + i // 2) for i in range(first, first + n)]
        eps = engine.collect((graphdef, state), specs, jax.random.key(3), max_turns=4)
    return {
        "episodes": {
            str(e.episode_id): {
                "stream": e.stream.tolist(),
                "logprobs": [t.action_logprobs.tolist() for t in e.transitions],
            }
            for e in eps
        },
        "param_bytes": int(total),
        "addressable_param_bytes": int(addressable),
        "shared_prefix_tokens": engine.stats.shared_prefix_tokens,
    }


def main(process_id: int, num_processes: int, port: int, out: str) -> None:
    from jgem.sharding.mesh import initialize

    initialize(f"localhost:{port}", num_processes, process_id)
    import jax

    from jgem.sharding.config import MeshConfig
    from jgem.sharding.mesh import make_mesh

    assert jax.process_count() == num_processes
    mesh = make_mesh(MeshConfig(**MESH))
    n = EPISODES_PER_PROCESS
    result = collect(mesh, ENVS_PER_PROCESS, process_id * n, n)
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    np.set_printoptions(linewidth=200)
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
