"""Every attention implementation equals the plain one ("xla"), and "auto" picks by platform and shape."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jgem.models import attention as A
from jgem.models.attention import Mask, attention, choose
from jgem.models.config import ModelConfig
from jgem.models.platform import target_platform
from jgem.models.transformer import Transformer
from tests.models.helpers import VOCAB, tiny_cfg


def _qkv(b, t, s, n=4, k=2, h=16, dtype=jnp.float32, seed=0):
    rng = np.random.default_rng(seed)
    q = jnp.asarray(rng.normal(size=(b, t, n, h)), dtype)
    k_t = jnp.asarray(rng.normal(size=(b, k, h, s)), dtype)
    v = jnp.asarray(rng.normal(size=(b, k, s, h)), dtype)
    return q, k_t, v


def _packed(b, t, seed=0) -> Mask:
    """Self-attention over rows packed with segments of random lengths and trailing padding (segment 0)."""
    rng = np.random.default_rng(seed)
    seg = np.zeros((b, t), np.int32)
    for r in range(b):
        cuts = np.sort(rng.choice(np.arange(1, t), 3, replace=False))
        for i, (lo, hi) in enumerate(zip([0, *cuts[:-1]], cuts)):
            seg[r, lo:hi] = i + 1
    return Mask.causal(jnp.asarray(seg))


def _over_cache(b, t, s, seed=0) -> Mask:
    """T queries written at slots [start, start + T) of an S-slot cache whose rows are left-padded (segment 0)."""
    rng = np.random.default_rng(seed)
    start = s - t
    kv_seg = np.ones((b, s), np.int32)
    for r in range(b):
        kv_seg[r, : rng.integers(0, start)] = 0
    q_slot = jnp.broadcast_to(start + jnp.arange(t, dtype=jnp.int32), (b, t))
    return Mask(q_slot, jnp.asarray(kv_seg[:, start:]), jnp.asarray(kv_seg))


def _slots(b, t, s, seed=0) -> Mask:
    """The rollout engine's slot cache: row r's queries sit at positions start_r.. and see slots 0..position."""
    starts = np.random.default_rng(seed).integers(0, s - t, b)
    q_slot = jnp.asarray(starts[:, None] + np.arange(t), jnp.int32)
    return Mask(q_slot, jnp.zeros((b, t), jnp.int32), jnp.zeros((b, s), jnp.int32))


MASKS = {
    "packed": lambda: (_qkv(2, 200, 200), _packed(2, 200)),
    "over_cache": lambda: (_qkv(2, 37, 300), _over_cache(2, 37, 300)),
    "slots": lambda: (_qkv(3, 5, 256), _slots(3, 5, 256)),
}


# The comparisons run jitted (as the model runs them): one program each, where op-by-op execution compiles every
# op of both implementations as a program of its own.


@pytest.mark.parametrize("kind", sorted(MASKS))
@pytest.mark.parametrize("block", [64, 100, 512])
def test_blockwise_equals_xla(kind, block):
    (q, k_t, v), mask = MASKS[kind]()
    both = jax.jit(lambda *a: (A.xla_attention(*a, mask), A.blockwise_attention(*a, mask, block=block)))
    ref, out = both(q, k_t, v)
    np.testing.assert_allclose(out, ref, atol=2e-6)


@pytest.mark.parametrize("kind", ["packed", "over_cache"])
def test_blockwise_gradients_equal_xla(kind):
    (q, k_t, v), mask = MASKS[kind]()
    w = jax.random.normal(jax.random.key(0), q.shape)

    def grads(fn):
        return jax.jit(jax.grad(lambda q, k_t, v: jnp.sum(w * fn(q, k_t, v, mask)), argnums=(0, 1, 2)))(q, k_t, v)

    ours = grads(lambda *a: A.blockwise_attention(*a, block=64))
    for a, b in zip(ours, grads(A.xla_attention)):
        np.testing.assert_allclose(a, b, atol=5e-6)


def test_blockwise_bfloat16_close_to_xla():
    (q, k_t, v), mask = MASKS["packed"]()
    q, k_t, v = (x.astype(jnp.bfloat16) for x in (q, k_t, v))
    ref, out = jax.jit(lambda *a: (A.xla_attention(*a, mask), A.blockwise_attention(*a, mask, block=64)))(q, k_t, v)
    ref = ref.astype(jnp.float32)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_allclose(out.astype(jnp.float32), ref, atol=3e-2)


def test_blockwise_never_holds_the_score_matrix():
    """Forward and backward at T = S = 2048 with 256-slot blocks: no value in the program has T*S elements per
    (batch, head) (the plain implementation's grad does)."""
    t, block = 2048, 256
    (q, k_t, v), mask = _qkv(1, t, t, n=2, k=1, h=8), _packed(1, t)

    def biggest(fn):
        jaxpr = jax.make_jaxpr(jax.grad(lambda q, k, v: jnp.sum(fn(q, k, v, mask)), argnums=(0, 1, 2)))(q, k_t, v)
        sizes = []

        def walk(jp):
            for eqn in jp.eqns:
                sizes.extend(int(np.prod(o.aval.shape)) for o in eqn.outvars if hasattr(o.aval, "shape"))
                for p in eqn.params.values():
                    for sub in p if isinstance(p, (tuple, list)) else (p,):
                        sub = getattr(sub, "jaxpr", sub)  # ClosedJaxpr -> Jaxpr
                        if hasattr(sub, "eqns"):
                            walk(sub)

        walk(jaxpr.jaxpr)
        return max(sizes)

    assert biggest(A.xla_attention) >= 2 * t * t
    assert biggest(lambda *a: A.blockwise_attention(*a, block=block)) <= 2 * t * block  # [heads, T, block]


def test_splash_kernel_equals_xla_in_interpret_mode():
    """The Pallas splash kernel (run by Pallas's interpreter off TPU): packed causal self-attention with grouped kv
    heads, forward and gradients."""
    (q, k_t, v), mask = _qkv(2, 256, 256), _packed(2, 256)
    w = jax.random.normal(jax.random.key(0), q.shape)

    def out_and_grads(fn):  # one program: the output and the gradients
        grads = jax.grad(lambda q, k_t, v: jnp.sum(w * fn(q, k_t, v, mask)), argnums=(0, 1, 2))
        return jax.jit(lambda *a: (fn(*a, mask), grads(*a)))(q, k_t, v)

    (out, g), (ref, g_ref) = out_and_grads(A.splash_attention), out_and_grads(A.xla_attention)
    np.testing.assert_allclose(out, ref, atol=2e-6)
    for a, b in zip(g, g_ref):
        np.testing.assert_allclose(a, b, atol=5e-6)


def test_cudnn_call_equals_xla(monkeypatch):
    """cuDNN cannot run here: the call's layouts and mask go through jax.nn.dot_product_attention's XLA path."""
    calls = []
    real = jax.nn.dot_product_attention

    def fake(*args, implementation=None, **kw):
        calls.append(implementation)
        return real(*args, implementation="xla", **kw)

    monkeypatch.setattr(jax.nn, "dot_product_attention", fake)
    (q, k_t, v), mask = MASKS["packed"]()
    q, k_t, v = (x.astype(jnp.bfloat16) for x in (q, k_t, v))  # cuDNN takes 16-bit inputs only
    with target_platform("gpu"):
        out = attention(q, k_t, v, mask, "auto")
    assert calls == ["cudnn"]
    want = A.xla_attention(q, k_t, v, mask)
    np.testing.assert_allclose(np.asarray(out, np.float32), np.asarray(want, np.float32), atol=1e-2)


def test_auto_chooses_by_platform_and_shape():
    self_mask = _packed(1, 8)  # only the static self_attention flag matters to `choose`
    cache_mask = _slots(1, 1, 16)
    with target_platform("cpu"):
        assert choose("auto", self_mask, 64, 64) == "blockwise"
        assert choose("auto", self_mask, 4096, 4096) == "blockwise"
        assert choose("auto", cache_mask, 1, 32768) == "xla"  # decode
        assert choose("auto", cache_mask, 2048, 4096) == "blockwise"  # a long prefill into a cache
    with target_platform("gpu"):
        assert choose("auto", self_mask, 512, 512) == "cudnn"
        # cuDNN takes 16-bit inputs only (a float32 model crashed the trainer on a GPU: "Unsupported dtype")
        assert choose("auto", self_mask, 512, 512, jnp.float32) == "xla"
        assert choose("auto", self_mask, 2048, 2048, jnp.float32) == "blockwise"
        assert choose("cudnn", self_mask, 64, 64, jnp.float32) == "xla"
        assert choose("auto", self_mask, 64, 64, jnp.float16) == "cudnn"
        assert choose("auto", cache_mask, 1, 4096) == "xla"
        assert choose("auto", cache_mask, 2048, 4096) == "blockwise"
    with target_platform("tpu"):
        assert choose("auto", self_mask, 1024, 1024) == "splash"
        assert choose("auto", self_mask, 100, 100) == "xla"  # not a multiple of 128
        assert choose("auto", cache_mask, 2048, 4096) == "blockwise"
    # A forced kernel runs where it fits; calls over a cache fall back.
    assert choose("splash", self_mask, 64, 64) == "splash"
    assert choose("splash", cache_mask, 1, 64) == "xla"
    assert choose("cudnn", cache_mask, 2048, 4096) == "blockwise"
    assert choose("blockwise", cache_mask, 1, 64) == "blockwise"
    with pytest.raises(ValueError, match="not one of"):
        choose("flash", self_mask, 8, 8)
    with pytest.raises(ValueError, match="attention='flash'"):
        tiny_cfg("qwen3", attention="flash")
    with pytest.raises(ValueError, match="remat policy"):
        tiny_cfg("qwen3", remat="some")
    assert isinstance(tiny_cfg("qwen3"), ModelConfig)


@functools.cache
def _model_loss_and_grads(name):
    """The whole model with attention `name` on two packed rows of 128 tokens: sum(sin(logits)) and its parameter
    gradients, one jitted program. Computed once per implementation: "xla" is every comparison's reference."""
    t = 128
    rng = np.random.default_rng(0)
    toks = jnp.asarray(rng.integers(0, VOCAB, (2, t)), jnp.int32)
    seg = jnp.asarray(_seg(t), jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (2, t))
    model = Transformer(tiny_cfg("qwen3", attention=name), rngs=nnx.Rngs(0))  # init_model's values, built eagerly
    if name == "blockwise":  # blocks smaller than the row, so the online softmax really spans blocks
        A.BLOCK, old = 32, A.BLOCK  # read while tracing, inside the try
    try:
        loss = lambda m: jnp.sum(jnp.sin(m(toks, pos, segment_ids=seg)[0]))
        return nnx.jit(nnx.value_and_grad(loss))(model)
    finally:
        if name == "blockwise":
            A.BLOCK = old


@pytest.mark.parametrize("impl", ["blockwise", "splash"])
def test_model_forward_and_grads_equal_across_implementations(impl):
    """The whole model on packed rows: logits and parameter gradients as with "xla"."""
    (l_ref, g_ref), (l, g) = _model_loss_and_grads("xla"), _model_loss_and_grads(impl)
    # the loss sums sin over every logit (2 x t x vocab terms, each off by ~1e-7 when the softmax sums its blocks in
    # another order, more or less so as the compiler contracts multiply-adds): an absolute bound; a wrong mask or
    # block moves the logits by O(1)
    assert float(l) == pytest.approx(float(l_ref), abs=1e-4)
    for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(g_ref)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-4)


def _seg(t):
    """Two rows: [1]*40 [2]*60 [0]*28, and [1]*t."""
    a = np.concatenate([np.full(40, 1), np.full(60, 2), np.zeros(t - 100)])
    return np.stack([a, np.ones(t)])
