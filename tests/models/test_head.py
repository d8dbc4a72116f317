"""The vocab head's log-probs: `vocab_logprobs`' hand-written backward pass equals autodiff of the plain formula, and
`token_logprobs` (the learner's forward) equals log-softmax of the model's logits, chunked or not, with its
gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jgem.models.head import token_logprobs, vocab_logprobs
from jgem.models.transformer import Transformer
from tests.models.helpers import VOCAB, tiny_cfg

N, D, V = 12, 8, 37


def _plain(h, targets, w, temperature, vocab_major):
    z = (h @ (w.T if vocab_major else w)) / temperature
    logp = jax.nn.log_softmax(z, axis=-1)
    lp = jnp.take_along_axis(logp, targets[:, None], axis=-1)[:, 0]
    ent = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
    return lp, ent


def _inputs(vocab_major, seed=0):
    rs = np.random.RandomState(seed)
    h = jnp.asarray(rs.normal(size=(N, D)), jnp.float32)
    w = jnp.asarray(rs.normal(size=(V, D) if vocab_major else (D, V)), jnp.float32)
    targets = jnp.asarray(rs.randint(0, V, N), jnp.int32)
    a = jnp.asarray(rs.normal(size=N), jnp.float32)
    b = jnp.asarray(rs.normal(size=N), jnp.float32)
    return h, targets, w, a, b


@pytest.mark.parametrize("vocab_major", [True, False])
@pytest.mark.parametrize("chunk", [12, 4, 1])
@pytest.mark.parametrize("with_entropy", [True, False])
@pytest.mark.parametrize("keep_logits", [False, True])
def test_values_and_grads_match_autodiff(vocab_major, chunk, with_entropy, keep_logits):
    h, targets, w, a, b = _inputs(vocab_major)
    temperature = jnp.float32(0.7)
    ent_coef = 1.0 if with_entropy else 0.0

    def loss(fn, h, w, t):
        lp, ent = fn(h, t, w)
        # without the entropy term the entropy's cotangent is a symbolic zero: the shortcut path
        return jnp.sum(a * lp) + (jnp.sum(b * ent) if with_entropy else 0.0) * ent_coef

    ours = lambda h, t, w: vocab_logprobs(
        h, targets, w, t, chunk=chunk, vocab_major=vocab_major, keep_logits=keep_logits
    )
    ref = lambda h, t, w: _plain(h, targets, w, t, vocab_major)
    grads = lambda fn: jax.grad(lambda *xs: loss(fn, *xs), argnums=(0, 1, 2))
    # ours: the values and the gradients from one compiled program
    values, g_ours = jax.jit(lambda h, w, t: (ours(h, t, w), grads(ours)(h, w, t)))(h, w, temperature)
    for x, y in zip(values, ref(h, temperature, w)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)
    g_ref = grads(ref)(h, w, temperature)
    for x, y in zip(g_ours, g_ref):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)
    assert float(jnp.abs(g_ours[1]).sum()) > 0


def test_bfloat16_inputs_keep_their_dtypes():
    h, targets, w, a, _ = _inputs(True)
    h, w = h.astype(jnp.bfloat16), w.astype(jnp.bfloat16)
    f = lambda h, w: jnp.sum(a * vocab_logprobs(h, targets, w, 1.0, chunk=6, vocab_major=True)[0])
    gh, gw = jax.jit(jax.grad(f, argnums=(0, 1)))(h, w)
    assert gh.dtype == gw.dtype == jnp.bfloat16
    rh, rw = jax.grad(lambda h, w: jnp.sum(a * _plain(h, targets, w, 1.0, True)[0]), argnums=(0, 1))(
        h.astype(jnp.float32), w.astype(jnp.float32)
    )
    np.testing.assert_allclose(np.asarray(gh, np.float32), rh, rtol=0.05, atol=0.02)
    np.testing.assert_allclose(np.asarray(gw, np.float32), rw, rtol=0.05, atol=0.02)


def test_tokens_not_a_multiple_of_the_chunk_is_an_error():
    h, targets, w, _, _ = _inputs(True)
    with pytest.raises(ValueError, match="12 tokens are not a multiple of chunk 5"):
        vocab_logprobs(h, targets, w, 1.0, chunk=5, vocab_major=True)


def _naive(model, tokens, positions, segs, temperature=1.0):
    logits, _ = model(tokens, positions, segment_ids=segs)
    logp = jax.nn.log_softmax(logits[:, :-1] / temperature, -1)
    lp = jnp.take_along_axis(logp, tokens[:, 1:, None], -1)[..., 0]
    ent = -jnp.sum(jnp.exp(logp) * logp, -1)
    valid = (segs[:, 1:] == segs[:, :-1]) & (segs[:, 1:] != 0)
    pad = lambda x: jnp.pad(jnp.where(valid, x, 0.0), ((0, 0), (1, 0)))
    return pad(lp), pad(ent)


def test_token_logprobs_reference_chunks_and_grads():
    """Packed rows (two segments, padding): log-probs and entropies equal the plain log-softmax of the logits (at a
    temperature too), 0 at each segment's first token and on padding, in any chunking; gradients equal autodiff's
    with the logits recomputed or kept."""
    model = Transformer(tiny_cfg("qwen3"), rngs=nnx.Rngs(0))  # init_model's values, built eagerly (no init program)
    model.embed[...] = model.embed[...] * 25.0  # sharper distributions than the 0.02-std init
    rs = np.random.RandomState(0)
    tokens = jnp.asarray(rs.randint(0, VOCAB, (2, 9)), jnp.int32)
    segs = jnp.asarray([[1, 1, 1, 1, 2, 2, 2, 0, 0], [1] * 9], jnp.int32)
    positions = jnp.asarray([[0, 1, 2, 3, 0, 1, 2, 0, 0], list(range(9))], jnp.int32)
    tlp, naive_lp = nnx.jit(token_logprobs, static_argnames=("chunk_size",)), nnx.jit(_naive)
    for temperature in (1.0, 0.7):
        ref_lp, ref_ent = naive_lp(model, tokens, positions, segs, temperature)
        for chunk in (1024, 7, 1):
            lp, ent = tlp(model, tokens, positions, segs, chunk_size=chunk, temperature=temperature)
            np.testing.assert_allclose(lp, ref_lp, atol=1e-5)
            np.testing.assert_allclose(ent, ref_ent, atol=1e-5)
    lp = np.asarray(lp)
    assert lp[0, 0] == lp[0, 4] == lp[0, 7] == lp[0, 8] == 0 and (lp[0, [1, 2, 3, 5, 6]] < 0).all()
    assert float(ent[1, 3]) > 0

    def chunked(m, keep_mb):
        lp = token_logprobs(m, tokens, positions, segs, chunk_size=5, keep_logits_mb=keep_mb)[0]
        return jnp.sum(lp * jnp.arange(9.0))

    def naive(m):
        return jnp.sum(_naive(m, tokens, positions, segs)[0] * jnp.arange(9.0))

    g2 = nnx.jit(nnx.grad(naive))(model)
    for keep_mb in (0.0, 1.0):  # recomputed logits, kept logits (2 x 10 x VOCAB floats fit in 1 MB)
        g1 = nnx.jit(nnx.grad(chunked), static_argnums=1)(model, keep_mb)
        for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2)):
            np.testing.assert_allclose(a, b, atol=1e-5)
        assert float(jnp.abs(g1["embed"][...]).sum()) > 0
