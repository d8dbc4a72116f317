import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jgem.models.kvcache import init_slots
from jgem.models.transformer import Transformer, init_model
from tests.models.helpers import VOCAB, tiny_cfg

FAMILIES = ["qwen3", "qwen2", "llama"]
LOGICAL = {"embed", "vocab", "heads", "kv_heads", "head_dim", "mlp"}


@nnx.jit
def fwd(model, tokens, positions, segment_ids=None, cache=None):
    return model(tokens, positions, segment_ids=segment_ids, cache=cache)


@functools.cache
def _model(family="qwen3", seed=0, **kw):
    """One model per config for the whole module (tests only read them), so the programs of a config are traced
    once and shared by the tests that run it on the same shapes. Built eagerly: the values `init_model` draws (bit
    for bit: the last test), but its one program per config is a compilation of its own, where an eager build's
    small per-initialiser programs are shared by every config with the same param shapes."""
    return Transformer(tiny_cfg(family, **kw), rngs=nnx.Rngs(seed))


def _tokens(b, t, seed=0):
    return jnp.asarray(np.random.RandomState(seed).randint(0, VOCAB, (b, t)), jnp.int32)


def _pos(b, t):
    return jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))


@pytest.mark.parametrize("family", FAMILIES)
def test_kv_cache_decoding_equals_full_forward(family):
    model = _model(family)
    toks, pos = _tokens(2, 10), _pos(2, 10)
    full, none = fwd(model, toks, pos)
    assert none is None and full.shape == (2, 10, VOCAB) and full.dtype == jnp.float32
    cache = init_slots(model.cfg, 2, 16)
    outs = []
    for a, b in [(0, 4), (4, 5), (5, 6), (6, 10)]:  # chunked prefill, then one-token steps, then a chunk
        out, cache = fwd(model, toks[:, a:b], pos[:, a:b], cache=cache)
        outs.append(out)
    assert cache.max_len == 16 and cache.num_rows == 2
    np.testing.assert_allclose(jnp.concatenate(outs, 1), full, atol=2e-5)


def test_packed_segments_equal_separate_sequences():
    model = _model("qwen2")
    a, b = _tokens(1, 5, seed=1), _tokens(1, 7, seed=2)
    ref_a, _ = fwd(model, a, _pos(1, 5))
    ref_b, _ = fwd(model, b, _pos(1, 7))
    # One row: [a | b | pad pad], positions restart per segment, segment 0 = padding.
    packed = jnp.concatenate([a, b, jnp.zeros((1, 2), jnp.int32)], 1)
    positions = jnp.asarray([[0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6, 0, 0]], jnp.int32)
    segs = jnp.asarray([[1] * 5 + [2] * 7 + [0, 0]], jnp.int32)
    out, _ = fwd(model, packed, positions, segment_ids=segs)
    np.testing.assert_allclose(out[:, :5], ref_a, atol=2e-5)
    np.testing.assert_allclose(out[:, 5:12], ref_b, atol=2e-5)
    assert np.isfinite(np.asarray(out)).all()  # padding rows attend to padding only: no NaN


def test_padding_writes_nothing_to_a_slot_cache():
    """Padding (segment 0) in a call over a slot cache writes nothing, even where its positions name slots the row
    holds, and a token written past the slot length is dropped: the next step sees only the real tokens."""
    model = _model("llama")
    toks = _tokens(1, 6)
    ref, _ = fwd(model, toks, _pos(1, 6))
    padded = jnp.concatenate([toks, jnp.full((1, 3), 7, jnp.int32)], 1)
    pos = jnp.asarray([[0, 1, 2, 3, 4, 5, 0, 1, 2]], jnp.int32)  # the padding would overwrite slots 0-2
    segs = jnp.asarray([[1, 1, 1, 1, 1, 1, 0, 0, 0]], jnp.int32)
    out, cache = fwd(model, padded, pos, segment_ids=segs, cache=init_slots(model.cfg, 1, 12))
    np.testing.assert_allclose(out[:, :6], ref, atol=2e-5)
    _, same = fwd(model, toks[:, :1], jnp.asarray([[12]]), cache=cache)  # slot 12 of 12: dropped, not clamped
    for x, y in zip(jax.tree.leaves(cache), jax.tree.leaves(same)):
        np.testing.assert_array_equal(x, y)
    nxt = _tokens(1, 1, seed=5)
    step, _ = fwd(model, nxt, jnp.asarray([[6]]), segment_ids=jnp.ones((1, 1), jnp.int32), cache=cache)
    ref7, _ = fwd(model, jnp.concatenate([toks, nxt], 1), _pos(1, 7))
    np.testing.assert_allclose(step[:, 0], ref7[:, -1], atol=2e-5)


@functools.cache
def _value_model():
    """A model with every kind of param but adapters: an untied vocab head and a value head (built as `_model`)."""
    return Transformer(tiny_cfg("qwen2", tie_word_embeddings=False), rngs=nnx.Rngs(0), value_head=True)


def test_every_param_has_logical_axis_names():
    """The names are the params' metadata, part of the state's tree structure: `init_model`'s models carry the
    eager build's (the last test compares the structures)."""
    model, model_v = _model("qwen2"), _value_model()  # tied embeddings; an lm_head and a value head
    for m in (model, model_v):
        for path, var in nnx.to_flat_state(nnx.state(m, nnx.Param)):
            names = var.get_metadata().get("out_sharding")
            assert names is not None and len(names) == var.ndim, path
            assert set(names) <= LOGICAL, (path, names)
    specs = nnx.get_partition_spec(nnx.state(model_v, nnx.Param))
    assert specs["layers"][0]["attn"]["q"].get_value() == jax.sharding.PartitionSpec("embed", "heads", "head_dim")
    assert specs["lm_head"].get_value() == jax.sharding.PartitionSpec("embed", "vocab")


def test_value_head():
    model = _value_model()
    toks = _tokens(3, 5)
    h, v = nnx.jit(lambda m, t, p: (lambda h: (h, m.value(h)))(m.hidden(t, p)[0]))(model, toks, _pos(3, 5))
    assert h.shape == (3, 5, 32) and v.shape == (3, 5) and v.dtype == jnp.float32
    assert float(jnp.std(v)) > 0
    with pytest.raises(ValueError, match="value_head=True"):
        _model().value(h)


# The loss and gradients the remat and scan tests compare: mean squared logits over two packed rows (two segments;
# one segment and padding), one jitted program per model config.
GRAD_TOKS, GRAD_POS = _tokens(2, 12), _pos(2, 12)
GRAD_SEG = jnp.asarray([[1] * 5 + [2] * 7, [1] * 9 + [0] * 3], jnp.int32)


def _sq_loss(m, toks, pos, seg):
    return jnp.mean(m(toks, pos, segment_ids=seg)[0] ** 2)


_value_and_grad = nnx.jit(nnx.value_and_grad(_sq_loss))


@functools.cache
def _grads(family, **kw):
    """(loss, grads) of `_model(family, **kw)` on the packed rows above, computed once per config."""
    return _value_and_grad(_model(family, **kw), GRAD_TOKS, GRAD_POS, GRAD_SEG)


@pytest.mark.parametrize("policy", ["full", "dots_saveable", "dots_with_no_batch_dims_saveable"])
def test_remat_same_logits_and_grads(policy):
    """Each remat policy gives the plain forward's loss and gradients (the unrolled blocks: the qwen2 models and
    programs of the scan test's loop side)."""
    assert tiny_cfg("qwen2", remat=True) == tiny_cfg("qwen2", remat="full")  # True is "full": the same model
    plain, remat = _model("qwen2", scan_layers=False, remat="none"), _model("qwen2", scan_layers=False, remat=policy)
    assert remat.cfg.remat == policy and plain.cfg.remat == "none"
    (l1, g1), (l2, g2) = (
        _grads("qwen2", scan_layers=False, remat="none"),
        _grads("qwen2", scan_layers=False, remat=policy),
    )
    assert float(l1) == pytest.approx(float(l2), rel=1e-6)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_bfloat16_params_and_compute():
    f32 = _model("qwen3")
    bf = _model("qwen3", dtype="bfloat16", param_dtype="bfloat16")
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(nnx.state(bf, nnx.Param)))
    toks, pos = _tokens(2, 9), _pos(2, 9)
    ref, _ = fwd(f32, toks, pos)
    out, cache = fwd(bf, toks[:, :8], pos[:, :8], cache=init_slots(bf.cfg, 2, 9))
    assert out.dtype == jnp.float32 and cache.k[0].dtype == jnp.bfloat16
    # Same init (seed 0), rounded to bf16: logits agree to bf16 precision.
    assert float(jnp.max(jnp.abs(out - ref[:, :8]))) < 0.05 * float(jnp.max(jnp.abs(ref)))
    assert float(jnp.max(jnp.abs(out - ref[:, :8]))) > 0  # it really computed in bf16


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_dense_backward_equals_autodiff_of_matmul(dtype):
    """layers.dense's CPU backward (a materialised x^T for the weight gradient) equals plain autodiff."""
    from jgem.models.layers import dense

    rs = np.random.RandomState(0)
    x = jnp.asarray(rs.normal(size=(2, 5, 8)), dtype)
    w = jnp.asarray(rs.normal(size=(8, 3, 4)), dtype)
    ct = jnp.asarray(rs.normal(size=(2, 5, 3, 4)), jnp.float32)
    loss = lambda f: lambda x, w: jnp.sum(f(x, w).astype(jnp.float32) * ct)
    ours = jax.jit(jax.grad(loss(dense), argnums=(0, 1)))(x, w)
    ref = jax.grad(loss(lambda x, w: jnp.einsum("btd,dnh->btnh", x, w)), argnums=(0, 1))(x, w)
    tol = 1e-5 if dtype == "float32" else 0.05
    for a, b in zip(ours, ref):
        assert a.dtype == b.dtype == jnp.dtype(dtype)
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=tol, atol=tol)


@pytest.mark.parametrize("family", FAMILIES)
def test_rope_tables_exact(family):
    """The tables equal cos/sin of position * inv_freq, with Llama 3 scaling where configured."""
    from jgem.models.layers import rope_inv_freq, rope_tables

    cfg = tiny_cfg(family)
    inv = rope_inv_freq(cfg)
    for pos in (np.arange(12, dtype=np.int32).reshape(2, 6) * 37, np.array([[-3, 0, 5]], np.int32)):
        cos, sin = jax.jit(lambda p: rope_tables(p, inv, jnp.float32))(jnp.asarray(pos))
        ang = pos.astype(np.float32)[..., None] * inv[None, None, :]
        ang = np.concatenate([ang, ang], axis=-1)
        np.testing.assert_allclose(np.asarray(cos), np.cos(ang), atol=2e-6)
        np.testing.assert_allclose(np.asarray(sin), np.sin(ang), atol=2e-6)


def test_activation_sharding_constraints_only_under_a_mesh():
    """Under `jax.set_mesh` the activations are constrained (batch over data/fsdp, heads over tensor) and the
    logits do not change; without a mesh the program has no constraint at all."""
    from jax.sharding import AxisType

    model = _model("qwen3")
    toks, pos = _tokens(4, 8), _pos(4, 8)
    ref, _ = fwd(model, toks, pos)
    plain = str(jax.make_jaxpr(lambda t, p: model(t, p)[0])(toks, pos))
    assert "sharding_constraint" not in plain
    mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "tensor"), axis_types=(AxisType.Auto,) * 3)
    with jax.set_mesh(mesh):
        sharded = str(jax.make_jaxpr(lambda t, p: model(t, p)[0])(toks, pos))
        out, _ = fwd(model, toks, pos)
    assert "sharding_constraint" in sharded and "tensor" in sharded
    np.testing.assert_allclose(out, ref, atol=2e-5)


def _jaxpr_dots(model, toks, pos) -> int:
    return str(jax.make_jaxpr(lambda t, p: model(t, p)[0])(toks, pos)).count("dot_general")


# qwen3's (q/k norms, adapters) and qwen2's (biases) stacked states with and without remat; llama's blocks hold a
# subset of qwen2's params (its rope scaling is outside the blocks, the same for both): with remat only
@pytest.mark.parametrize(
    "family, remat", [("qwen3", "none"), ("qwen3", "full"), ("qwen2", "none"), ("qwen2", "full"), ("llama", "full")]
)
def test_scanned_layers_equal_the_unrolled_loop(family, remat):
    """The training forward scanning the layers (`scan_layers`, the default on GPU/TPU) gives the same logits and
    gradients as the Python loop over the blocks, on packed rows, with and without remat; its program holds one
    block."""
    from jgem.models.config import LoraConfig

    kw = dict(remat=remat)
    if family == "qwen3":  # adapters ride along in the stacked layer state
        kw["lora"] = LoraConfig(rank=4, alpha=8.0)  # the last test's adapter shapes: its eager build's programs
    scanned, loop = _model(family, scan_layers=True, **kw), _model(family, scan_layers=False, **kw)
    (l1, g1), (l2, g2) = _grads(family, scan_layers=True, **kw), _grads(family, scan_layers=False, **kw)
    assert float(l1) == pytest.approx(float(l2), rel=1e-6)
    assert jax.tree.structure(g1) == jax.tree.structure(g2)
    for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
        np.testing.assert_allclose(a, b, atol=1e-6)
    # two blocks unrolled, one in the scan's body: the loop's program has one block's matmuls more
    assert _jaxpr_dots(loop, GRAD_TOKS, GRAD_POS) > _jaxpr_dots(scanned, GRAD_TOKS, GRAD_POS)


def test_scanned_layers_under_a_mesh_and_in_bfloat16():
    """Sharded (fsdp x tensor) and in bfloat16 compute with float32 params (the stack is a copy in the compute
    dtype), the scanned forward gives the unrolled loop's logits."""
    from jax.sharding import AxisType

    from jgem.models.transformer import scans_layers

    toks, pos = _tokens(4, 8), _pos(4, 8)
    for dtype, atol in (("float32", 2e-5), ("bfloat16", 0.0)):
        kw = {} if dtype == "float32" else {"dtype": dtype}  # float32: the default config's model and programs
        scanned, loop = _model(scan_layers=True, **kw), _model(**kw)  # scan_layers None: the loop on CPU
        assert not scans_layers(loop.cfg) and scans_layers(scanned.cfg)
        ref, _ = fwd(loop, toks, pos)
        mesh = jax.make_mesh((1, 4, 2), ("data", "fsdp", "tensor"), axis_types=(AxisType.Auto,) * 3)
        with jax.set_mesh(mesh):
            out, _ = fwd(scanned, toks, pos)
        np.testing.assert_allclose(out, ref, atol=atol if dtype == "float32" else 0.02 * float(jnp.max(jnp.abs(ref))))


def test_scan_layers_by_default_on_gpu_and_tpu_not_on_cpu():
    from jgem.models.platform import target_platform
    from jgem.models.transformer import scans_layers

    model = _model(attention="xla")  # the same attention on every platform: only the layer loop differs
    assert model.cfg.scan_layers is None
    toks, pos = _tokens(2, 8), _pos(2, 8)
    on_cpu = _jaxpr_dots(model, toks, pos)
    for name in ("gpu", "tpu"):
        with target_platform(name):
            assert scans_layers(model.cfg) and _jaxpr_dots(model, toks, pos) < on_cpu
    assert not scans_layers(model.cfg) and scans_layers(model.cfg.replace(scan_layers=True))


def test_the_compiled_init_draws_the_eager_models_values_sharded_by_the_rules():
    """`init_model` is one compiled program (an eager build compiles every initialiser as its own op) and must
    draw what `Transformer(cfg, rngs=nnx.Rngs(seed))` draws, bit for bit: resumed runs, warm starts and the
    adapters of `fresh_adapters` rely on it (XLA folded the init's std into normal's own scale: 1 ulp off in a
    quarter of the weights). With a mesh, each param is created in the sharding its logical names map to. One
    model with every kind of param: LoRA adapters and a value head."""
    from jgem.models.config import LoraConfig
    from jgem.models.transformer import Transformer
    from jgem.sharding.config import MeshConfig
    from jgem.sharding.mesh import make_mesh
    from jgem.sharding.rules import tree_shardings

    cfg, kw = tiny_cfg("qwen3", lora=LoraConfig(rank=4)), {"value_head": True}
    eager = nnx.state(Transformer(cfg, rngs=nnx.Rngs(3), **kw))
    mesh = make_mesh(MeshConfig(fsdp=2, tensor=2), devices=jax.devices()[:4])
    for m in (None, mesh):
        state = nnx.state(init_model(cfg, seed=3, mesh=m, **kw))
        assert jax.tree.structure(state) == jax.tree.structure(eager)  # the params' metadata (axis names) too
        for path, (a, b) in zip(
            jax.tree_util.tree_leaves_with_path(eager), zip(jax.tree.leaves(eager), jax.tree.leaves(state))
        ):
            assert np.array_equal(np.asarray(a), np.asarray(b)), path[0]
    want = jax.tree.leaves(tree_shardings(state, mesh))
    got = [x.sharding for x in jax.tree.leaves(state)]
    assert got == want and any(not s.is_fully_replicated for s in got)
