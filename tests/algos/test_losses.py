"""Losses: clipping, KL estimators, aggregation as exact (sum, denominator) pairs."""

import jax.numpy as jnp
import numpy as np
import pytest

from jgem.algos import losses


def test_ppo_clip_matches_reference_and_reports_clipping():
    logp = jnp.log(jnp.array([[1.5, 0.5, 1.0, 1.5, 0.5]]))
    old = jnp.zeros_like(logp)
    adv = jnp.array([[1.0, 1.0, -2.0, -1.0, -1.0]])
    loss, clipped = losses.ppo_clip_loss(logp, old, adv, clip_low=0.2)
    # ratio 1.5, A>0: clipped at 1.2; ratio .5, A>0: unclipped (pessimistic); ratio 1: no clip;
    # ratio 1.5, A<0: unclipped -(-1)(1.5); ratio .5, A<0: clipped at .8
    np.testing.assert_allclose(loss, [[-1.2, -0.5, 2.0, 1.5, 0.8]], rtol=1e-6)
    assert clipped.tolist() == [[True, False, False, False, True]]
    # asymmetric clip-higher
    loss_hi, _ = losses.ppo_clip_loss(logp, old, adv, clip_low=0.2, clip_high=0.4)
    np.testing.assert_allclose(loss_hi[0, 0], -1.4, rtol=1e-6)


def test_dual_clip_caps_negative_advantage_loss():
    logp = jnp.log(jnp.array([[10.0, 10.0]]))
    adv = jnp.array([[-1.0, 1.0]])
    loss, clipped = losses.ppo_clip_loss(logp, jnp.zeros_like(logp), adv, clip_low=0.2, dual_clip=3.0)
    np.testing.assert_allclose(loss, [[3.0, -1.2]], rtol=1e-6)  # without dual clip the first is 10
    assert clipped.tolist() == [[True, True]]
    with pytest.raises(ValueError, match="dual_clip must be > 1"):
        losses.ppo_clip_loss(logp, logp, adv, dual_clip=0.5)


def test_kl_estimators():
    rng = np.random.default_rng(0)
    logp = rng.normal(size=(3, 5)).astype(np.float32)
    ref = rng.normal(size=(3, 5)).astype(np.float32)
    x = logp - ref
    np.testing.assert_allclose(losses.kl_penalty(logp, ref, "k1"), x, rtol=1e-6)
    np.testing.assert_allclose(losses.kl_penalty(logp, ref, "k2"), 0.5 * x**2, rtol=1e-6)
    k3 = np.asarray(losses.kl_penalty(logp, ref, "k3"))
    np.testing.assert_allclose(k3, np.exp(-x) - 1 + x, rtol=1e-5)
    assert (k3 >= 0).all()
    # unbiased: E_{a~p}[k1] = E_{a~p}[k3] = KL(p||q) on a small categorical
    p, q = np.array([0.7, 0.2, 0.1]), np.array([0.3, 0.3, 0.4])
    kl = (p * np.log(p / q)).sum()
    for est in ("k1", "k3"):
        vals = np.asarray(losses.kl_penalty(jnp.log(p), jnp.log(q), est))
        np.testing.assert_allclose((p * vals).sum(), kl, rtol=1e-5)
    with pytest.raises(ValueError, match="unknown KL estimator 'k4'"):
        losses.kl_penalty(logp, ref, "k4")


def test_value_loss_clipping():
    v, old, ret = jnp.array([2.0, 0.0]), jnp.array([0.0, 0.0]), jnp.array([3.0, 1.0])
    np.testing.assert_allclose(losses.value_loss(v, ret), [0.5, 0.5])
    # clipped value is 0.2: error (0.2 - 3)^2 = 7.84 > 1
    np.testing.assert_allclose(losses.value_loss(v, ret, old, clip=0.2), [0.5 * 7.84, 0.5], rtol=1e-6)


def _agg(per, mask, seg, mode, c=None):
    s, d = losses.aggregate(jnp.asarray(per), jnp.asarray(mask), jnp.asarray(seg), mode, c)
    return float(s), float(d)


def test_aggregation_modes_and_exact_split():
    rng = np.random.default_rng(1)
    per = rng.normal(size=(4, 6)).astype(np.float32)
    mask = np.array([[0, 1, 1, 0, 1, 1], [0, 0, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0]], bool)
    seg = np.array([[1, 1, 1, 2, 2, 2], [1, 1, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
    s, d = _agg(per, mask, seg, "token_mean")
    assert d == 8 and s == pytest.approx(per[mask].sum(), rel=1e-6)
    # sequences: (row0, seg1) = 2 tokens, (row0, seg2) = 2, (row1, seg1) = 3, (row3, seg1) = 1
    s, d = _agg(per, mask, seg, "seq_mean_token_mean")
    seq_means = [per[0, 1:3].mean(), per[0, 4:6].mean(), per[1, 2:5].mean(), per[3, 0]]
    assert d == 4 and s / d == pytest.approx(np.mean(seq_means), rel=1e-5)
    s, d = _agg(per, mask, seg, "token_sum_norm", 10.0)
    assert d == 40 and s == pytest.approx(per[mask].sum(), rel=1e-6)
    assert _agg(per, mask, seg, "token_sum_norm")[1] == 4 * 6  # default constant: T
    # exactness: splitting rows into micro-batches and summing (sum, denominator) pairs gives the same loss
    for mode in ("token_mean", "seq_mean_token_mean", "token_sum_norm"):
        full = _agg(per, mask, seg, mode)
        parts = [_agg(per[i : i + 1], mask[i : i + 1], seg[i : i + 1], mode) for i in range(4)]
        ratio = sum(p[0] for p in parts) / sum(p[1] for p in parts)
        assert ratio == pytest.approx(full[0] / full[1], rel=1e-6), mode
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        _agg(per, mask, seg, "mean")
