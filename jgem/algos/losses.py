"""Policy-gradient, KL, entropy and value losses (pure jnp).

Per-token functions return f32[B, T] terms; `aggregate` turns a term into a `(sum, denominator)` pair so that
micro-batch accumulation and cross-device reduction are exact: the loss is sum(sums) / sum(denominators).

Three registries (docs/algorithms.md) name what `LearnerConfig` chooses: `POLICY_LOSSES`
(`fn(logprobs, batch, cfg) -> (loss f32[B, T], clipped bool[B, T])`), `KL_ESTIMATORS`
(`fn(logprobs, ref_logprobs) -> f32[B, T]`) and `AGGREGATIONS`
(`fn(per_token, mask, segment_ids, norm_constant) -> (sum, denominator)`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from jgem.registry import Registry

PolicyLossFn = Callable[[jax.Array, Any, Any], tuple[jax.Array, jax.Array]]
POLICY_LOSSES: Registry[PolicyLossFn] = Registry("policy loss")
KL_ESTIMATORS: Registry[Callable[[jax.Array, jax.Array], jax.Array]] = Registry("KL estimator")
AGGREGATIONS: Registry[Callable[..., tuple[jax.Array, jax.Array]]] = Registry("loss aggregation")


def ppo_clip_loss(
    logprobs: jax.Array,
    old_logprobs: jax.Array,
    advantages: jax.Array,
    *,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    dual_clip: float | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Clipped importance-ratio loss per token: -min(rho A, clip(rho, 1-eps_lo, 1+eps_hi) A).

    dual_clip c > 1 additionally caps the loss at -c A for negative advantages (Ye et al. 2020).
    Returns (loss f32[B, T], clipped bool[B, T]: the clipped branch was taken).
    """
    clip_high = clip_low if clip_high is None else clip_high
    ratio = jnp.exp(logprobs - old_logprobs)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss = jnp.maximum(loss_unclipped, loss_clipped)
    clipped = loss_clipped > loss_unclipped
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (it caps the loss at -c*A for A < 0); got {dual_clip}")
        capped = jnp.minimum(loss, -dual_clip * advantages)
        clipped = clipped | ((advantages < 0) & (capped < loss))
        loss = jnp.where(advantages < 0, capped, loss)
    return loss, clipped


def reinforce_loss(logprobs: jax.Array, advantages: jax.Array) -> jax.Array:
    """Plain policy gradient per token: -A log pi."""
    return -advantages * logprobs


@POLICY_LOSSES.register("ppo")
def ppo_policy_loss(logprobs, batch, cfg):
    """PPO's clipped importance ratio per token (clip_low, clip_high, dual_clip)."""
    return ppo_clip_loss(
        logprobs,
        batch.old_logprobs,
        batch.advantages,
        clip_low=cfg.clip_low,
        clip_high=cfg.clip_high,
        dual_clip=cfg.dual_clip,
    )


@POLICY_LOSSES.register("reinforce")
def reinforce_policy_loss(logprobs, batch, cfg):
    """-A log pi per token (no ratio, nothing clipped)."""
    return reinforce_loss(logprobs, batch.advantages), jnp.zeros(logprobs.shape, bool)


def kl_penalty(logprobs: jax.Array, ref_logprobs: jax.Array, estimator: str = "k3") -> jax.Array:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi, by a registered estimator (Schulman's k1, k2, k3)."""
    return KL_ESTIMATORS.get(estimator)(logprobs, ref_logprobs)


@KL_ESTIMATORS.register("k1")
def kl_k1(logprobs: jax.Array, ref_logprobs: jax.Array) -> jax.Array:
    """log pi / pi_ref (unbiased, can be negative)."""
    return logprobs - ref_logprobs


@KL_ESTIMATORS.register("k2")
def kl_k2(logprobs: jax.Array, ref_logprobs: jax.Array) -> jax.Array:
    """0.5 (log pi / pi_ref)^2."""
    return 0.5 * jnp.square(logprobs - ref_logprobs)


@KL_ESTIMATORS.register("k3")
def kl_k3(logprobs: jax.Array, ref_logprobs: jax.Array) -> jax.Array:
    """pi_ref / pi - 1 - log(pi_ref / pi) >= 0 (unbiased, low variance)."""
    # clip so a far-off token cannot overflow to inf
    x = jnp.clip(logprobs - ref_logprobs, -20.0, 20.0)
    return jnp.exp(-x) - 1.0 + x


def value_loss(
    values: jax.Array, returns: jax.Array, old_values: jax.Array | None = None, clip: float | None = None
) -> jax.Array:
    """0.5 (V - R)^2 per position; with clip, the PPO max of unclipped and clipped-around-old-value errors."""
    err = jnp.square(values - returns)
    if clip is not None and old_values is not None:
        v_clipped = old_values + jnp.clip(values - old_values, -clip, clip)
        err = jnp.maximum(err, jnp.square(v_clipped - returns))
    return 0.5 * err


def segment_lengths(mask: jax.Array, segment_ids: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(masked tokens in each token's (row, segment) f32[B, T], number of segments with any masked token)."""
    B, T = mask.shape
    ids = jnp.arange(B)[:, None] * T + jnp.clip(segment_ids, 0, T - 1)
    counts = jax.ops.segment_sum(mask.astype(jnp.float32).reshape(-1), ids.reshape(-1), num_segments=B * T)
    return counts[ids], (counts > 0).sum().astype(jnp.float32)


def aggregate(
    per_token: jax.Array,
    mask: jax.Array,
    segment_ids: jax.Array | None = None,
    mode: str = "token_mean",
    norm_constant: float | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Reduce a per-token term to (sum, denominator) by a registered aggregation (`AGGREGATIONS`)."""
    seg = jnp.ones_like(mask, jnp.int32) if segment_ids is None else segment_ids
    return AGGREGATIONS.get(mode)(per_token, mask, seg, norm_constant)


@AGGREGATIONS.register("token_mean")
def token_mean(per_token, mask, segment_ids, norm_constant=None):
    """Sum over masked tokens / number of masked tokens."""
    m = mask.astype(jnp.float32)
    return (per_token * m).sum(), m.sum()


@AGGREGATIONS.register("seq_mean_token_mean")
def seq_mean_token_mean(per_token, mask, segment_ids, norm_constant=None):
    """Mean over sequences (a row's segment) of the sequence's token mean."""
    lengths, n_seqs = segment_lengths(mask, segment_ids)
    return (per_token * mask.astype(jnp.float32) / jnp.maximum(lengths, 1.0)).sum(), n_seqs


@AGGREGATIONS.register("token_sum_norm")
def token_sum_norm(per_token, mask, segment_ids, norm_constant=None):
    """Sum over masked tokens / (sequences * norm_constant) (Dr. GRPO; the constant defaults to the row length T)."""
    _, n_seqs = segment_lengths(mask, segment_ids)
    c = float(mask.shape[1] if norm_constant is None else norm_constant)
    return (per_token * mask.astype(jnp.float32)).sum(), n_seqs * c


def response_ids(mask: jax.Array, segment_ids: jax.Array) -> tuple[jax.Array, int]:
    """(i32[B, T] id of each masked token's response, number of ids): a response is a maximal run of masked tokens
    inside one segment, i.e. one turn's action (the chat format puts at least one prompt token between two
    actions). Unmasked tokens get the last id, which no response uses."""
    B, T = mask.shape
    prev_mask = jnp.pad(mask, ((0, 0), (1, 0)))[:, :-1]
    prev_seg = jnp.pad(segment_ids, ((0, 0), (1, 0)), constant_values=-1)[:, :-1]
    start = mask & ~(prev_mask & (prev_seg == segment_ids))
    run = jnp.cumsum(start.astype(jnp.int32), axis=1) - 1  # the row's response index at each token
    ids = jnp.where(mask, jnp.arange(B)[:, None] * T + run, B * T)
    return ids, B * T + 1


def response_mean(x: jax.Array, mask: jax.Array, segment_ids: jax.Array) -> jax.Array:
    """f32[B, T]: the mean of `x` over each masked token's response (0 on unmasked tokens)."""
    ids, n = response_ids(mask, segment_ids)
    m = mask.astype(jnp.float32)
    sums = jax.ops.segment_sum((x * m).reshape(-1), ids.reshape(-1), num_segments=n)
    counts = jax.ops.segment_sum(m.reshape(-1), ids.reshape(-1), num_segments=n)
    return jnp.where(mask, (sums / jnp.maximum(counts, 1.0))[ids], 0.0)


@POLICY_LOSSES.register("gspo")
def gspo_loss(logprobs, batch, cfg):
    """GSPO (Zheng et al., 2025): one importance ratio per response, s = (pi / pi_old)^(1 / |y|), the geometric mean
    of its token ratios, clipped like PPO's: every token of a response carries -min(s A, clip(s, 1 - clip_low,
    1 + clip_high) A), with A its turn's advantage (the same on every token of a turn). The paper's clip range is
    tiny (3e-4 / 4e-4: `--learner.clip-low 3e-4 --learner.clip-high 4e-4`)."""
    mask = batch.loss_mask
    log_s = response_mean(jnp.where(mask, logprobs - batch.old_logprobs, 0.0), mask, batch.segment_ids)
    s = jnp.exp(log_s)
    hi = cfg.clip_low if cfg.clip_high is None else cfg.clip_high
    a = batch.advantages
    unclipped, clipped_loss = -a * s, -a * jnp.clip(s, 1.0 - cfg.clip_low, 1.0 + hi)
    return jnp.maximum(unclipped, clipped_loss), (clipped_loss > unclipped) & mask


@POLICY_LOSSES.register("cispo")
def cispo_loss(logprobs, batch, cfg):
    """CISPO (MiniMax-M1, 2025): -sg(clip(r, 1 - clip_low, 1 + clip_high)) A log pi per token, r = pi / pi_old. The
    clipped importance weight is a constant factor, so no token's gradient is dropped (PPO's clip zeroes it).
    MiniMax leave the lower bound open (a large clip_low, e.g. `--learner.clip-low 1.0`) and tune clip_high."""
    ratio = jnp.exp(logprobs - batch.old_logprobs)
    hi = cfg.clip_low if cfg.clip_high is None else cfg.clip_high
    w = jax.lax.stop_gradient(jnp.clip(ratio, 1.0 - cfg.clip_low, 1.0 + hi))
    clipped = ((ratio < 1.0 - cfg.clip_low) | (ratio > 1.0 + hi)) & batch.loss_mask
    return -w * batch.advantages * logprobs, clipped
