"""One decode step's draw: logits -> (token, behaviour log-prob), as the rollout engine's decode chunks take it.

The log-prob is of the behaviour policy: log-softmax of logits / temperature, *before* top-p / top-k truncation
(what `jgem.models.head.token_logprobs(..., temperature=t)` recomputes for the learner).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array
__all__ = ["first_argmax", "sample_logits"]


def first_argmax(x: Array, top: Array | None = None, axis: int = -1) -> Array:
    """jnp.argmax(x, axis) (the first index of the max) for rows without NaN, as two plain reductions: XLA:CPU's
    fused (value, index) argmax reduce is 4-6x slower (2.4 vs 0.4 ms for [32, 32000]). `top`: the max along
    `axis`, if known (kept as a size-1 axis). Indices are exact in float32 up to 2**24."""
    axis = axis % x.ndim
    top = jnp.max(x, axis=axis, keepdims=True) if top is None else top
    iota = jax.lax.broadcasted_iota(jnp.float32, x.shape, axis)
    idx = jnp.min(jnp.where(x == top, iota, jnp.inf), axis=axis)
    return jnp.minimum(idx, x.shape[axis] - 1).astype(jnp.int32)  # a NaN row (no index matches) gives the last


def sample_logits(
    logits: Array, rng: Array, temperature: Array, top_p: Array, top_k: Array, greedy: Array
) -> tuple[Array, Array]:
    """logits f32[B,V] -> (token int32[B], behaviour log-prob f32[B]). The sampling settings are traced scalars
    (changing them compiles nothing).

    `rng`: one key for the whole batch, or a key per row ([B]; what the engine passes, a function of (episode,
    turn, index) only, so a row's draw does not depend on the batch it was decoded in)."""
    scaled = logits / jnp.maximum(temperature, 1e-6)
    top = jnp.max(scaled, axis=1, keepdims=True)
    lse = top[:, 0] + jnp.log(jnp.sum(jnp.exp(scaled - top), axis=1))  # the log-softmax's normaliser

    def truncate(x):
        srt = -jnp.sort(-x, axis=-1)  # descending
        probs = jax.nn.softmax(srt, axis=-1)
        keep = (jnp.cumsum(probs, axis=-1) - probs) < top_p
        keep &= (top_k <= 0) | (jnp.arange(x.shape[-1]) < top_k)
        thr = jnp.min(jnp.where(keep, srt, jnp.inf), axis=-1, keepdims=True)
        return jnp.where(x >= thr, x, -jnp.inf)

    def sample(x):
        x = jax.lax.cond((top_p < 1.0) | (top_k > 0), truncate, lambda y: y, x)
        # jax.random.categorical's draw (argmax of x plus Gumbel noise), with `first_argmax`: 3x faster on CPU.
        if rng.ndim == 0:
            noise = jax.random.gumbel(rng, x.shape, x.dtype)
        else:
            noise = jax.vmap(lambda k: jax.random.gumbel(k, x.shape[1:], x.dtype))(rng)
        return first_argmax(x + noise)

    # A real branch: greedy decoding skips the sort and the random bits ([B,V] each step).
    tok = jax.lax.cond(greedy, lambda x: first_argmax(x, top), sample, scaled)
    return tok, jnp.take_along_axis(scaled, tok[:, None], axis=1)[:, 0] - lse
