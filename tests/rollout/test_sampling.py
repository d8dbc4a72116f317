"""The decode step's draw (`jgem.rollout.sampling`): greedy, temperature, top-k and top-p, and the behaviour
log-prob it records."""

import jax
import jax.numpy as jnp
import numpy as np

from jgem.rollout.sampling import first_argmax, sample_logits

V = 300


def _draw(x, key, temperature=1.0, top_p=1.0, top_k=0, greedy=False):
    args = (jnp.float32(temperature), jnp.float32(top_p), jnp.int32(top_k), jnp.bool_(greedy))
    tok, lp = jax.jit(sample_logits)(x, key, *args)
    return np.asarray(tok), np.asarray(lp)


def test_first_argmax_equals_argmax():
    rs = np.random.RandomState(0)
    x = rs.normal(size=(6, 1000)).astype(np.float32)
    x[1, [3, 700]] = 9.0  # a tie: the first index wins, as in jnp.argmax
    x[2] = -np.inf
    x[3, 999] = np.inf
    x[4, :] = 0.0
    np.testing.assert_array_equal(first_argmax(jnp.asarray(x)), np.argmax(x, -1))
    assert first_argmax(jnp.asarray(x))[1] == 3
    np.testing.assert_array_equal(first_argmax(jnp.asarray(x.T), axis=0), np.argmax(x, -1))


def test_sample_logits_draws_like_categorical():
    """One key, or a key per row: the draw equals jax.random.categorical's (masked entries never drawn)."""
    x = jax.random.normal(jax.random.key(0), (16, V)) * 3
    x = x.at[:, :50].set(-jnp.inf)
    for seed in range(3):
        key = jax.random.key(seed)
        tok, _ = _draw(x, key)
        np.testing.assert_array_equal(tok, jax.random.categorical(key, x, axis=-1))
        keys = jax.random.split(key, 16)
        tok, _ = _draw(x, keys)
        np.testing.assert_array_equal(tok, jax.vmap(jax.random.categorical)(keys, x))
        assert (tok >= 50).all()


def test_log_prob_is_of_the_tempered_softmax_before_truncation():
    """Greedy takes the argmax; every draw records log-softmax(logits / T) at its token, whatever top-k/top-p cut."""
    x = jax.random.normal(jax.random.key(1), (8, V)) * 2
    keys = jax.random.split(jax.random.key(2), 8)
    for kw in (dict(greedy=True), dict(temperature=0.7), dict(temperature=1.3, top_k=5), dict(top_p=0.5)):
        tok, lp = _draw(x, keys, **kw)
        ref = jax.nn.log_softmax(x / kw.get("temperature", 1.0), axis=-1)
        np.testing.assert_allclose(lp, np.asarray(ref)[np.arange(8), tok], atol=1e-5)
        if kw.get("greedy"):
            np.testing.assert_array_equal(tok, np.argmax(np.asarray(x), -1))


def test_top_k_and_top_p():
    """top_k=1 and a tiny top_p are greedy; top-k=3 draws only among the 3 most likely (and not always the same
    one), where the untruncated draw goes beyond them."""
    x = jax.random.normal(jax.random.key(3), (64, V))
    greedy, _ = _draw(x, jax.random.key(0), greedy=True)
    np.testing.assert_array_equal(_draw(x, jax.random.key(7), top_k=1)[0], greedy)
    np.testing.assert_array_equal(_draw(x, jax.random.key(8), top_p=1e-6)[0], greedy)
    row = jnp.broadcast_to(x[:1], (64, V))  # one distribution, 64 draws
    top3 = set(np.argsort(-np.asarray(x[0]))[:3].tolist())
    keys = jax.random.split(jax.random.key(4), 64)
    first = set(_draw(row, keys, temperature=2.0, top_k=3)[0].tolist())
    assert first <= top3 and len(first) > 1
    assert not set(_draw(row, keys, temperature=2.0)[0].tolist()) <= top3
    # top-p: the draws stay in the smallest set of tokens whose probability reaches p
    p = np.exp(np.asarray(jax.nn.log_softmax(x[0])))
    order = np.argsort(-p)
    nucleus = set(order[: int(np.searchsorted(np.cumsum(p[order]), 0.3)) + 1].tolist())
    drawn = set(_draw(row, keys, top_p=0.3)[0].tolist())
    assert drawn <= nucleus and len(drawn) > 1
