"""One process of the 2-process rollout engine test: lockstep sampling on params sharded over both processes.

Usage: python -m tests.rollout.mp_engine_worker PROCESS_ID NUM_PROCESSES PORT OUT_JSON
The model's params are read from params.npz next to OUT_JSON (`save_params`: the test writes `model()`'s, so the
workers compile no init program). `collect(mesh, num_envs, first, n, model)` is what both the workers and the
single-process reference run; `one_process(**mesh_shape)` is that reference (all the workers' episodes, in one process
on a 4-device mesh), run once per test process: tests/rollout/test_engine.py's sharded-slots test reads it too.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

import numpy as np

MESH = dict(fsdp=2, tensor=2)  # 4 devices: 2 processes x 2 (fsdp across them, tensor within), or 1 x 4
ENVS_PER_PROCESS, EPISODES_PER_PROCESS = 4, 6


def _cfg():
    from jgem.models.config import preset

    return preset("tiny", num_layers=2, hidden_size=64, intermediate_size=128, num_heads=4, num_kv_heads=2)


@functools.cache
def model() -> tuple:
    """(cfg, graphdef, params) of the model every run here samples with: `init_model(cfg, seed=0)`, on one device."""
    from flax import nnx

    from jgem.models.transformer import init_model

    cfg = _cfg()
    return (cfg, *nnx.split(init_model(cfg, seed=0)))


def save_params(state, path) -> None:
    """`model()`'s params as `load_model` reads them."""
    import jax

    np.savez(path, *[np.asarray(x) for x in jax.tree.leaves(state)])


def load_model(path) -> tuple:
    """`model()`, its params read from `path` (host arrays: nothing compiles)."""
    import jax
    from flax import nnx

    from jgem.models.transformer import Transformer

    cfg = _cfg()
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
    with np.load(path) as f:
        leaves = [f[f"arr_{i}"] for i in range(len(f.files))]
    want = jax.tree.leaves(abstract)
    assert [(x.shape, x.dtype) for x in leaves] == [(a.shape, a.dtype) for a in want], "params.npz is another model's"
    return cfg, graphdef, jax.tree.unflatten(jax.tree.structure(abstract), leaves)


def collect_episodes(mesh, num_envs: int, first: int, n: int, model: tuple) -> tuple[list, object, int, int]:
    """Episodes first .. first+n-1 on `num_envs` envs of this process, `model`'s params sharded on `mesh` by the
    rules: (episodes, the engine's stats, param bytes, param bytes this process holds)."""
    import jax

    from jgem.envs.pool import EnvPool
    from jgem.models.tokenizer import ChatFormat, load_tokenizer
    from jgem.registry import register
    from jgem.rollout.config import RolloutConfig
    from jgem.rollout.engine import EpisodeSpec, RolloutEngine, wrappers_for_view
    from jgem.sharding.rules import shard_tree
    from tests.rollout.envs import TalkEnv

    register("test:talk", TalkEnv, overwrite=True)
    chat = ChatFormat(load_tokenizer())
    cfg, graphdef, state = model
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
    return eps, engine.stats, int(total), int(addressable)


def collect(mesh, num_envs: int, first: int, n: int, model: tuple) -> dict:
    """`collect_episodes` as JSON: each episode's stream and action log-probs, the param bytes, shared prefix tokens."""
    return as_json(*collect_episodes(mesh, num_envs, first, n, model))


def as_json(eps, stats, total: int, addressable: int) -> dict:
    return {
        "episodes": {
            str(e.episode_id): {
                "stream": e.stream.tolist(),
                "logprobs": [t.action_logprobs.tolist() for t in e.transitions],
            }
            for e in eps
        },
        "param_bytes": total,
        "addressable_param_bytes": addressable,
        "shared_prefix_tokens": stats.shared_prefix_tokens,
    }


@functools.cache
def one_process(**mesh_shape: int) -> tuple[list, object, int, int]:
    """`collect_episodes` of every worker's episodes (2 x EPISODES_PER_PROCESS on 2 x ENVS_PER_PROCESS envs) in this
    one process, params sharded on a mesh of `mesh_shape` over its first 4 devices. Cached: the tests that read it
    share one run (they are in one xdist group); they must not change what it returns."""
    import jax

    from jgem.sharding.config import MeshConfig
    from jgem.sharding.mesh import make_mesh

    mesh = make_mesh(MeshConfig(**mesh_shape), devices=jax.devices()[:4])
    return collect_episodes(mesh, 2 * ENVS_PER_PROCESS, 0, 2 * EPISODES_PER_PROCESS, model())


def main(process_id: int, num_processes: int, port: int, out: str) -> None:
    from jgem.sharding.mesh import initialize

    initialize(f"localhost:{port}", num_processes, process_id)
    import jax

    from jgem.sharding.config import MeshConfig
    from jgem.sharding.mesh import make_mesh

    assert jax.process_count() == num_processes
    mesh = make_mesh(MeshConfig(**MESH))
    n = EPISODES_PER_PROCESS
    result = collect(mesh, ENVS_PER_PROCESS, process_id * n, n, load_model(Path(out).parent / "params.npz"))
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    np.set_printoptions(linewidth=200)
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
