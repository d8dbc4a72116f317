"""Expert parallelism (jgem.models.moe._expert_parallel) on the suite's 8 simulated CPU devices: a tiny MoE's logits,
routing and gradients on meshes with an `expert` axis (with data, fsdp, tensor) equal the one-device ones; a capacity
drops pairs only when it is set, and counts them."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jgem.models.transformer import Transformer
from jgem.sharding.config import MeshConfig
from jgem.sharding.mesh import make_mesh
from jgem.sharding.rules import shard_batch, shard_tree
from tests.models.helpers import VOCAB, tiny_cfg

B, T = 8, 12
TOKS = np.random.RandomState(1).randint(0, VOCAB, (B, T)).astype(np.int32)
POS = np.broadcast_to(np.arange(T, dtype=np.int32), (B, T)).copy()
SEG = np.ones((B, T), np.int32)
SEG[3, 8:] = 0  # a padded row
# float32 throughout: the sharded program sums the same float32 terms in another order (each token's k expert
# outputs scatter-added per shard, then summed over the expert and tensor shards; XLA's partitioned matmuls and
# reductions elsewhere), so the results agree to float32 rounding, relative 1e-6 over a few layers; 1e-5 leaves
# room and still fails for any token sent to a wrong expert or dropped (those change logits by O(0.1))
RTOL, ATOL = 1e-5, 1e-5


def cfg(**kw):
    base = dict(num_layers=2, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16, norm_topk_prob=True)
    return tiny_cfg("qwen3_moe", **{**base, **kw})


@functools.cache
def model(**kw) -> Transformer:
    m = Transformer(cfg(**kw), rngs=nnx.Rngs(0))
    state = nnx.state(m, nnx.Param)
    nnx.update(m, jax.tree.map(lambda x: x if x.ndim == 1 else 12.5 * x, state))  # routes far from ties
    return m


def loss_fn(params, graphdef, rest, toks, pos, seg, w):
    m = nnx.merge(graphdef, params, rest)
    logits, _, routing = m.routed(toks, pos, segment_ids=seg)
    return jnp.sum(jax.nn.log_softmax(logits) * w) + routing.aux_loss(), (logits, routing)


def run(mesh_cfg: MeshConfig | None, **kw):
    """(logits, expert ids, dropped pairs, grads) of `model(**kw)` on one device or on the mesh of `mesh_cfg`."""
    m = model(**kw)
    graphdef, params, rest = nnx.split(m, nnx.Param, ...)
    w = jnp.asarray(np.random.RandomState(2).randn(B, T, VOCAB).astype(np.float32))
    f = jax.jit(jax.value_and_grad(loss_fn, has_aux=True), static_argnums=1)
    args = (TOKS, POS, SEG, w)
    if mesh_cfg is None:
        with jax.default_device(jax.devices()[0]):
            (_, (logits, routing)), grads = f(params, graphdef, rest, *args)
    else:
        mesh = make_mesh(mesh_cfg)
        params, rest = shard_tree(params, mesh), shard_tree(rest, mesh)
        with jax.set_mesh(mesh):
            (_, (logits, routing)), grads = f(params, graphdef, rest, *shard_batch(args, mesh))
    assert float(routing.dropped_frac()) == pytest.approx(float(routing.dropped) / routing.expert_ids.size)
    return np.asarray(logits), np.asarray(routing.expert_ids), float(routing.dropped), jax.tree.map(np.asarray, grads)


MESHES = {
    "expert2-data4": MeshConfig(data=4, expert=2),
    "expert4-fsdp2": MeshConfig(fsdp=2, expert=4),
    "expert2-fsdp2-tensor2": MeshConfig(fsdp=2, expert=2, tensor=2),
    "expert8": MeshConfig(expert=8),  # one expert per device, fewer than k = 2
}


@pytest.mark.parametrize("name", MESHES)
def test_expert_parallel_logits_and_gradients_equal_one_device(name):
    logits, ids, dropped, grads = run(None)
    p_logits, p_ids, p_dropped, p_grads = run(MESHES[name])
    np.testing.assert_array_equal(p_ids, ids)
    np.testing.assert_allclose(p_logits, logits, rtol=RTOL, atol=ATOL)
    assert dropped == p_dropped == 0
    flat, p_flat = jax.tree_util.tree_leaves_with_path(grads), jax.tree.leaves(p_grads)
    for (path, g), pg in zip(flat, p_flat):
        np.testing.assert_allclose(pg, g, rtol=RTOL, atol=ATOL * max(1.0, np.abs(g).max()), err_msg=str(path))


def test_scanned_layers_under_expert_parallelism_equal_one_device():
    """The training forward scanned over the layers (as on TPU): the experts' shard_map inside the scan's body."""
    logits, ids, _, grads = run(None, scan_layers=True)
    p_logits, p_ids, _, p_grads = run(MeshConfig(fsdp=2, expert=2, tensor=2), scan_layers=True)
    np.testing.assert_array_equal(p_ids, ids)
    np.testing.assert_allclose(p_logits, logits, rtol=RTOL, atol=ATOL)
    for g, pg in zip(jax.tree.leaves(grads), jax.tree.leaves(p_grads)):
        np.testing.assert_allclose(pg, g, rtol=RTOL, atol=ATOL * max(1.0, np.abs(g).max()))


def test_a_capacity_drops_only_the_overflow_and_counts_it():
    """Each expert shard's buffer at capacity x its balanced share: with a generous one nothing is dropped and the
    logits are exact; with half the share, about half the pairs (at least those past the buffer) are dropped, counted
    in `Routing.dropped`, and the logits change."""
    logits, _, _, _ = run(None)
    exact, _, dropped, _ = run(MeshConfig(fsdp=2, expert=4), expert_capacity_factor=4.0)
    assert dropped == 0
    np.testing.assert_allclose(exact, logits, rtol=RTOL, atol=ATOL)
    cut, _, dropped, _ = run(MeshConfig(fsdp=2, expert=4), expert_capacity_factor=0.5)
    pairs = 2 * B * T * 2  # sparse layers x tokens x k: 384
    # an expert group (4 devices, one row each) gathers 48 tokens; each of its 4 shards' buffer holds 0.5 x the
    # balanced 48 x 2 / 4 = 24 pairs, rounded up to 16 rows: per layer at most 2 groups x 4 shards x 16 = 128 of the
    # 192 pairs run, so at least 64 a layer are dropped (the routes are unbalanced: more), never all
    assert pairs - 2 * 128 <= dropped < pairs
    assert not np.allclose(cut, logits, atol=1e-3)


def test_a_mesh_without_expert_axis_is_unchanged():
    from jgem.sharding.rules import batch_sharding

    mesh = make_mesh(MeshConfig(fsdp=2, tensor=2, data=2))
    assert mesh.axis_names == ("data", "fsdp", "tensor")
    assert batch_sharding(mesh).spec == jax.sharding.PartitionSpec(("data", "fsdp"), None)
    ep = make_mesh(MeshConfig(fsdp=2, expert=4))
    assert dict(ep.shape) == {"data": 1, "fsdp": 2, "expert": 4, "tensor": 1}
    assert batch_sharding(ep).spec == jax.sharding.PartitionSpec(("data", "fsdp", "expert"), None)
    with pytest.raises(ValueError, match="make data\\*fsdp\\*expert\\*tensor = 8"):
        MeshConfig(fsdp=3, expert=2).resolve(8)
    # on the expert mesh the dense weights' embed dimension is split over (fsdp, expert), the experts' over expert
    from jgem.sharding.rules import tree_shardings

    specs = {
        ".".join(str(getattr(k, "key", k)) for k in path): v.get_value().spec
        for path, v in jax.tree_util.tree_leaves_with_path(
            tree_shardings(nnx.state(model(), nnx.Param), ep), is_leaf=lambda x: isinstance(x, nnx.Variable)
        )
    }
    assert specs["embed"] == jax.sharding.PartitionSpec(None, ("fsdp", "expert"))
    assert specs["layers.0.mlp.experts.gate"] == jax.sharding.PartitionSpec("expert", "fsdp")
    assert specs["layers.0.mlp.experts.down"] == jax.sharding.PartitionSpec("expert", None, "fsdp")
