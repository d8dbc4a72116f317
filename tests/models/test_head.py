"""The hand-written backward pass of the chunked vocab head equals autodiff of the plain formula."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jgem.models.head import vocab_logprobs

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
    for x, y in zip(jax.jit(ours)(h, temperature, w), ref(h, temperature, w)):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-5)
    g_ours = jax.jit(jax.grad(lambda *xs: loss(ours, *xs), argnums=(0, 1, 2)))(h, w, temperature)
    g_ref = jax.grad(lambda *xs: loss(ref, *xs), argnums=(0, 1, 2))(h, w, temperature)
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
