"""The model's vocab head as the learner reads it: per-token log-probs and entropy, chunked over tokens, with a
hand-written backward pass.

`token_logprobs(model, tokens, positions, ...)` is the teacher-forced forward of every learner and reference
policy: log p(tokens[t] | tokens[<t]) under a `Transformer`. Its vocab projection, `vocab_logprobs(h, targets, w,
...)`, is what autodiff of `log_softmax(h @ W^T / temperature)` would give, with memory O(chunk * V) instead of
O(N * V): the forward pass keeps only each token's log-normaliser and entropy, and the backward pass recomputes one
chunk of logits at a time. Writing the backward by hand (rather than `jax.checkpoint` around the chunk) saves work
autodiff cannot see is unneeded:

- one fused pass gives the logits' cotangent `g_lp * (onehot - p)`, with no scatter and no transposed copy of
  the [chunk, V] block for the weight gradient;
- the entropy's gradient is computed only when something differentiates the entropy (symbolic zeros): the
  learner reports entropy as a metric and adds it to the loss only with an entropy bonus.

`keep_logits=True` trades the memory back for speed: the forward pass keeps the logits and the backward pass
skips its vocab matmul (the learner does so when they fit in `LearnerConfig.keep_logits_mb`).
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

if TYPE_CHECKING:
    from jgem.models.transformer import Routing, Transformer

Array = jax.Array
__all__ = ["token_logprobs", "token_logprobs_routed", "vocab_logprobs"]


def token_logprobs(
    model: Transformer,
    tokens: Array,
    positions: Array,
    segment_ids: Array | None = None,
    *,
    chunk_size: int = 1024,
    temperature: float = 1.0,
    keep_logits_mb: float = 0.0,
    adapter_ids: Array | None = None,
) -> tuple[Array, Array]:
    """logprobs, entropy f32[B,T]: logprobs[:, t] = log p(tokens[:, t] | tokens[:, <t]); entropy[:, t] is the
    entropy of that predictive distribution. Both are 0 at t=0, at segment starts and on padding (segment 0).
    With `temperature` t, of softmax(logits / t): the behaviour log-probs the rollout engine records (before
    top-p / top-k truncation, `jgem.rollout.sampling.sample_logits`).

    The vocab projection runs over chunks of `chunk_size` tokens, recomputed in the backward pass
    (`vocab_logprobs`), so memory stays O(chunk_size * V) whatever B*T is; unless all B*T x V float32 logits
    take at most `keep_logits_mb` MB: then they are computed in one piece and the backward pass reuses them.
    Differentiable. `adapter_ids` i32[B, T]: each token's LoRA adapter (policy), for a model with several.
    """
    lp, ent, _ = token_logprobs_routed(
        model,
        tokens,
        positions,
        segment_ids,
        chunk_size=chunk_size,
        temperature=temperature,
        keep_logits_mb=keep_logits_mb,
        adapter_ids=adapter_ids,
    )
    return lp, ent


def token_logprobs_routed(
    model: Transformer,
    tokens: Array,
    positions: Array,
    segment_ids: Array | None = None,
    *,
    chunk_size: int = 1024,
    temperature: float = 1.0,
    keep_logits_mb: float = 0.0,
    adapter_ids: Array | None = None,
    expert_ids: Array | None = None,
) -> tuple[Array, Array, Routing]:
    """`token_logprobs` and the forward's `Routing` (a mixture of experts' sparse layers: the experts each token
    ran, the router's own top-k, the load-balancing statistics; empty for a dense model). `expert_ids`
    int32[M, B, T, k]: a recorded routing to replay (`Transformer.hidden_routed`; -1: the router's own choice)."""
    h, _, routing = model.hidden_routed(
        tokens, positions, segment_ids=segment_ids, adapter_ids=adapter_ids, expert_ids=expert_ids
    )
    b, t, d = h.shape
    h_prev = jnp.concatenate([jnp.zeros((b, 1, d), h.dtype), h[:, :-1]], axis=1)  # h_prev[t] predicts tokens[t]
    first = jnp.arange(t)[None, :] == 0
    if segment_ids is None:
        valid = jnp.broadcast_to(~first, (b, t))
    else:
        prev_seg = jnp.concatenate([jnp.zeros((b, 1), segment_ids.dtype), segment_ids[:, :-1]], axis=1)
        valid = ~first & (segment_ids == prev_seg) & (segment_ids != 0)
    n = b * t
    keep = n * model.cfg.vocab_size * 4 <= keep_logits_mb * 2**20
    c = n if keep else max(1, min(chunk_size, n))  # kept logits need no chunking: one bigger matmul
    chunks = math.ceil(n / c)
    hf = jnp.pad(h_prev.reshape(n, d), ((0, chunks * c - n), (0, 0)))
    tf = jnp.pad(tokens.reshape(n), (0, chunks * c - n))
    w, vocab_major = model.head_weight(h.dtype)
    lp, ent = vocab_logprobs(hf, tf, w, temperature, chunk=c, vocab_major=vocab_major, keep_logits=keep)
    lp = lp[:n].reshape(b, t)
    ent = ent[:n].reshape(b, t)
    return jnp.where(valid, lp, 0.0), jnp.where(valid, ent, 0.0), routing


def vocab_logprobs(
    h: Array,
    targets: Array,
    w: Array,
    temperature: Array | float,
    *,
    chunk: int,
    vocab_major: bool,
    keep_logits: bool = False,
) -> tuple[Array, Array]:
    """h[N,D], targets int[N], w the head ([V,D] when `vocab_major`, else [D,V]) -> (logprob, entropy) f32[N]
    of the softmax of h @ head / temperature. N must be a multiple of `chunk`. Differentiable in h, w and
    temperature. With `keep_logits` the forward pass keeps all N x V logits (f32) for the backward pass instead
    of recomputing them: one vocab matmul less, for N * V * 4 bytes of memory."""
    n = h.shape[0]
    if n % chunk:
        raise ValueError(f"vocab_logprobs: {n} tokens are not a multiple of chunk {chunk}")
    return _vocab_logprobs(h, targets, w, jnp.asarray(temperature, jnp.float32), chunk, vocab_major, keep_logits)


def _logits(hc: Array, w: Array, inv_t: Array, vocab_major: bool) -> Array:
    """hc[C,D] -> f32[C,V] logits / temperature."""
    dims = (((1,), (1,)), ((), ())) if vocab_major else (((1,), (0,)), ((), ()))
    return jax.lax.dot_general(hc, w, dims, preferred_element_type=jnp.float32) * inv_t


def _chunk_fwd(hc, tc, w, inv_t, vocab_major):
    z = _logits(hc, w, inv_t, vocab_major)
    m = jnp.max(z, axis=-1, keepdims=True)
    e = jnp.exp(z - m)
    s = jnp.sum(e, axis=-1)
    lse = m[:, 0] + jnp.log(s)
    zt = jnp.take_along_axis(z, tc[:, None], axis=-1)[:, 0]
    ent = lse - jnp.sum(e * z, axis=-1) / s  # H = lse - E_p[z]
    return zt - lse, ent, lse, z


def _map_chunks(fn, chunk, *xs):
    """fn over [C]-row chunks of xs (leading axis N), results stacked back to N rows; no loop for one chunk."""
    k = xs[0].shape[0] // chunk
    if k == 1:
        return fn(*xs)
    split = [x.reshape(k, chunk, *x.shape[1:]) for x in xs]
    out = jax.lax.map(lambda a: fn(*a), tuple(split))
    return jax.tree.map(lambda y: y.reshape(k * chunk, *y.shape[2:]), out)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6))
def _vocab_logprobs(h, targets, w, temperature, chunk, vocab_major, keep_logits):
    fwd = lambda hc, tc: _chunk_fwd(hc, tc, w, 1.0 / temperature, vocab_major)[:2]
    return _map_chunks(fwd, chunk, h, targets)


def _fwd(h, targets, w, temperature, chunk, vocab_major, keep_logits):
    h, targets, w, temperature = (x.value for x in (h, targets, w, temperature))

    def fwd(hc, tc):
        lp, ent, lse, z = _chunk_fwd(hc, tc, w, 1.0 / temperature, vocab_major)
        return (lp, ent, lse, z) if keep_logits else (lp, ent, lse)

    lp, ent, lse, *z = _map_chunks(fwd, chunk, h, targets)
    return (lp, ent), (h, targets, w, temperature, lse, ent, z[0] if keep_logits else None)


def _bwd(chunk, vocab_major, keep_logits, res, cts):
    h, targets, w, temperature, lse, ent, logits = res
    g_lp, g_ent = cts
    zero = lambda g: isinstance(g, jax.custom_derivatives.SymbolicZero)
    n = h.shape[0]
    g_lp = jnp.zeros((n,), jnp.float32) if zero(g_lp) else g_lp
    ent_grad = not zero(g_ent)
    inv_t = 1.0 / temperature
    cdims_h = (((1,), (0,)), ((), ())) if vocab_major else (((1,), (1,)), ((), ()))  # gz[C,V] . w -> [C,D]
    wdims = (((0,), (0,)), ((), ()))  # gz[C,V]^T h[C,D] -> [V,D], or h^T gz -> [D,V]

    def grads(hc, tc, lse_c, ent_c, glp_c, gent_c, z=None):
        z = _logits(hc, w, inv_t, vocab_major) if z is None else z
        p = jnp.exp(z - lse_c[:, None])
        onehot = jnp.arange(z.shape[-1], dtype=tc.dtype)[None, :] == tc[:, None]
        # d lp / dz = onehot - p;  d H / dz = -p (z - lse + H)
        gz = jnp.where(onehot, glp_c[:, None], 0.0) - glp_c[:, None] * p
        if ent_grad:
            gz = gz - gent_c[:, None] * p * (z - lse_c[:, None] + ent_c[:, None])
        g_t = -jnp.sum(gz * z, axis=-1) * inv_t  # z = (h w) / t  =>  dz/dt = -z / t
        gz = (gz * inv_t).astype(hc.dtype)
        dh = jax.lax.dot_general(gz, w, cdims_h, preferred_element_type=jnp.float32).astype(hc.dtype)
        if vocab_major:
            dw = jax.lax.dot_general(gz, hc, wdims, preferred_element_type=jnp.float32)
        else:
            dw = jax.lax.dot_general(hc, gz, wdims, preferred_element_type=jnp.float32)
        return dh, dw, g_t

    g_ent_arr = jnp.zeros((n,), jnp.float32) if not ent_grad else g_ent
    k = n // chunk
    if k == 1:
        dh, dw, g_t = grads(h, targets, lse, ent, g_lp, g_ent_arr, logits)
        g_temp = jnp.sum(g_t)
    else:
        rows = (h, targets, lse, ent, g_lp, g_ent_arr) + ((logits,) if keep_logits else ())
        xs = tuple(x.reshape(k, chunk, *x.shape[1:]) for x in rows)

        def body(carry, x):
            dw_acc, gt_acc = carry
            dh_c, dw_c, gt_c = grads(*x)
            return (dw_acc + dw_c, gt_acc + jnp.sum(gt_c)), dh_c

        (dw, g_temp), dh = jax.lax.scan(body, (jnp.zeros(w.shape, jnp.float32), jnp.zeros((), jnp.float32)), xs)
        dh = dh.reshape(n, -1)
    t_zero = np.zeros(targets.shape, jax.dtypes.float0)
    return dh, t_zero, dw.astype(w.dtype), g_temp


_vocab_logprobs.defvjp(_fwd, _bwd, symbolic_zeros=True)
