"""The learner: packed-episode gradient, meshes vs one device, determinism, the non-finite guard, the critic."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jgem.algos.config import LearnerConfig
from jgem.algos.critic import make_critic
from jgem.algos.learner import (
    init_train_state,
    make_schedule,
    policy_loss,
    token_logprobs,
    update,
)
from jgem.algos.types import TrainBatch
from jgem.models.config import LoraConfig
from jgem.models.transformer import init_model
from jgem.sharding.config import MeshConfig
from jgem.sharding.mesh import make_mesh
from jgem.sharding.rules import shard_batch
from tests.algos.helpers import CFG, MODEL_CFG, host, make_batch, tiny_model

_logprobs = jax.jit(token_logprobs)

# The update's config is static: each distinct LearnerConfig (and batch structure) is a program of its own, so the
# tests below share these where the config is not what they test.
# One minibatch, no KL or entropy term: the loss has a closed form in the log-probs (tis tests, mismatch logging);
# the leanest update program (bf16).
ONE = dataclasses.replace(CFG, kl_coef=0.0, entropy_coef=0.0, epochs=1, minibatches=1, shuffle=False)
# Two unshuffled minibatches (minibatch m holds the rows r with r mod 2 == m: `_split`), so 2 optimizer steps per
# update, under a linear decay to 0 over 4 steps (the schedule test, mismatch logging, remat).
TWO = dataclasses.replace(ONE, minibatches=2, schedule="linear", decay_steps=4)


@functools.cache
def _model() -> nnx.Module:
    """`tiny_model()`, built once (each init traces its programs anew). Nothing mutates it: `init_train_state` places
    copies of its variables, and `update` donates only those."""
    return tiny_model()


@functools.cache
def _batch(critic: bool = False) -> TrainBatch:
    """`make_batch(tiny_model())`, built once: make_batch jits the model's forward anew on every call. Arrays are
    immutable and `update` donates only the state, so tests share it."""
    return make_batch(_model(), critic=critic)


def _run(mesh_cfg=None, micro=2, batch=None, cfg=CFG, updates=1):
    mesh = None if mesh_cfg is None else make_mesh(mesh_cfg)
    model = _model()
    batch = _batch() if batch is None else batch
    state = init_train_state(model, LearnerConfig(**{**cfg.__dict__, "micro_batch_size": micro}), mesh)
    batch = jax.device_put(batch, jax.devices()[0]) if mesh is None else shard_batch(batch, mesh)
    for _ in range(updates):
        state, metrics = update(state, batch)
    return host(state.params), host(metrics)


# ----------------------------------------------------------------------------- two multi-turn views


def _episode_rows():
    """One episode p0 a0 o1 a1 packed in one row, next to a second episode in segment 2; and per-transition rows."""
    rng = np.random.default_rng(3)
    p0, a0, o1, a1 = (rng.integers(0, MODEL_CFG.vocab_size, n).tolist() for n in (3, 2, 2, 3))
    q0, b0 = (rng.integers(0, MODEL_CFG.vocab_size, n).tolist() for n in (2, 2))
    A0, A1, B0 = 0.7, -1.3, 2.0
    T = 16

    def row(segments):
        """segments: list of (tokens, loss flags, advantages) per segment."""
        toks, pos, seg, mask, adv = [], [], [], [], []
        for s, (t, m, a) in enumerate(segments, start=1):
            toks += t
            pos += list(range(len(t)))
            seg += [s] * len(t)
            mask += m
            adv += a
        pad = T - len(toks)
        return toks + [0] * pad, pos + [0] * pad, seg + [0] * pad, mask + [False] * pad, adv + [0.0] * pad

    ep1 = (
        p0 + a0 + o1 + a1,
        [False] * 3 + [True] * 2 + [False] * 2 + [True] * 3,
        [0.0] * 3 + [A0] * 2 + [0.0] * 2 + [A1] * 3,
    )
    ep2 = (q0 + b0, [False] * 2 + [True] * 2, [0.0] * 2 + [B0] * 2)
    # the packed view's one row, padded with empty rows (segment 0, no loss) to the per-transition view's 3 rows:
    # both views then run one compiled program
    packed = [row([ep1, ep2]), row([]), row([])]
    per_transition = [
        row([(p0 + a0, [False] * 3 + [True] * 2, [0.0] * 3 + [A0] * 2)]),
        row([(p0 + a0 + o1 + a1, [False] * 7 + [True] * 3, [0.0] * 7 + [A1] * 3)]),
        row([ep2]),
    ]
    return packed, per_transition


def _to_batch(rows, model):
    toks, pos, seg, mask, adv = (jnp.asarray(np.array(x)) for x in zip(*rows))
    logp, _ = _logprobs(model, toks, pos, seg)
    old = jnp.where(mask, logp - 0.1, 0.0)  # ratio exp(0.1): inside the clip range, so PPO has a gradient
    return TrainBatch(
        tokens=toks.astype(jnp.int32),
        positions=pos.astype(jnp.int32),
        segment_ids=seg.astype(jnp.int32),
        loss_mask=mask,
        advantages=adv.astype(jnp.float32),
        old_logprobs=old,
        ref_logprobs=old + 0.2,
    )


def test_packed_episode_gradient_equals_per_transition_gradient():
    """PPO + KL + entropy, token-mean. The summed gradients are equal, so token_sum_norm's (only its constant
    normaliser differs between views) follows."""
    model = _model()
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    cfg = LearnerConfig(kl_coef=0.1, entropy_coef=0.01)
    packed, per_transition = _episode_rows()

    @jax.jit
    def grads(batch):
        g, (d, _) = jax.grad(policy_loss, has_aux=True)(params, rest, graphdef, batch, cfg)
        return jax.tree.map(lambda x: x / d, g), d

    g_packed, d_packed = grads(_to_batch(packed, model))
    g_rows, d_rows = grads(_to_batch(per_transition, model))
    assert float(d_packed) == float(d_rows) == 7.0  # 5 action tokens in episode 1, 2 in episode 2
    flat_p, flat_r = jax.tree.leaves(host(g_packed)), jax.tree.leaves(host(g_rows))
    assert max(float(np.abs(x).max()) for x in flat_p) > 1e-4  # a real, nonzero gradient
    for a, b in zip(flat_p, flat_r, strict=True):
        # float32 sums run in a different order in the two layouts: the absolute slack scales with the leaf
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-4 * float(np.abs(b).max()) + 1e-9)


# ----------------------------------------------------------------------------- meshes, determinism, guard


def _norm(a, b) -> float:
    return float(np.sqrt(sum(np.sum((x - y) ** 2) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))))


@pytest.mark.slow
def test_update_on_meshes_equals_one_device():
    init = host(nnx.state(_model(), nnx.Param))
    ref_params, ref_m = _run(None, micro=2)
    change = _norm(ref_params, init)
    for mesh_cfg, micro in ((MeshConfig(data=2, fsdp=2, tensor=2), 4), (MeshConfig(data=8), 8)):
        params, m = _run(mesh_cfg, micro=micro)
        for k in ("loss", "pg_loss", "entropy", "kl", "grad_norm", "clip_frac", "adv_mean", "adv_std"):
            np.testing.assert_allclose(m[k], ref_m[k], rtol=2e-4, atol=2e-6, err_msg=f"{mesh_cfg} {k}")
        # Adam divides by sqrt(v): elementwise, near-zero gradients amplify rounding, so compare globally
        assert _norm(params, ref_params) < 1e-3 * change, (mesh_cfg, _norm(params, ref_params), change)
    assert m["skipped"] == 0


def test_update_is_deterministic_and_learns():
    model = _model()
    batch = _batch()
    p1, m1 = _run(None, batch=batch)
    p2, m2 = _run(None, batch=batch)
    for a, b in zip(jax.tree.leaves((p1, m1)), jax.tree.leaves((p2, m2))):
        np.testing.assert_array_equal(a, b)  # bit for bit
    assert m1["skipped"] == 0 and np.isfinite(m1["loss"]) and m1["grad_norm"] > 0
    # the policy moved towards positive-advantage tokens: d logp correlates with the advantage
    before, _ = _logprobs(model, batch.tokens, batch.positions, batch.segment_ids)
    graphdef, _, rest = nnx.split(model, nnx.Param, ...)
    after, _ = _logprobs(nnx.merge(graphdef, p1, rest), batch.tokens, batch.positions, batch.segment_ids)
    mask = np.asarray(batch.loss_mask)
    delta, adv = np.asarray(after - before)[mask], np.asarray(batch.advantages)[mask]
    assert np.corrcoef(delta, adv)[0, 1] > 0.3


def test_nonfinite_gradients_skip_the_step():
    model = _model()
    batch = _batch()
    init = host(nnx.state(model, nnx.Param))
    # built from batch.advantages so the dtype stays strong f32 (a weak type would recompile)
    all_nan = batch.replace(advantages=jnp.where(batch.loss_mask, jnp.nan, batch.advantages))
    params, m = _run(None, batch=all_nan)
    assert m["skipped"] == 4  # 2 epochs x 2 minibatches, every one dropped
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(init)):
        np.testing.assert_array_equal(a, b)
    one_row = batch.replace(advantages=batch.advantages.at[0, 5].set(jnp.inf))
    params, m = _run(None, batch=one_row)
    assert m["skipped"] == 2  # the row lands in one minibatch per epoch; the other steps are applied
    assert np.isfinite(m["loss"]) and np.isfinite(m["grad_norm"])  # averaged over the applied steps
    assert all(np.isfinite(x).all() for x in jax.tree.leaves(params))
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(init)))


# ----------------------------------------------------------------------------- critic


@pytest.mark.slow
def test_critic_trains_inside_the_same_update():
    model = _model()
    critic = make_critic(MODEL_CFG, policy=model)
    batch = _batch(critic=True)
    cfg = LearnerConfig(lr=1e-3, critic_lr=3e-3, value_clip=None, epochs=2, minibatches=1)
    state = init_train_state(model, cfg, critic=critic)
    losses = []
    for _ in range(4):
        state, m = update(state, batch)
        losses.append(float(m["value_loss"]))
    assert m["skipped"] == 0 and m["critic_grad_norm"] > 0
    assert losses[-1] < 0.7 * losses[0], losses
    # the policy's own params did not turn into the critic's: only the critic has a value head
    assert "value_w" not in state.params and "value_w" in state.critic_params


# ----------------------------------------------------------------------------- schedules and errors


def test_schedules():
    cos = make_schedule(LearnerConfig(schedule="cosine", warmup_steps=10, decay_steps=100, min_lr_ratio=0.1), 1.0)
    np.testing.assert_allclose(
        [cos(0), cos(5), cos(10), cos(60), cos(110), cos(500)], [0.0, 0.5, 1.0, 0.55, 0.1, 0.1], rtol=1e-5, atol=1e-6
    )
    lin = make_schedule(LearnerConfig(schedule="linear", warmup_steps=0, decay_steps=10), 2.0)
    np.testing.assert_allclose([lin(0), lin(5), lin(10)], [2.0, 1.0, 0.0], atol=1e-6)
    const = make_schedule(LearnerConfig(warmup_steps=4), 3.0)
    np.testing.assert_allclose([const(0), const(2), const(4), const(1000)], [0.0, 1.5, 3.0, 3.0], atol=1e-6)


def test_update_follows_a_schedule():
    # the reported lr is the schedule at the optimizer's step count; chains of optax states are tuples, whose
    # `.count` method once passed for the count and crashed every non-constant schedule (TWO: a linear decay over
    # 4 steps, 2 steps an update, behind clip_by_global_norm: a chain). Its program is the mismatch test's.
    assert TWO.schedule == "linear" and TWO.decay_steps == 4 and TWO.max_grad_norm is not None
    state = init_train_state(_model(), TWO)
    lrs = []
    for _ in range(2):
        state, m = update(state, _batch().replace(ref_logprobs=None))
        lrs.append(float(m["lr"]))
    np.testing.assert_allclose(lrs, [0.5 * TWO.lr, 0.0], rtol=1e-6, atol=1e-9)  # counts 2 and 4 of a 4-step decay


def test_bad_configs_give_clear_errors():
    model = _model()
    batch = _batch()
    with pytest.raises(ValueError, match="minibatch of 8 rows .* not divisible by micro_batch_size 3"):
        update(init_train_state(model, LearnerConfig(minibatches=2, micro_batch_size=3)), batch)
    with pytest.raises(ValueError, match="not divisible into minibatches=3"):
        update(init_train_state(model, LearnerConfig(minibatches=3)), batch)
    with pytest.raises(ValueError, match="needs TrainBatch.ref_logprobs"):
        update(init_train_state(model, LearnerConfig(kl_coef=0.1)), batch.replace(ref_logprobs=None))
    mesh = make_mesh(MeshConfig(data=8))
    with pytest.raises(ValueError, match=r"micro_batch_size \(rows per micro-batch\) 4 is not divisible by 8"):
        update(init_train_state(model, LearnerConfig(micro_batch_size=4), mesh), shard_batch(batch, mesh))
    with pytest.raises(ValueError, match="has a critic; TrainBatch needs returns"):
        update(init_train_state(model, LearnerConfig(), critic=make_critic(MODEL_CFG)), batch)
    with pytest.raises(ValueError, match="aggregation 'mean' is unknown"):  # the registries are checked at build
        init_train_state(model, LearnerConfig(aggregation="mean"))
    with pytest.raises(ValueError, match="TrainBatch.advantages has shape"):
        batch.replace(advantages=jnp.zeros((2, 2))).validate()


def _on_policy(model, batch):
    logp, _ = _logprobs(model, batch.tokens, batch.positions, batch.segment_ids)
    return np.asarray(logp, np.float64)


@pytest.mark.slow
def test_update_logs_the_sampler_learner_mismatch_on_action_tokens():
    model = _model()
    batch = _batch()
    lp = _on_policy(model, batch)
    mask = np.asarray(batch.loss_mask)
    rng = np.random.default_rng(3)
    d = np.where(mask, rng.uniform(-0.3, 0.3, mask.shape), 0.0)  # sampler = learner - d
    batch = batch.replace(old_logprobs=jnp.asarray(np.where(mask, lp - d, 0.0), jnp.float32), ref_logprobs=None)
    # one minibatch: the first optimizer step's is the whole batch (the program of the tis test's ppo case)
    _, m = update(init_train_state(model, ONE), batch)
    np.testing.assert_allclose(float(m["logprob_diff_mean"]), np.abs(d)[mask].mean(), rtol=1e-4)
    np.testing.assert_allclose(float(m["logprob_diff_max"]), np.abs(d)[mask].max(), rtol=1e-4)
    kl = np.exp(d) - 1.0 - d  # k3 of log(sampler / learner) = -d
    np.testing.assert_allclose(float(m["sampler_kl"]), kl[mask].mean(), rtol=1e-3)
    # two minibatches: the first one's tokens only, unless tis_cap has the whole batch's learner log-probs
    _, m = update(init_train_state(model, TWO), batch)  # minibatch 0: the even rows (`_split`: row mod M)
    np.testing.assert_allclose(float(m["logprob_diff_mean"]), np.abs(d[::2])[mask[::2]].mean(), rtol=1e-4)
    _, m = update(init_train_state(model, dataclasses.replace(TWO, tis_cap=100.0)), batch)
    np.testing.assert_allclose(float(m["logprob_diff_mean"]), np.abs(d)[mask].mean(), rtol=1e-4)
    np.testing.assert_allclose(float(m["logprob_diff_max"]), np.abs(d)[mask].max(), rtol=1e-4)
    np.testing.assert_allclose(float(m["sampler_kl"]), kl[mask].mean(), rtol=1e-3)


@pytest.mark.parametrize("policy_loss", ["reinforce", "ppo"])
def test_truncated_importance_weight_on_the_sampler_learner_ratio(policy_loss):
    model = _model()
    batch = _batch()
    lp = _on_policy(model, batch)
    mask = np.asarray(batch.loss_mask)
    adv = np.asarray(batch.advantages, np.float64)
    rng = np.random.default_rng(4)
    d = np.where(mask, rng.uniform(-1.0, 1.0, mask.shape), 0.0)  # learner - sampler, some beyond the cap
    batch = batch.replace(old_logprobs=jnp.asarray(np.where(mask, lp - d, 0.0), jnp.float32), ref_logprobs=None)
    base = dataclasses.replace(ONE, policy_loss=policy_loss)
    cap = 1.5
    w = np.minimum(np.exp(d), cap)
    # reinforce: -A logp w; ppo against the learner's own log-probs (ratio 1 at the sampling params): -A w
    per = -adv * (lp if policy_loss == "reinforce" else 1.0)
    _, m = update(init_train_state(model, dataclasses.replace(base, tis_cap=cap)), batch)
    np.testing.assert_allclose(float(m["loss"]), (per * w)[mask].mean(), rtol=1e-4)
    # off by default: no weight (ppo's ratio is then against the sampler's log-probs)
    assert LearnerConfig().tis_cap is None
    _, m = update(init_train_state(model, base), batch)
    plain = per if policy_loss == "reinforce" else np.maximum(-adv * np.exp(d), -adv * np.clip(np.exp(d), 0.8, 1.2))
    np.testing.assert_allclose(float(m["loss"]), plain[mask].mean(), rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("rank", [0, 4], ids=["full", "lora"])
def test_remat_updates_as_without_it_with_a_frozen_base_and_tis(rank):
    """Remat ran as `nnx.remat`, which writes back the Variables of the block it wraps and raised TraceContextError
    for Variables from an outer trace: LoRA's frozen base under `jax.grad`, the params inside tis_cap's `lax.scan`.
    (The config and batch structure are the mismatch test's third update: the full model's run without remat is
    that program.)"""
    cfg = dataclasses.replace(TWO, tis_cap=100.0)
    batch = _batch().replace(ref_logprobs=None)  # at init an adapted model equals its base: on-policy either way
    out = []
    for remat in ("none", "full"):
        mcfg = MODEL_CFG.replace(remat=remat, lora=LoraConfig(rank=rank))
        state, m = update(init_train_state(init_model(mcfg, seed=0), cfg), batch)
        out.append((host(state.params), host(m)))
    # recomputed activations round differently; Adam (2 steps at lr <= 3e-3) carries that into a few weights
    for a, b in zip(jax.tree.leaves(out[0]), jax.tree.leaves(out[1]), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_bfloat16_params_train_in_their_dtype():
    # the Qwen presets could set bf16 params: the accumulated gradients are float32 (divided by the token count)
    # and must meet the optimizer in the params' dtype, or the scan's carry changes dtype and the update fails.
    # One update with a critic runs both the policy's and the critic's optimizer steps in bf16 (the policy's is
    # the same code with or without a critic), so one program checks both.
    cfg = dataclasses.replace(MODEL_CFG, param_dtype="bfloat16", dtype="bfloat16")
    model = init_model(cfg, seed=0)
    state = init_train_state(model, ONE, critic=make_critic(cfg))  # the leanest update: the dtypes are the point
    before = host((state.params, state.critic_params))  # update donates the state
    # the batch of the float32 model with the same seed: its old log-probs are near this model's
    new, m = update(state, _batch(critic=True))
    assert np.isfinite(float(m["loss"])) and float(m["skipped"]) == 0
    after = host((new.params, new.critic_params))
    # every param keeps its dtype, and both the policy and the critic moved; the policy is all bf16, the critic's
    # trunk too (its value head is float32)
    for b, a in zip(before, after, strict=True):
        assert all(x.dtype == y.dtype for x, y in zip(jax.tree.leaves(b), jax.tree.leaves(a), strict=True))
        assert any(np.any(x != y) for x, y in zip(jax.tree.leaves(b), jax.tree.leaves(a)))
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(after[0]))
    assert after[1]["embed"].value.dtype == jnp.bfloat16
    assert np.isfinite(float(m["value_loss"])) and float(m["critic_grad_norm"]) > 0
