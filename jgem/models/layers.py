"""Decoder building blocks: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU MLP, one block.

Shapes: B batch, T query length, S key length (cache slots), D hidden, N query heads, K kv heads,
G = N // K heads per group, H head dim, F mlp width.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jgem.models.config import ModelConfig
from jgem.models.platform import platform

Array = jax.Array
_NEG = -0.7 * float(np.finfo(np.float32).max)  # masked score; finite so fully masked rows stay NaN-free


def param(
    rngs: nnx.Rngs | None,
    shape: tuple[int, ...],
    names: tuple[str | None, ...],
    dtype,
    *,
    std: float = 0.02,
    value: float | None = None,
) -> nnx.Param:
    """A parameter with logical axis names (`out_sharding`), which sharding/rules.py maps to mesh axes."""
    if value is not None:
        x = jnp.full(shape, value, dtype)
    else:
        x = (std * jax.random.normal(rngs.params(), shape, jnp.float32)).astype(dtype)
    # eager_sharding=False: build without a mesh; placement is decided later from the names.
    return nnx.Param(x, out_sharding=names, eager_sharding=False)


class RMSNorm(nnx.Module):
    def __init__(self, dim: int, eps: float, names: tuple[str | None, ...], cfg: ModelConfig):
        self.scale = param(None, (dim,), names, cfg.param_dtype, value=1.0)
        self.eps = eps

    def __call__(self, x: Array) -> Array:
        x32 = x.astype(jnp.float32)
        x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return self.scale[...].astype(x.dtype) * x32.astype(x.dtype)


def rope_inv_freq(cfg: ModelConfig) -> np.ndarray:
    """inv_freq[H/2] in float32, with Llama 3 scaling when configured (as transformers computes it)."""
    h = cfg.head_dim
    inv = (1.0 / (cfg.rope_theta ** (np.arange(0, h, 2, dtype=np.float32) / np.float32(h)))).astype(np.float32)
    s = cfg.rope_scaling
    if s is None:
        return inv
    low_wl = s.original_max_position_embeddings / s.low_freq_factor
    high_wl = s.original_max_position_embeddings / s.high_freq_factor
    wl = 2 * math.pi / inv
    scaled = np.where(wl > low_wl, inv / s.factor, inv)
    smooth = (s.original_max_position_embeddings / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = ~(wl < high_wl) & ~(wl > low_wl)
    return np.where(medium, smoothed, scaled).astype(np.float32)


def rope_tables(positions: Array, inv_freq: np.ndarray, dtype) -> tuple[Array, Array]:
    """positions[B,T] -> (cos, sin)[B,T,H] in `dtype` (angles computed in float32).

    On CPU the tables are computed once, inside a conditional: XLA:CPU would otherwise fuse cos and sin into each
    layer's rotation and evaluate them once per head and layer (the tables broadcast over the heads; an
    optimization_barrier does not stop that fusion on CPU). Measured there: the 100m preset's prefill at batch 32
    spent 7.5 ms per layer in the fused rotation of q."""

    def tables(p: Array) -> tuple[Array, Array]:
        freqs = p.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)[None, None, :]
        emb = jnp.concatenate([freqs, freqs], axis=-1)
        return jnp.cos(emb).astype(dtype), jnp.sin(emb).astype(dtype)

    if platform() != "cpu":
        return tables(positions)
    # Both branches are the same computation; the predicate is only there to make it a runtime conditional.
    return jax.lax.cond(jnp.all(positions >= 0), tables, tables, positions)


def mask_bias(mask: Array) -> Array:
    """mask bool[B,T,S] -> the additive attention bias f32[B,T,S]: 0 where visible, a large finite negative where
    masked (fully masked rows stay NaN-free). Added to the scores rather than selected: on XLA:CPU the add fuses
    into the scores' dot, where a select is a separate pass (about 1 ms of a 30 ms decode step of the 100m preset
    at batch 32)."""
    return jnp.where(mask, 0.0, _NEG).astype(jnp.float32)


def apply_rope(x: Array, cos: Array, sin: Array) -> Array:
    """x[B,T,N,H] rotated by (cos, sin)[B,T,H] (the "rotate half" layout of HF checkpoints)."""
    x1, x2 = jnp.split(x, 2, axis=-1)
    rot = jnp.concatenate([-x2, x1], axis=-1)
    return x * cos[:, :, None, :] + rot * sin[:, :, None, :]


@jax.custom_vjp
def _matmul_cpu(x: Array, w: Array) -> Array:
    return x @ w


def _matmul_cpu_fwd(x: Array, w: Array):
    return x @ w, (x, w)


def _matmul_cpu_bwd(res, g: Array):
    # Autodiff's weight gradient x^T g contracts x's leading axis; XLA:CPU then runs it as a slow Eigen dot with a
    # transposed copy of g (about 1 s of the 100m train step). A materialised x^T (the barrier stops XLA folding
    # the transpose back into the dot) makes it a plain row-major GEMM that YNNPACK takes.
    x, w = res
    xt = jax.lax.optimization_barrier(x.T)
    return g @ w.T, (xt @ g).astype(w.dtype)


_matmul_cpu.defvjp(_matmul_cpu_fwd, _matmul_cpu_bwd)


def dense(x: Array, w: Array) -> Array:
    """x[..., D] @ w[D, ...] -> [..., *w.shape[1:]] as one 2-D matmul (einsum layouts cost XLA:CPU a weight
    transpose); on CPU with a backward pass whose weight gradient is a plain GEMM (`_matmul_cpu_bwd`)."""
    lead, d = x.shape[:-1], x.shape[-1]
    x2, w2 = x.reshape(-1, d), w.reshape(d, -1)
    y = _matmul_cpu(x2, w2) if platform() == "cpu" else x2 @ w2
    return y.reshape(*lead, *w.shape[1:])


# Projection weights, by name, and how many of their leading axes are inputs ([in..., out...] as stored).
PROJECTIONS = {"q": 1, "k": 1, "v": 1, "o": 2, "gate": 1, "up": 1, "down": 1}
_OUT_IN = contextvars.ContextVar("jgem_out_in_weights", default=False)


@contextlib.contextmanager
def out_in_weights() -> Iterator[None]:
    """While tracing inside this, every projection weight is read as 2-D [out, in] (`to_out_in`), not as stored.

    The sampler's CPU decode uses it: at a few rows per step the weight is the streamed operand, and XLA:CPU runs
    [out, in] @ x^T 13-30% faster than x @ [in, out] for 8-128 rows (scripts/decode_dot_bound.py)."""
    token = _OUT_IN.set(True)
    try:
        yield
    finally:
        _OUT_IN.reset(token)


def out_in_active() -> bool:
    """Whether the current trace reads weights as [out, in] (inside `out_in_weights`)."""
    return _OUT_IN.get()


def to_out_in(w: Array, n_in: int) -> Array:
    """A stored projection [in..., out...] (`n_in` input axes) as a 2-D [out, in] array (a transposed copy)."""
    k = math.prod(w.shape[:n_in])
    return w.reshape(k, -1).T


def dense_out_in(x: Array, wt: Array, preferred_element_type=None, *, out_major: bool = False) -> Array:
    """x[..., K] @ wt[N, K]^T -> [..., N], computed as wt @ x^T with both transposes materialised (the barriers
    stop XLA folding them into the dot, where they would give a slow transposed-operand dot on CPU).
    `out_major`: return the product as computed, [N, rows] (x's leading axes flattened), with no transpose."""
    lead = x.shape[:-1]
    xt = jax.lax.optimization_barrier(x.reshape(-1, x.shape[-1]).T)
    yt = jax.lax.optimization_barrier(jnp.matmul(wt, xt, preferred_element_type=preferred_element_type))
    return yt if out_major else yt.T.reshape(*lead, wt.shape[0])


def project(x: Array, p: nnx.Param) -> Array:
    """x[..., K] times the projection `p`, stored [in..., out...] and read as [K, N] -> [..., N] in x's dtype
    (`dense`); inside `out_in_weights`, `p` holds its [N, K] copy (`to_out_in`) instead (`dense_out_in`)."""
    w = p[...].astype(x.dtype)
    if out_in_active():
        return dense_out_in(x, w)
    return dense(x, w.reshape(x.shape[-1], -1))


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        d, n, k, h, pd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.param_dtype
        self.cfg = cfg
        self.q = param(rngs, (d, n, h), ("embed", "heads", "head_dim"), pd)
        self.k = param(rngs, (d, k, h), ("embed", "kv_heads", "head_dim"), pd)
        self.v = param(rngs, (d, k, h), ("embed", "kv_heads", "head_dim"), pd)
        self.o = param(rngs, (n, h, d), ("heads", "head_dim", "embed"), pd)
        if cfg.qkv_bias:
            self.q_bias = param(rngs, (n, h), ("heads", "head_dim"), pd)
            self.k_bias = param(rngs, (k, h), ("kv_heads", "head_dim"), pd)
            self.v_bias = param(rngs, (k, h), ("kv_heads", "head_dim"), pd)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(h, cfg.rms_norm_eps, ("head_dim",), cfg)
            self.k_norm = RMSNorm(h, cfg.rms_norm_eps, ("head_dim",), cfg)

    def __call__(
        self, x: Array, cos: Array, sin: Array, bias: Array, kv: tuple[Array, Array] | None, end: Array | None
    ) -> tuple[Array, tuple[Array, Array] | None]:
        """x[B,T,D], bias f32[B,T,S] (`mask_bias`) -> out[B,T,D]; with a cache kv = (keyT[B,K,H,S], value[B,K,S,H]),
        the new keys and values go to slots [end, end+T) for a scalar `end`, or to slot end[b,t] for an int32[B,T]
        `end` (the rollout engine's slot cache; slots >= S are dropped)."""
        dt = x.dtype
        b, t = x.shape[:2]
        n, kh, h = self.cfg.num_heads, self.cfg.num_kv_heads, self.cfg.head_dim
        q = project(x, self.q).reshape(b, t, n, h)  # "BTD,DNH->BTNH"
        k = project(x, self.k).reshape(b, t, kh, h)  # "BTD,DKH->BTKH"
        v = project(x, self.v).reshape(b, t, kh, h)
        if self.cfg.qkv_bias:
            q = q + self.q_bias[...].astype(dt)
            k = k + self.k_bias[...].astype(dt)
            v = v + self.v_bias[...].astype(dt)
        if self.cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # Cache layouts keyT[B,K,H,S], value[B,K,S,H]: both attention matmuls are plain (B,K)-batched GEMMs
        # with no transposed operand, and the scores reduce over a non-minor axis (4x faster on XLA CPU).
        if kv is not None and end.ndim:  # per-token slots: scatter [B,T,K,H] rows into keyT[B,K,H,S], value[B,K,S,H]
            ck, cv = kv
            rows = jnp.arange(b)[:, None]
            ck = ck.at[rows, :, :, end].set(k.astype(ck.dtype), mode="drop")
            cv = cv.at[rows, :, end, :].set(v.astype(cv.dtype), mode="drop")
            kv = (ck, cv)
            k, v = ck.astype(dt), cv.astype(dt)
        else:
            k, v = k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)
            if kv is not None:
                ck, cv = kv
                zero = jnp.zeros((), jnp.int32)
                ck = jax.lax.dynamic_update_slice(ck, k.astype(ck.dtype), (zero, zero, zero, end))
                cv = jax.lax.dynamic_update_slice(cv, v.astype(cv.dtype), (zero, zero, end, zero))
                kv = (ck, cv)
                k, v = ck.astype(dt), cv.astype(dt)
        qm = q.reshape(b, t, kh, n // kh, h).transpose(0, 2, 3, 1, 4).reshape(b, kh, -1, h)  # [B,K,G*T,H]
        scores = jnp.einsum("BKQH,BKHS->BKQS", qm, k, preferred_element_type=jnp.float32) / math.sqrt(h)
        scores = scores.reshape(b, kh, n // kh, t, -1)  # [B,K,G,T,S]
        scores = scores + bias[:, None, None, :, :]  # an add, not a select: XLA:CPU fuses it into the scores' dot
        probs = jax.nn.softmax(scores, axis=-1).astype(dt)
        out = jnp.einsum("BKQS,BKSH->BKQH", probs.reshape(b, kh, -1, probs.shape[-1]), v)
        out = out.reshape(b, kh, n // kh, t, h).transpose(0, 3, 1, 2, 4)  # [B,T,K,G,H]
        return project(out.reshape(b, t, n * h), self.o), kv  # "BTNH,NHD->BTD" as one [B*T, N*H] x [N*H, D] matmul


class MLP(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        d, f, pd = cfg.hidden_size, cfg.intermediate_size, cfg.param_dtype
        self.gate = param(rngs, (d, f), ("embed", "mlp"), pd)
        self.up = param(rngs, (d, f), ("embed", "mlp"), pd)
        self.down = param(rngs, (f, d), ("mlp", "embed"), pd)

    def __call__(self, x: Array) -> Array:
        return project(jax.nn.silu(project(x, self.gate)) * project(x, self.up), self.down)


class Block(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ("embed",), cfg)
        self.attn = Attention(cfg, rngs=rngs)
        self.mlp_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ("embed",), cfg)
        self.mlp = MLP(cfg, rngs=rngs)

    def __call__(self, x, cos, sin, bias, kv, end):
        a, kv = self.attn(self.attn_norm(x), cos, sin, bias, kv, end)
        x = x + a
        return x + self.mlp(self.mlp_norm(x)), kv
