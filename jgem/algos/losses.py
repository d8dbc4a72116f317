"""Policy-gradient, KL, entropy and value losses (pure jnp).

Per-token functions return f32[B, T] terms; `aggregate` turns a term into a `(sum, denominator)` pair so that
micro-batch accumulation and cross-device reduction are exact: the loss is sum(sums) / sum(denominators).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "token_sum_norm")
KL_ESTIMATORS = ("k1", "k2", "k3")


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


def kl_penalty(logprobs: jax.Array, ref_logprobs: jax.Array, estimator: str = "k3") -> jax.Array:
    """Per-token estimate of KL(pi || pi_ref) from samples of pi (Schulman's k1, k2, k3)."""
    log_ratio = logprobs - ref_logprobs  # log pi / pi_ref
    if estimator == "k1":
        return log_ratio
    if estimator == "k2":
        return 0.5 * jnp.square(log_ratio)
    if estimator == "k3":
        # exp(-x) - 1 + x >= 0; clip so a far-off token cannot overflow to inf
        x = jnp.clip(log_ratio, -20.0, 20.0)
        return jnp.exp(-x) - 1.0 + x
    raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {KL_ESTIMATORS}")


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
    """Reduce a per-token term to (sum, denominator).

    token_mean:            sum over masked tokens / number of masked tokens.
    seq_mean_token_mean:   mean over sequences (a row's segment) of the sequence's token mean.
    token_sum_norm:        sum over masked tokens / (sequences * norm_constant) (Dr. GRPO; constant default T).
    """
    m = mask.astype(jnp.float32)
    if mode == "token_mean":
        return (per_token * m).sum(), m.sum()
    seg = jnp.ones_like(mask, jnp.int32) if segment_ids is None else segment_ids
    lengths, n_seqs = segment_lengths(mask, seg)
    if mode == "seq_mean_token_mean":
        return (per_token * m / jnp.maximum(lengths, 1.0)).sum(), n_seqs
    if mode == "token_sum_norm":
        c = float(mask.shape[1] if norm_constant is None else norm_constant)
        return (per_token * m).sum(), n_seqs * c
    raise ValueError(f"unknown loss aggregation {mode!r}; choose one of {AGGREGATIONS}")
