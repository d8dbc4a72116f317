"""Advantage estimators vs plain numpy references (hypothesis), plus edge cases."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jgem.algos.advantages import ADVANTAGES, compute_advantages, get_advantage_fn, register_advantage
from jgem.algos.returns import discounted_returns, gae

E, K = 8, 4
EPS = 1e-6
# gamma, lam and kl_coef are traced, not static: hypothesis draws them, and a static float compiles a program per
# drawn value; one program per estimator and shape serves every example
jitted = {name: jax.jit(ADVANTAGES.get(name), static_argnames=("eps", "normalize")) for name in ADVANTAGES}


# ------------------------------------------------------------------ numpy references


def np_returns(r, m, gamma):
    g = np.zeros_like(r)
    for e in range(r.shape[0]):
        acc = 0.0
        for t in reversed(range(r.shape[1])):
            acc = r[e, t] + gamma * acc if m[e, t] else 0.0
            g[e, t] = acc
    return g


def np_gae(r, v, m, gamma, lam):
    adv = np.zeros_like(r)
    for e in range(r.shape[0]):
        last = 0.0
        for t in reversed(range(r.shape[1])):
            if not m[e, t]:
                last = 0.0
                continue
            v_next = v[e, t + 1] if t + 1 < r.shape[1] and m[e, t + 1] else 0.0
            delta = r[e, t] + gamma * v_next - v[e, t]
            last = delta + gamma * lam * last
            adv[e, t] = last
    return adv, (adv + v) * m


def np_grouped(r, m, groups, gamma, mode):
    g = np_returns(r, m, gamma)
    ret, valid = g[:, 0], m.any(1)
    a = np.zeros(r.shape[0])
    for e in range(r.shape[0]):
        if not valid[e]:
            continue
        same = [j for j in range(r.shape[0]) if groups[j] == groups[e] and valid[j]]
        vals = ret[same]
        if mode == "grpo":
            std = np.std(vals, ddof=1) if len(vals) > 1 else 0.0
            a[e] = (ret[e] - vals.mean()) / (std + EPS)
        elif mode == "drgrpo":
            a[e] = ret[e] - vals.mean()
        else:
            a[e] = 0.0 if len(vals) == 1 else ret[e] - (vals.sum() - ret[e]) / (len(vals) - 1)
    return np.where(m, a[:, None], 0.0)


def np_whiten(g, m):
    mean, std = g[m].mean(), g[m].std()
    return np.where(m, (g - mean) / (std + EPS), 0.0)


# ------------------------------------------------------------------ strategies


@st.composite
def episodes(draw):
    rewards = np.array(draw(st.lists(st.floats(-5, 5, width=32), min_size=E * K, max_size=E * K)), np.float32).reshape(
        E, K
    )
    lengths = np.array(draw(st.lists(st.integers(0, K), min_size=E, max_size=E)))
    lengths[0] = max(lengths[0], 1)  # at least one real turn in the batch
    mask = np.arange(K)[None, :] < lengths[:, None]
    groups = np.array(draw(st.lists(st.integers(0, 3), min_size=E, max_size=E)), np.int32) * 7 + 3
    gamma = draw(st.sampled_from([1.0, 0.9, 0.5]))
    return rewards, mask, groups, gamma


@settings(max_examples=25, deadline=None)
@given(episodes())
def test_returns_reinforce_rebn_match_numpy(ep):
    r, m, _, gamma = ep
    g = np_returns(r, m, gamma)
    np.testing.assert_allclose(discounted_returns(r, m, gamma), g, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jitted["reinforce"](r, m, gamma=gamma).advantages, g, rtol=1e-5, atol=1e-5)
    out = jitted["rebn"](r, m, gamma=gamma)
    np.testing.assert_allclose(out.advantages, np_whiten(g, m), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out.returns, g, rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(episodes())
def test_rae_is_rebn_within_each_role(ep):
    """RAE (multi-agent games): each role's turns whitened by that role's own return statistics; one role: ReBN."""
    r, m, groups, gamma = ep
    roles = (groups // 7) % 2  # two seats, drawn
    g = np_returns(r, m, gamma)
    want = np.zeros_like(g)
    for role in (0, 1):
        sel = m & (roles == role)[:, None]
        if sel.any():
            want[sel] = np_whiten(g, sel)[sel]
    a = jitted["rae"](r, m, role_ids=roles, gamma=gamma).advantages
    np.testing.assert_allclose(a, want, rtol=1e-4, atol=1e-4)
    one = jitted["rae"](r, m, role_ids=np.zeros_like(roles), gamma=gamma).advantages
    np.testing.assert_allclose(one, jitted["rebn"](r, m, gamma=gamma).advantages, rtol=1e-5, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(episodes())
def test_group_estimators_match_numpy(ep):
    r, m, groups, gamma = ep
    for name in ("grpo", "drgrpo", "rloo"):
        a = jitted[name](r, m, group_ids=groups, gamma=gamma).advantages
        np.testing.assert_allclose(a, np_grouped(r, m, groups, gamma, name), rtol=1e-4, atol=1e-3, err_msg=name)


@settings(max_examples=25, deadline=None)
@given(episodes(), st.floats(0.0, 0.5))
def test_reinforce_pp_matches_numpy(ep, kl_coef):
    r, m, _, gamma = ep
    kl = np.abs(np.sin(r * 3.0)).astype(np.float32)  # any nonnegative per-turn KL
    g = np_returns(r - np.float32(kl_coef) * kl, m, gamma)
    a = jitted["reinforce_pp"](r, m, kl=kl, kl_coef=kl_coef, gamma=gamma).advantages
    np.testing.assert_allclose(a, np_whiten(g, m), rtol=1e-4, atol=1e-4)


@settings(max_examples=25, deadline=None)
@given(episodes(), st.sampled_from([1.0, 0.95, 0.0]))
def test_gae_matches_numpy(ep, lam):
    r, m, _, gamma = ep
    v = np.cos(r).astype(np.float32)
    adv, ret = np_gae(r, v, m, gamma, lam)
    out = jitted["gae"](r, m, values=v, gamma=gamma, lam=lam)
    np.testing.assert_allclose(out.advantages, adv, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out.returns, ret, rtol=1e-4, atol=1e-4)


def test_gae_lambda_one_is_return_minus_value_and_bootstrap():
    r = np.array([[1.0, 0.0, 2.0]], np.float32)
    m = np.ones((1, 3), bool)
    v = np.array([[0.5, 0.2, 0.1]], np.float32)
    adv, ret = gae(r, v, m, gamma=0.9, lam=1.0)
    np.testing.assert_allclose(adv, np_returns(r, m, 0.9) - v, rtol=1e-6)
    np.testing.assert_allclose(ret, np_returns(r, m, 0.9), rtol=1e-6)
    # truncated episode: the value after the last turn is bootstrapped
    adv_b, _ = gae(r, v, m, gamma=0.9, lam=1.0, bootstrap_values=jnp.array([10.0]))
    np.testing.assert_allclose(adv_b - adv, [[0.9**3 * 10, 0.9**2 * 10, 0.9 * 10]], rtol=1e-5)


# ------------------------------------------------------------------ edge cases


def test_edge_cases_groups_of_one_zero_variance_zero_rewards_masked_rows():
    r = np.array([[1.0, 1.0], [3.0, 0.0], [3.0, 0.0], [9.0, 9.0], [0.0, 0.0]], np.float32)
    m = np.array([[1, 1], [1, 0], [1, 0], [0, 0], [1, 0]], bool)  # row 3 fully masked (padding)
    groups = np.array([0, 1, 1, 1, 2], np.int32)  # group 0 and 2: one episode; group 1: equal returns + padding
    # jitted (as the step runs them): op by op, each estimator would compile dozens of small programs
    for name in ("grpo", "drgrpo", "rloo"):
        a = np.asarray(jitted[name](r, m, group_ids=groups).advantages)
        assert np.all(np.isfinite(a)), name
        np.testing.assert_array_equal(a, 0.0, err_msg=name)
    for name in ("reinforce", "rebn", "reinforce_pp"):
        a = np.asarray(jitted[name](np.zeros_like(r), m).advantages)
        np.testing.assert_array_equal(a, 0.0, err_msg=name)
    # the padding row's 9s must not enter ReBN's statistics
    a = np.asarray(jitted["rebn"](r, m).advantages)
    g = np_returns(r, m, 1.0)
    np.testing.assert_allclose(a, np_whiten(g, m), rtol=1e-5)
    assert a[3].tolist() == [0.0, 0.0]


N_MAX = 300  # the largest drawn batch


@settings(max_examples=30, deadline=None)
@given(value=st.floats(-5, 5, width=32), n=st.integers(2, N_MAX), pad=st.floats(-5, 5, width=32))
def test_equal_returns_give_exactly_zero_advantage(value, n, pad):
    """A batch (or group) of equal returns has no signal: every estimator gives exactly 0, not the rounding of a
    single-pass float32 mean divided by (0 + eps) (ReBN gave -0.056 on 100 x 0.3).

    The n episodes are the first rows of a fixed [N_MAX, 1] batch, so one program per estimator serves every n; the
    rows after them are masked padding with another reward, which must not enter the statistics."""
    r = np.where(np.arange(N_MAX)[:, None] < n, value, pad).astype(np.float32)
    m = (np.arange(N_MAX) < n)[:, None]
    groups = np.arange(N_MAX, dtype=np.int32) // 2 if n % 2 == 0 else np.zeros(N_MAX, np.int32)
    for name in ("rebn", "reinforce_pp", "grpo", "drgrpo", "rloo"):
        a = np.asarray(jitted[name](r, m, group_ids=groups, gamma=1.0).advantages)
        np.testing.assert_array_equal(a, 0.0, err_msg=f"{name} with {n} x {value} (padding {pad})")


def test_equal_returns_zero_advantage_the_issue_case():
    a = compute_advantages("rebn", jnp.full((100, 1), 0.3), jnp.ones((100, 1), bool)).advantages
    np.testing.assert_array_equal(np.asarray(a), 0.0)


def test_registry_names_and_errors():
    assert set(ADVANTAGES) == {"reinforce", "rebn", "rae", "grpo", "drgrpo", "rloo", "reinforce_pp", "gae"}
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'.*choose one of"):
        get_advantage_fn("ppo")
    assert ADVANTAGES.name_errors("grpo", "algorithm") == []
    assert ADVANTAGES.name_errors("grpoo", "--algorithm") == [
        "--algorithm 'grpoo' is unknown; choose one of reinforce, rebn, rae, grpo, drgrpo, rloo, reinforce_pp, gae"
    ]


def test_register_advantage_replaces_an_estimator_of_the_same_name():
    """A user's module registers again when it is imported again (a reload, a process worker): no error, the
    newest function wins, the name keeps its place."""
    names = ADVANTAGES.names()
    try:
        first = register_advantage("test_twice")(lambda rewards, turn_mask, **_: None)
        second = register_advantage("test_twice")(lambda rewards, turn_mask, **_: None)
        assert first is not second and get_advantage_fn("test_twice") is second
        assert ADVANTAGES.names() == (*names, "test_twice")
    finally:
        ADVANTAGES._entries.pop("test_twice", None)


def test_an_algorithm_record_names_what_is_not_registered():
    from jgem.algos.algorithms import ALGORITHMS, Algorithm

    assert all(ALGORITHMS.get(name).errors() == [] for name in ALGORITHMS)
    errors = Algorithm("typo", "grpoo", policy_loss="ppoo").errors()
    assert errors[0].startswith("algorithm 'typo': advantage estimator 'grpoo' is unknown; choose one of reinforce")
    assert errors[1].startswith("algorithm 'typo': policy loss 'ppoo' is unknown; choose one of ppo, reinforce")
    assert len(errors) == 2
    with pytest.raises(ValueError, match="'grpo' needs group_ids"):
        compute_advantages("grpo", np.ones((2, 2)), np.ones((2, 2), bool))
    with pytest.raises(ValueError, match="'gae' needs values"):
        compute_advantages("gae", np.ones((2, 2)), np.ones((2, 2), bool))


def test_rebn_is_global_under_a_mesh():
    """Sharded over 8 devices, the statistics are the whole batch's, not each shard's."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from jgem.sharding.config import MeshConfig
    from jgem.sharding.mesh import make_mesh

    mesh = make_mesh(MeshConfig(data=8))
    rng = np.random.default_rng(0)
    r = rng.normal(size=(16, K)).astype(np.float32) + np.arange(16)[:, None]  # shard means differ
    m = rng.random((16, K)) > 0.3
    sh = NamedSharding(mesh, P("data", None))
    out = jitted["rebn"](jax.device_put(r, sh), jax.device_put(m, sh), gamma=0.9)
    np.testing.assert_allclose(out.advantages, np_whiten(np_returns(r, m, 0.9), m), rtol=1e-4, atol=1e-5)
