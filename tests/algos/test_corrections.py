"""Off-policy corrections (`jgem.algos.corrections`): each registered one against a numpy reference (weights, masks,
metrics), the corrected policy loss and its gradient through the learner's own `policy_loss`, the update's wiring,
`tis_cap` as the `tis` entry bit for bit, and config errors that name the flag."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jgem.algos.config import LearnerConfig
from jgem.algos.corrections import CORRECTIONS, correct, correction_errors, resolve
from jgem.algos.learner import init_train_state, policy_loss, token_logprobs, update
from jgem.algos.types import TrainBatch
from tests.algos.helpers import CFG, host, make_batch, tiny_model

# `correct` compiled, its config static: one program per correction and bounds, reused wherever a test repeats one
# (op by op, a correction runs dozens of small programs)
_correct = jax.jit(correct, static_argnums=2)

# name -> (its defaults (low, high), the spread of log rho that puts tokens on both sides of them, other bounds)
CASES = {
    "tis": ((None, 2.0), 0.8, (None, 1.3)),
    "mis": ((0.0, 2.0), 0.8, (0.6, 1.5)),
    "icepop": ((0.5, 5.0), 1.2, (0.3, 3.0)),
    "geo_mask": ((0.99, 1.01), 0.015, (0.995, 1.02)),
    "decoupled": ((None, 5.0), 1.2, (None, 2.5)),
}


def test_the_registry_holds_the_cases_with_their_defaults():
    assert set(CORRECTIONS.names()) == set(CASES)
    for name, ((low, high), _, _) in CASES.items():
        spec = CORRECTIONS.get(name)
        assert (spec.low, spec.high) == (low, high), name


# ----------------------------------------------------------------------------- numpy references


def np_responses(mask: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """i64[B, T]: a response id per masked token (a maximal run of masked tokens inside one segment), -1 elsewhere."""
    ids, n = np.full(mask.shape, -1), 0
    for b in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            if not mask[b, t]:
                continue
            if not (t > 0 and mask[b, t - 1] and seg[b, t - 1] == seg[b, t]):
                n += 1
            ids[b, t] = n
    return ids


def np_correction(name, log_rho, mask, seg, low, high):
    """(weights, keep, capped) by each correction's definition, in float64."""
    rho = np.exp(log_rho)
    ones, none = np.ones(mask.shape), np.zeros(mask.shape, bool)
    if name == "tis":
        return np.minimum(rho, high), ~none, rho > high
    if name in ("mis", "icepop"):
        return rho, (rho >= low) & (rho <= high), none
    if name == "decoupled":
        return np.where(rho <= high, rho, 0.0), ~none, none
    assert name == "geo_mask"
    ids = np_responses(mask, seg)
    geo = np.ones(mask.shape)
    for i in np.unique(ids[ids >= 0]):
        geo[ids == i] = np.exp(log_rho[ids == i].mean())
    return ones, (geo >= low) & (geo <= high), none


def _inputs(seed: int, scale: float, B: int = 6, T: int = 20):
    """Rows of two segments (and padding in the last), random action runs (one crossing the segment boundary: two
    responses), behaviour and proximal log-probs log rho apart."""
    rng = np.random.default_rng(seed)
    seg = np.where(np.arange(T) < T // 2, 1, 2)[None].repeat(B, 0)
    seg[-1, T - 4 :] = 0
    mask = (rng.random((B, T)) < 0.6) & (seg > 0)
    mask[0, T // 2 - 2 : T // 2 + 2] = True
    behav = np.where(mask, -rng.uniform(0.1, 4.0, (B, T)), 0.0)
    log_rho = np.where(mask, scale * rng.normal(size=(B, T)), 0.0)
    zeros = jnp.zeros((B, T), jnp.int32)
    batch = TrainBatch(
        tokens=zeros,
        positions=zeros,
        segment_ids=jnp.asarray(seg, jnp.int32),
        loss_mask=jnp.asarray(mask),
        advantages=jnp.asarray(np.where(mask, rng.normal(size=(B, T)), 0.0), jnp.float32),
        old_logprobs=jnp.asarray(behav, jnp.float32),
    )
    prox = jnp.asarray(behav + log_rho, jnp.float32)
    # the reference sees the float32 log rho the device computes
    return batch, prox, np.asarray(prox, np.float64) - np.asarray(batch.old_logprobs, np.float64), mask, seg


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("bounds", ["defaults", "custom"])
def test_each_correction_weighs_and_masks_as_its_numpy_reference(name, bounds):
    (low, high), scale, custom = CASES[name]
    kwargs = {}
    if bounds == "custom":  # other bounds than the defaults: the flags reach the function
        low, high = custom
        kwargs = {k: v for k, v in (("correction_low", low), ("correction_high", high)) if v is not None}
    cfg = LearnerConfig(correction=name, **kwargs)
    batch, prox, log_rho, mask, seg = _inputs(7, scale)
    w, keep, capped = np_correction(name, log_rho, mask, seg, low, high)
    keep &= mask
    w = np.where(keep, w, 0.0)
    fixed, metrics = _correct(batch, prox, cfg)

    np.testing.assert_array_equal(np.asarray(fixed.loss_mask), keep)
    np.testing.assert_allclose(np.asarray(fixed.is_weights), w, rtol=1e-6, atol=1e-7)
    # the ratio is now against the proximal policy; the behaviour's log-probs are kept beside it
    np.testing.assert_array_equal(np.asarray(fixed.old_logprobs), np.asarray(prox))
    np.testing.assert_array_equal(np.asarray(fixed.sampler_logprobs), np.asarray(batch.old_logprobs))
    masked = mask & (~keep | (w == 0))
    live = mask & ~masked
    n = mask.sum()
    np.testing.assert_allclose(float(metrics["is_masked_frac"]), masked.sum() / n, rtol=1e-6)
    np.testing.assert_allclose(float(metrics["is_capped_frac"]), (capped & mask).sum() / n, rtol=1e-6)
    np.testing.assert_allclose(float(metrics["is_weight_mean"]), w[live].mean(), rtol=1e-5)
    # the inputs put tokens on both sides of the bounds, so the reference is not vacuous
    if name in ("mis", "icepop", "geo_mask"):
        assert 0 < masked.sum() < n
    elif name == "tis":
        assert 0 < capped.sum() < n and masked.sum() == 0
    else:  # decoupled: weighted 0 above the cap, yet in the denominator
        assert 0 < masked.sum() < n and keep.sum() == n


def test_geo_mask_drops_whole_responses_split_at_segment_boundaries():
    batch, prox, log_rho, mask, seg = _inputs(11, 0.015)
    fixed, _ = _correct(batch, prox, LearnerConfig(correction="geo_mask"))
    keep, ids = np.asarray(fixed.loss_mask), np_responses(mask, seg)
    for i in np.unique(ids[ids >= 0]):
        assert len(set(keep[ids == i].tolist())) == 1  # a response is kept or dropped whole
    # the run across the segment boundary of row 0 is two responses, each judged on its own mean
    T = mask.shape[1]
    left, right = ids[0, T // 2 - 1], ids[0, T // 2]
    assert left != right


# ----------------------------------------------------------------------------- the corrected loss and gradient


PLAIN = dataclasses.replace(CFG, kl_coef=0.0, entropy_coef=0.0, epochs=1, minibatches=1, shuffle=False)


@pytest.fixture(scope="module")
def model_and_batch():
    model = tiny_model()
    batch = make_batch(model, critic=False).replace(ref_logprobs=None)
    # the very program make_batch ran for its old log-probs (the same function and model): a compile-cache hit
    lp, _ = jax.jit(lambda t, p, s: token_logprobs(model, t, p, s))(batch.tokens, batch.positions, batch.segment_ids)
    return model, batch, np.asarray(lp, np.float64)


@pytest.fixture(scope="module")
def loss_programs(model_and_batch):
    """(state, the learner's policy loss and its gradient in params for a batch, the gradient of sum_t c_t log pi_t
    through the same forward): compiled once for every correction, which changes only the batch's arrays."""
    model, _, _ = model_and_batch
    state = init_train_state(model, PLAIN)

    def loss(p, b):
        s, (d, _) = policy_loss(p, state.model_state, state.graphdef, b, PLAIN)
        return s / d

    def surrogate(p, b, coef):
        logp = token_logprobs(state.replace(params=p).model(), b.tokens, b.positions, b.segment_ids)[0]
        return (coef * logp).sum()

    return state, jax.jit(jax.value_and_grad(loss)), jax.jit(jax.grad(surrogate))


@pytest.mark.parametrize("name", list(CASES))
def test_the_corrected_loss_and_its_gradient_through_policy_loss_match_numpy(name, model_and_batch, loss_programs):
    """The learner's `policy_loss` on a corrected batch: the per-token PPO loss around the proximal policy times the
    weight, averaged over the kept tokens; its gradient is sum_t c_t grad log pi_t with numpy's c_t (0 on a dropped,
    zero-weighted or clipped token)."""
    model, batch, lp = model_and_batch
    _, scale, _ = CASES[name]
    rng = np.random.default_rng(5)
    mask = np.asarray(batch.loss_mask)
    # the proximal policy moved a little from the current one (PPO's clip has work), the behaviour more
    prox = np.where(mask, lp + rng.uniform(-0.3, 0.3, mask.shape), 0.0)
    behav = np.where(mask, prox - scale * rng.normal(size=mask.shape), 0.0)
    batch = batch.replace(old_logprobs=jnp.asarray(behav, jnp.float32))
    fixed, _ = _correct(batch, jnp.asarray(prox, jnp.float32), dataclasses.replace(PLAIN, correction=name))
    low, high = CORRECTIONS.get(name).low, CORRECTIONS.get(name).high
    log_rho = np.asarray(jnp.asarray(prox, jnp.float32), np.float64) - np.asarray(batch.old_logprobs, np.float64)
    w, keep, _ = np_correction(name, log_rho, mask, np.asarray(batch.segment_ids), low, high)
    keep &= mask
    w = np.where(keep, w, 0.0)
    adv = np.asarray(batch.advantages, np.float64)
    r = np.exp(lp - np.asarray(jnp.asarray(prox, jnp.float32), np.float64))
    unclipped, clipped = -adv * r, -adv * np.clip(r, 0.8, 1.2)
    per = w * np.maximum(unclipped, clipped)
    n = keep.sum()
    coef = np.where(keep & (unclipped >= clipped), w * -adv * r, 0.0) / n  # d(loss)/d(log pi_t)

    state, loss_and_grad, surrogate_grad = loss_programs
    value, grad = loss_and_grad(state.params, fixed)
    np.testing.assert_allclose(float(value), per[keep].sum() / n, rtol=1e-4)
    expected = surrogate_grad(state.params, fixed, jnp.asarray(coef, jnp.float32))
    g, e = jax.tree.leaves(host(grad)), jax.tree.leaves(host(expected))
    for a, b in zip(g, e, strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-3, atol=1e-6)
    assert any(np.abs(a).max() > 0 for a in g)


# ----------------------------------------------------------------------------- the update


@pytest.mark.parametrize("name", ["geo_mask", "decoupled"])
def test_update_recomputes_the_proximal_policy_and_corrects_against_it(name, model_and_batch):
    """Through `update`: the proximal log-probs are the learner's at its params before the update (here the
    on-policy ones, so PPO's ratio is 1), the loss is numpy's, and the correction's metrics are reported."""
    model, batch, lp = model_and_batch
    (_, high), scale, _ = CASES[name]
    rng = np.random.default_rng(9)
    mask = np.asarray(batch.loss_mask)
    behav = np.where(mask, lp - scale * rng.normal(size=mask.shape), 0.0)
    batch = batch.replace(old_logprobs=jnp.asarray(behav, jnp.float32))
    cfg = dataclasses.replace(PLAIN, correction=name)
    _, m = update(init_train_state(model, cfg), batch)
    low = CORRECTIONS.get(name).low
    log_rho = lp - np.asarray(batch.old_logprobs, np.float64)
    w, keep, _ = np_correction(name, log_rho, mask, np.asarray(batch.segment_ids), low, high)
    keep &= mask
    w = np.where(keep, w, 0.0)
    adv = np.asarray(batch.advantages, np.float64)
    np.testing.assert_allclose(float(m["loss"]), (-adv * w)[keep].sum() / keep.sum(), rtol=1e-3, atol=1e-6)
    masked = mask & (~keep | (w == 0))
    np.testing.assert_allclose(float(m["is_masked_frac"]), masked.sum() / mask.sum(), rtol=1e-5)
    assert 0 < masked.sum() < mask.sum()
    # the advantage metrics stay those of every action token of the batch
    np.testing.assert_allclose(float(m["adv_mean"]), adv[mask].mean(), rtol=1e-4, atol=1e-6)


def test_no_correction_by_default():
    assert LearnerConfig().correction == "none" and not LearnerConfig().recomputes_proximal
    assert resolve(LearnerConfig()) == ("none", None, None)
    with pytest.raises(ValueError, match="has no correction"):
        correct(*_inputs(0, 0.1)[:2], LearnerConfig())


@pytest.mark.slow
def test_tis_cap_is_the_tis_entry_and_updates_as_the_former_formula(model_and_batch):
    """`--learner.tis-cap C` predates the registry: it resolves to `--learner.correction tis
    --learner.correction-high C`, and its update is exactly the former one (the weights min(exp(lp0 - sampler), C)
    handed in with lp0 as the old log-probs). The two are different programs, which XLA may fuse differently (with
    XLA:CPU's classic emitters their params differ by an ulp in 2% of the weights), and AdamW's first step,
    lr * g / (|g| + eps), turns a float error d in a near-zero gradient into up to lr / eps * d of the weight (one
    weight in 8,192 moved 2.2e-6 on another CPU): equal to 1e-5, where a wrong weight moves weights by the
    learning rate's order (3e-3)."""
    assert resolve(LearnerConfig(tis_cap=1.5)) == resolve(LearnerConfig(correction="tis", correction_high=1.5))
    assert resolve(LearnerConfig(tis_cap=1.5, correction="tis")) == ("tis", None, 1.5)
    assert LearnerConfig(tis_cap=1.5).recomputes_proximal
    model, batch, lp = model_and_batch
    rng = np.random.default_rng(4)
    mask = np.asarray(batch.loss_mask)
    batch = batch.replace(old_logprobs=jnp.asarray(np.where(mask, lp - rng.uniform(-1, 1, mask.shape), 0.0), "f4"))
    new, m = update(init_train_state(model, dataclasses.replace(PLAIN, tis_cap=1.5)), batch)
    assert float(m["is_capped_frac"]) > 0 and float(m["is_masked_frac"]) == 0
    state = init_train_state(model, PLAIN)
    lp0 = jnp.asarray(lp, jnp.float32)  # the learner's log-probs at the sampling params (the fixture's)
    w = jnp.where(batch.loss_mask, jnp.minimum(jnp.exp(lp0 - batch.old_logprobs), 1.5), 0.0)
    former, _ = update(state, batch.replace(old_logprobs=lp0, sampler_logprobs=batch.old_logprobs, is_weights=w))
    for a, b in zip(jax.tree.leaves(host(new.params)), jax.tree.leaves(host(former.params)), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------- config errors


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"correction": "icepopp"}, "correction 'icepopp' is unknown; choose one of none, tis, mis, icepop"),
        ({"correction": "tis", "correction_low": 0.5}, "correction_low: the correction 'tis' takes no low bound"),
        ({"correction": "icepop", "correction_low": 6.0}, "correction_low 6.0 must be below correction_high 5.0"),
        ({"correction": "mis", "correction_high": -1.0}, "correction_high is -1.0; it must be a finite number > 0"),
        ({"correction_high": 3.0}, "correction_high 3.0 is set but correction is none"),
        ({"tis_cap": 2.0, "correction": "mis"}, "tis_cap 2.0 is the tis correction with that cap"),
        ({"tis_cap": 2.0, "correction_high": 3.0}, "tis_cap and correction_low / correction_high both set"),
    ],
)
def test_bad_corrections_are_refused_naming_the_field(kwargs, message, model_and_batch):
    cfg = LearnerConfig(**kwargs)
    assert message in " | ".join(correction_errors(cfg))
    with pytest.raises(ValueError, match="LearnerConfig: "):
        init_train_state(model_and_batch[0], cfg)  # refused before it touches the model


def test_good_corrections_pass():
    for cfg in (
        LearnerConfig(),
        LearnerConfig(tis_cap=2.0),
        LearnerConfig(tis_cap=2.0, correction="tis"),
        LearnerConfig(correction="decoupled", correction_high=10.0),
        LearnerConfig(correction="geo_mask", correction_low=0.9, correction_high=1.1),
    ):
        assert correction_errors(cfg) == [], cfg


def test_the_command_line_names_the_correction_flags(capsys):
    from experiments import train as train_cli

    with pytest.raises(SystemExit) as e:
        train_cli.main(["tiny", "--learner.correction", "tis", "--learner.correction-low", "0.5"])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert "--learner.correction-low: the correction 'tis' takes no low bound" in err
