"""Advantage estimators behind a small registry (pure jnp over turn-level `[E, K]` arrays).

Every estimator has the signature `fn(rewards[E, K], turn_mask[E, K], **options) -> Advantages` and ignores the
options it does not use. Statistics are reductions over the full (possibly sharded, multi-process) arrays inside
jit, so ReBN's batch mean and std are global. Formulas and guidance: docs/algorithms.md.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import struct

from jgem.algos.returns import discounted_returns, gae
from jgem.registry import Registry


@struct.dataclass
class Advantages:
    """advantages f32[E, K] and returns f32[E, K] (critic targets for gae, G_t otherwise); 0 on masked turns."""

    advantages: jax.Array
    returns: jax.Array


AdvantageFn = Callable[..., Advantages]
ADVANTAGES: Registry[AdvantageFn] = Registry("advantage estimator")


def register_advantage(name: str) -> Callable[[AdvantageFn], AdvantageFn]:
    """`@register_advantage(name)`: add the estimator under `name`, replacing an earlier one of that name, so a
    module that registers one can be imported again (`ADVANTAGES.register(name, overwrite=True)`)."""
    return ADVANTAGES.register(name, overwrite=True)


def get_advantage_fn(name: str) -> AdvantageFn:
    return ADVANTAGES.get(name)


def masked_mean_std(x: jax.Array, mask: jax.Array, ddof: int = 0) -> tuple[jax.Array, jax.Array]:
    """Mean and std of x over mask (all axes); std is 0 when fewer than ddof + 1 entries are valid.

    Two passes over data shifted by one of its valid values, so equal values give exactly their value as the mean
    and exactly 0 as the std (a plain float32 mean of 100 x 0.3 is not 0.3, and (x - mean) / (std + eps) would
    turn that rounding into a constant non-zero advantage).
    """
    m = mask.astype(jnp.float32)
    n = m.sum()
    shift = jnp.where(mask, x, -jnp.inf).max()
    shift = jnp.where(n > 0, shift, 0.0)
    d = jnp.where(mask, x - shift, 0.0)
    dmean = d.sum() / jnp.maximum(n, 1.0)
    var = (jnp.square(d - dmean) * m).sum() / jnp.maximum(n - ddof, 1.0)
    return shift + dmean, jnp.where(n > ddof, jnp.sqrt(var), 0.0)


def _group_stats(values: jax.Array, valid: jax.Array, group_ids: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per-episode group mean, count and sum of squared deviations over valid episodes. values/valid/group_ids: [E].

    Two passes over values shifted by their group's largest value, so a group of equal returns has exactly
    that return as its mean and exactly 0 deviation (see `masked_mean_std`)."""
    E = values.shape[0]
    # group ids may be any int32; map them to 0..E-1 so segment sums have a static size
    _, inv = jnp.unique(group_ids, size=E, fill_value=jnp.iinfo(jnp.int32).max, return_inverse=True)
    inv = inv.reshape(E)
    w = valid.astype(jnp.float32)
    shift = jax.ops.segment_max(jnp.where(valid, values, -jnp.inf), inv, num_segments=E)[inv]
    d = jnp.where(valid, values - shift, 0.0)
    n = jax.ops.segment_sum(w, inv, num_segments=E)[inv]
    dmean = jax.ops.segment_sum(d, inv, num_segments=E)[inv] / jnp.maximum(n, 1.0)
    ssd = jax.ops.segment_sum(jnp.square(d - dmean) * w, inv, num_segments=E)[inv]
    return jnp.where(valid, shift + dmean, 0.0), n, ssd


def _episode_returns(rewards, turn_mask, gamma):
    g = discounted_returns(rewards, turn_mask, gamma)
    return g, g[:, 0], turn_mask.any(axis=1)


def _require(name: str, **arrays) -> None:
    for k, v in arrays.items():
        if v is None:
            raise ValueError(f"advantage estimator {name!r} needs {k}=...; pass it (shape [E] or [E, K])")


@register_advantage("reinforce")
def reinforce(rewards, turn_mask, *, gamma: float = 1.0, **_) -> Advantages:
    """A_t = G_t."""
    g = discounted_returns(rewards, turn_mask, gamma)
    return Advantages(g, g)


@register_advantage("rebn")
def rebn(rewards, turn_mask, *, gamma: float = 1.0, eps: float = 1e-6, **_) -> Advantages:
    """Return Batch Normalisation: A_t = (G_t - mean G) / (std G + eps) over every real turn in the batch."""
    g = discounted_returns(rewards, turn_mask, gamma)
    mean, std = masked_mean_std(g, turn_mask)
    return Advantages(jnp.where(turn_mask, (g - mean) / (std + eps), 0.0), g)


@register_advantage("rae")
def rae(rewards, turn_mask, *, role_ids=None, gamma: float = 1.0, eps: float = 1e-6, **_) -> Advantages:
    """Role-conditioned advantages (SPIRAL's RAE, as ReBN per role): A_t = (G_t - mean_r G) / (std_r G + eps), the
    statistics over every real turn of the batch's episodes of the same role r (seat of a multi-agent game). One role:
    exactly `rebn`. SPIRAL keeps an exponential moving average of each role's return across steps; jgem's estimators
    are pure functions of the batch, so the baseline is the batch's (a batch of many games estimates the same mean
    without state to checkpoint), and the scale is normalised per role as ReBN does for one."""
    _require("rae", role_ids=role_ids)
    g = discounted_returns(rewards, turn_mask, gamma)
    E = rewards.shape[0]
    roles = jnp.where(turn_mask, jnp.clip(role_ids, 0, E - 1)[:, None], E)  # E: no role (masked turns)
    per_role = lambda x, op: op(x.reshape(-1), roles.reshape(-1), num_segments=E + 1)
    # shifted by each role's largest return, so equal returns give exactly their mean and a std of exactly 0
    shift = jnp.where(turn_mask, per_role(jnp.where(turn_mask, g, -jnp.inf), jax.ops.segment_max)[roles], 0.0)
    m = turn_mask.astype(jnp.float32)
    d = jnp.where(turn_mask, g - shift, 0.0)
    n = jnp.maximum(per_role(m, jax.ops.segment_sum), 1.0)
    dmean = (per_role(d, jax.ops.segment_sum) / n)[roles]
    std = jnp.sqrt(per_role(jnp.square(d - dmean) * m, jax.ops.segment_sum) / n)[roles]
    return Advantages(jnp.where(turn_mask, (d - dmean) / (std + eps), 0.0), g)


def _grouped(name, rewards, turn_mask, group_ids, gamma, eps, mode) -> Advantages:
    _require(name, group_ids=group_ids)
    g, ret, valid = _episode_returns(rewards, turn_mask, gamma)
    mean, n, ssd = _group_stats(ret, valid, group_ids)
    if mode == "grpo":  # unbiased std as in DeepSeekMath / TRL; 0 for groups of one
        var = ssd / jnp.maximum(n - 1.0, 1.0)
        a = (ret - mean) / (jnp.where(n > 1, jnp.sqrt(var), 0.0) + eps)
    elif mode == "drgrpo":
        a = ret - mean
    else:  # rloo: R - mean of the other n-1 episodes = n / (n - 1) (R - group mean); 0 for groups of one
        a = jnp.where(n > 1, (ret - mean) * n / jnp.maximum(n - 1.0, 1.0), 0.0)
    a = jnp.where(valid, a, 0.0)
    return Advantages(jnp.where(turn_mask, a[:, None], 0.0), g)


@register_advantage("grpo")
def grpo(rewards, turn_mask, *, group_ids=None, gamma: float = 1.0, eps: float = 1e-6, **_) -> Advantages:
    """A = (R - mean_group R) / (std_group R + eps) with R = G_0, shared by every turn of the episode."""
    return _grouped("grpo", rewards, turn_mask, group_ids, gamma, eps, "grpo")


@register_advantage("drgrpo")
def drgrpo(rewards, turn_mask, *, group_ids=None, gamma: float = 1.0, **_) -> Advantages:
    """Dr. GRPO: A = R - mean_group R (no std division), shared by every turn."""
    return _grouped("drgrpo", rewards, turn_mask, group_ids, gamma, 0.0, "drgrpo")


@register_advantage("rloo")
def rloo(rewards, turn_mask, *, group_ids=None, gamma: float = 1.0, **_) -> Advantages:
    """RLOO: A = R - mean of the other episodes' R in the group, shared by every turn."""
    return _grouped("rloo", rewards, turn_mask, group_ids, gamma, 0.0, "rloo")


@register_advantage("reinforce_pp")
def reinforce_pp(
    rewards, turn_mask, *, kl=None, kl_coef: float = 0.0, gamma: float = 1.0, eps: float = 1e-6, **_
) -> Advantages:
    """REINFORCE++: rewards shaped by a KL penalty, discounted, then globally normalised.

    kl f32[E, K] is each turn's summed token KL log pi_old - log pi_ref (None: no penalty);
    r'_t = r_t - kl_coef * kl_t, G'_t its discounted return, A_t = (G'_t - mean G') / (std G' + eps).
    """
    shaped = rewards if kl is None else rewards - kl_coef * kl
    g = discounted_returns(shaped, turn_mask, gamma)
    mean, std = masked_mean_std(g, turn_mask)
    return Advantages(jnp.where(turn_mask, (g - mean) / (std + eps), 0.0), g)


@register_advantage("gae")
def gae_advantages(
    rewards,
    turn_mask,
    *,
    values=None,
    gamma: float = 1.0,
    lam: float = 0.95,
    bootstrap_values=None,
    normalize: bool = False,
    eps: float = 1e-6,
    **_,
) -> Advantages:
    """Turn-level GAE with critic values[E, K] (value at the last prompt token of each turn); returns = A + V."""
    _require("gae", values=values)
    adv, ret = gae(rewards, values, turn_mask, gamma, lam, bootstrap_values)
    if normalize:
        mean, std = masked_mean_std(adv, turn_mask)
        adv = jnp.where(turn_mask, (adv - mean) / (std + eps), 0.0)
    return Advantages(adv, ret)


def compute_advantages(name: str, rewards: jax.Array, turn_mask: jax.Array, **options) -> Advantages:
    """Look up `name` and run it (call under jax.jit with static name for a compiled version)."""
    return get_advantage_fn(name)(rewards, turn_mask, **options)
