"""Turn-level discounted returns and GAE over fixed-shape episode arrays (pure jnp).

Episodes are rows of `[E, K]` arrays (E episodes, K max turns); `turn_mask[E, K]` marks real turns, which
are left-aligned (turn 0 first). Masked turns carry no reward and contribute nothing.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _reverse_scan(fn, init: jax.Array, xs: tuple[jax.Array, ...]) -> jax.Array:
    """Scan `fn(carry, x) -> carry` from the last turn to the first over axis 1; returns carries [E, K]."""
    xs_t = tuple(jnp.swapaxes(x, 0, 1) for x in xs)  # [K, E]

    def step(carry, x):
        new = fn(carry, x)
        return new, new

    _, ys = jax.lax.scan(step, init, xs_t, reverse=True)
    return jnp.swapaxes(ys, 0, 1)


def discounted_returns(rewards: jax.Array, turn_mask: jax.Array, gamma: float = 1.0) -> jax.Array:
    """G[e, t] = sum_{s >= t} gamma^(s - t) r[e, s] over real turns; 0 on masked turns.

    rewards f32[E, K], turn_mask bool[E, K] -> returns f32[E, K].
    """
    r = jnp.where(turn_mask, rewards, 0.0).astype(jnp.float32)
    m = turn_mask.astype(jnp.float32)
    g = _reverse_scan(lambda carry, x: x[0] + gamma * carry * x[1], jnp.zeros(r.shape[0], jnp.float32), (r, m))
    return g * m


def gae(
    rewards: jax.Array,
    values: jax.Array,
    turn_mask: jax.Array,
    gamma: float = 1.0,
    lam: float = 1.0,
    bootstrap_values: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation at turn level.

    delta_t = r_t + gamma V_{t+1} - V_t, with V after the last real turn = bootstrap_values[e] (0: terminal);
    A_t = delta_t + gamma lam A_{t+1}. Returns (advantages f32[E, K], returns = A + V f32[E, K]), 0 on masked turns.
    """
    m = turn_mask.astype(jnp.float32)
    r = jnp.where(turn_mask, rewards, 0.0).astype(jnp.float32)
    v = jnp.where(turn_mask, values, 0.0).astype(jnp.float32)
    E, K = r.shape
    boot = jnp.zeros((E,), jnp.float32) if bootstrap_values is None else bootstrap_values.astype(jnp.float32)
    # next value: V_{t+1} if turn t+1 is real, else the bootstrap value (for the last real turn)
    v_next_raw = jnp.concatenate([v[:, 1:], jnp.zeros((E, 1), jnp.float32)], axis=1)
    m_next = jnp.concatenate([m[:, 1:], jnp.zeros((E, 1), jnp.float32)], axis=1)
    v_next = m_next * v_next_raw + (1.0 - m_next) * boot[:, None]
    delta = (r + gamma * v_next - v) * m
    adv = _reverse_scan(
        lambda carry, x: x[0] + gamma * lam * carry * x[1], jnp.zeros((E,), jnp.float32), (delta, m_next)
    )
    adv = adv * m
    return adv, (adv + v) * m
