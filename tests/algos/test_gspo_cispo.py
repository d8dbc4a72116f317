"""GSPO and CISPO against plain numpy: per-token losses, clip flags and gradients on a hand-built packed batch
(several segments per row, several turns per segment), the response ids, the trainer's real path (collect,
`make_batch`, the step `learn` runs) against a reference built from the raw episodes, and the registry/config
wiring.
"""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jgem.algos import losses
from jgem.algos.algorithms import get_algorithm
from jgem.algos.config import LearnerConfig
from jgem.algos.learner import config_errors, init_train_state
from jgem.algos.types import TrainBatch
from jgem.config import ConfigError, validate
from tests.algo_step_trainers import CLIP, XDIST_GROUP, guarded_learn, shared
from tests.test_train_reference import _locate, _logprobs, _turn_spans, reference_advantages
from tests.train_utils import perturbed, small_config

# rows of packed segments ("|" between segments): p = prompt/observation token, a = action token; "." padding.
# Row 1's first segment ends on an action and its second starts on one: two responses that touch.
LAYOUT = ["ppaaapaa|ppaaa|paaaaaa....", "paapppaaapa|aaapaa|pa.....", "pppaaaaaaaaaaaaaa|papapa."]
CFG = LearnerConfig(clip_low=0.1, clip_high=0.15)


def _masks(layout):
    seg = np.zeros((len(layout), len(layout[0].replace("|", ""))), np.int32)
    mask = np.zeros(seg.shape, bool)
    for r, row in enumerate(layout):
        s, t = 1, 0
        for c in row:
            if c == "|":
                s += 1
                continue
            seg[r, t], mask[r, t] = (s if c != "." else 0), c == "a"
            t += 1
    return mask, seg


def _runs(mask, seg):
    """Every response as (row, token indices): the maximal runs of masked tokens within each segment."""
    out = []
    for r in range(mask.shape[0]):
        for s in np.unique(seg[r][seg[r] > 0]):
            idx = np.flatnonzero(seg[r] == s)
            for masked, group in itertools.groupby(idx, key=lambda t: mask[r, t]):
                if masked:
                    out.append((r, np.array(list(group))))
    return out


def _batch(seed=0):
    mask, seg = _masks(LAYOUT)
    rng = np.random.default_rng(seed)
    logp = -rng.exponential(1.0, mask.shape)
    old = logp + rng.normal(0.0, 0.25, mask.shape)
    adv = rng.normal(size=mask.shape)  # unmasked tokens get junk: they must not matter
    for r, idx in _runs(mask, seg):
        adv[r, idx] = rng.normal()  # one advantage per turn
    f32 = lambda x: jnp.asarray(x, jnp.float32)
    batch = TrainBatch(
        jnp.zeros(mask.shape, jnp.int32),
        jnp.zeros(mask.shape, jnp.int32),
        jnp.asarray(seg),
        jnp.asarray(mask),
        f32(adv),
        f32(old),
    )
    return batch, np.asarray(f32(logp), np.float64), np.asarray(f32(old), np.float64), np.asarray(f32(adv), np.float64)


def test_gspo_matches_numpy_per_response():
    batch, logp, old, adv = _batch(1)
    mask, seg = np.asarray(batch.loss_mask), np.asarray(batch.segment_ids)
    lo, hi = CFG.clip_low, CFG.clip_high
    want, want_clip = np.zeros(mask.shape), np.zeros(mask.shape, bool)
    want_grad, runlen = np.zeros(mask.shape), np.ones(mask.shape)
    sides = set()
    for r, idx in _runs(mask, seg):
        s = np.exp(np.mean(logp[r, idx] - old[r, idx]))
        a = adv[r, idx[0]]
        sides |= {"high"} if s > 1 + hi and a > 0 else {"low"} if s < 1 - lo and a < 0 else set()
        unclipped, clipped = -a * s, -a * np.clip(s, 1 - lo, 1 + hi)
        want[r, idx], want_clip[r, idx] = max(unclipped, clipped), clipped > unclipped
        want_grad[r, idx] = 0.0 if clipped > unclipped else -a * s / idx.size
        runlen[r, idx] = idx.size
    assert len(_runs(mask, seg)) == 14 and sides == {"high", "low"} and (mask & ~want_clip).any()
    loss, clipped = losses.gspo_loss(jnp.asarray(logp, jnp.float32), batch, CFG)
    np.testing.assert_allclose(np.where(mask, loss, 0.0), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(clipped), want_clip)
    # the sequence loss (each response's token mean): d/d logp_j = -A s / |y| unclipped, 0 clipped, 0 off-mask
    seq_loss = lambda lp: jnp.sum(jnp.where(batch.loss_mask, losses.gspo_loss(lp, batch, CFG)[0] / runlen, 0.0))
    grad = jax.grad(seq_loss)(jnp.asarray(logp, jnp.float32))
    np.testing.assert_allclose(grad, want_grad, rtol=1e-5, atol=1e-7)


def test_cispo_matches_numpy_and_keeps_every_gradient():
    batch, logp, old, adv = _batch(1)
    mask = np.asarray(batch.loss_mask)
    lo, hi = CFG.clip_low, CFG.clip_high
    r = np.exp(logp - old)
    w = np.clip(r, 1 - lo, 1 + hi)
    want_clip = mask & ((r < 1 - lo) | (r > 1 + hi))
    assert (mask & (r < 1 - lo)).any() and (mask & (r > 1 + hi)).any() and (mask & ~want_clip).any()
    lp = jnp.asarray(logp, jnp.float32)
    loss, clipped = losses.cispo_loss(lp, batch, CFG)
    np.testing.assert_allclose(np.where(mask, loss, 0.0), np.where(mask, -w * adv * logp, 0.0), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(clipped), want_clip)
    total = lambda fn: lambda x: jnp.sum(jnp.where(batch.loss_mask, fn(x), 0.0))
    grad = np.asarray(jax.grad(total(lambda x: losses.cispo_loss(x, batch, CFG)[0]))(lp))
    np.testing.assert_allclose(grad, np.where(mask, -w * adv, 0.0), rtol=1e-5, atol=1e-7)
    assert np.all(grad[mask] != 0.0)
    # PPO's clip, on the same tokens, drops the gradient of some clipped ones; CISPO keeps them
    ppo = lambda x: losses.ppo_clip_loss(x, batch.old_logprobs, batch.advantages, clip_low=lo, clip_high=hi)[0]
    ppo_grad = np.asarray(jax.grad(total(ppo))(lp))
    dropped = mask & (ppo_grad == 0.0)
    assert dropped.any() and np.all(want_clip[dropped])


def test_response_ids_split_runs_at_segment_boundaries():
    mask, seg = _masks(["paa|aaa|aapa..", "aa|a|pap|aaaa.."])
    ids, n = losses.response_ids(jnp.asarray(mask), jnp.asarray(seg))
    ids = np.asarray(ids)
    runs = _runs(mask, seg)
    assert len(runs) == 8
    for r, idx in runs:
        assert len(set(ids[r, idx])) == 1  # one id per response
    firsts = [ids[r, idx[0]] for r, idx in runs]
    assert len(set(firsts)) == len(runs)  # distinct across responses, segments (touching ones too) and rows
    assert np.all(ids[~mask] == n - 1) and n - 1 not in firsts
    assert ids[0, 2] != ids[0, 3] and ids[1, 1] != ids[1, 2]  # the runs that touch across a segment boundary


@pytest.mark.slow
@pytest.mark.xdist_group(XDIST_GROUP)  # the trainers are shared with test_train_reference and test_step_transfers
@pytest.mark.parametrize("algorithm", ["gspo", "cispo"])
def test_trainer_gspo_cispo_loss_equals_numpy(algorithm):
    # tests/algo_step_trainers.py: 8 episodes of test:scored-talk cut at 3 turns, groups of 4, a narrow clip
    tr, played = shared(algorithm)
    lo, hi = CLIP[algorithm]
    assert (tr.cfg.learner.clip_low, tr.cfg.learner.clip_high, tr.cfg.group_size) == (lo, hi, 4)
    assert tr.state.cfg.policy_loss == algorithm
    episodes = [e for e in played if e.fault is None and e.num_turns > 0]
    batch, _ = tr.learner.make_batch(episodes)
    ref_adv, _ = reference_advantages("grpo", episodes, tr)
    assert max(np.abs(a).max() for a in ref_adv) > 0.1, "some group must have returns that differ"
    adv = np.asarray(batch.advantages)
    expect = np.zeros_like(adv, np.float64)
    for i, (ep, (r, start)) in enumerate(zip(episodes, _locate(batch, episodes))):
        for k, (s, e) in enumerate(_turn_spans(ep)):
            expect[r, start + s : start + e] = ref_adv[i][k]
    np.testing.assert_allclose(adv, expect, rtol=1e-4, atol=1e-5)

    # a learner apart from the sampler, so the ratios are not 1 and some fall outside the clip range
    tr.state = tr.state.replace(params=perturbed(tr.state.params, 0.02, seed=3))
    policy, temp = tr.state.model(), tr.cfg.learner.temperature
    num = den = 0.0
    n_clipped = n_kept = 0
    for i, ep in enumerate(episodes):
        lp = _logprobs(policy, ep.stream, temp)
        for k, ((s, e), t) in enumerate(zip(_turn_spans(ep), ep.transitions)):
            a, d = ref_adv[i][k], lp[s:e] - t.action_logprobs.astype(np.float64)
            if algorithm == "gspo":
                ratio = np.exp(np.full(e - s, d.mean()))
                per = np.maximum(-a * ratio, -a * np.clip(ratio, 1 - lo, 1 + hi))
            else:
                ratio = np.exp(d)
                per = -np.clip(ratio, 1 - lo, 1 + hi) * a * lp[s:e]
            out = (ratio < 1 - lo) | (ratio > 1 + hi)
            n_clipped, n_kept = n_clipped + out.sum(), n_kept + (~out).sum()
            num, den = num + per.sum(), den + (e - s)
    assert n_clipped > 0 and n_kept > 0, (n_clipped, n_kept)
    metrics, _ = guarded_learn(tr, episodes)  # the trainer's step from the perturbed learner (batch as above)
    np.testing.assert_allclose(float(metrics["loss"]), num / den, rtol=1e-4, atol=1e-6)


def test_registry_and_config_wiring(tmp_path):
    for name in ("gspo", "cispo"):
        algo = get_algorithm(name)
        assert algo.policy_loss == name and algo.grouped and algo.advantage == "grpo" and not algo.critic
        assert losses.POLICY_LOSSES.get(name) is {"gspo": losses.gspo_loss, "cispo": losses.cispo_loss}[name]
    assert not config_errors(LearnerConfig(policy_loss="gspo"))
    # the light config holds names; they are checked against the registries by validate (and init_train_state)
    unknown = r"learner.policy_loss 'nope' is unknown; choose one of ppo, reinforce, gspo, cispo"
    with pytest.raises(ConfigError, match=unknown):
        validate(small_config(str(tmp_path), learner={"policy_loss": "nope"}), 1)
    with pytest.raises(ValueError, match=r"LearnerConfig: schedule 'nope' is unknown; choose one of constant, linear"):
        init_train_state(nnx.Linear(2, 2, rngs=nnx.Rngs(0)), LearnerConfig(schedule="nope"))
    with pytest.raises(ConfigError, match="group_size") as err:
        validate(small_config(str(tmp_path), algorithm="gspo", group_size=1), 1)
    assert "gspo normalises within groups" in str(err.value)
    validate(small_config(str(tmp_path), algorithm="cispo", group_size=2), 1)
