"""Decoder building blocks: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU MLP (or a mixture of
experts, jgem.models.moe), one block.

Shapes: B batch, T query length, S key length (cache slots), D hidden, N query heads, K kv heads,
G = N // K heads per group, H head dim, F mlp width.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jgem.models import cpu
from jgem.models.attention import Mask, attention
from jgem.models.config import ModelConfig
from jgem.models.moe import MoE
from jgem.models.params import param
from jgem.sharding.rules import constrain

Array = jax.Array
# Activation sharding (logical names, `constrain`; a no-op without a mesh): batch over data/fsdp, heads over tensor.
ACTIVATIONS = ("batch", None, None)  # [B,T,D]
HEADS = ("batch", None, "heads", None)  # [B,T,N,H]
KV_HEADS = ("batch", None, "kv_heads", None)  # [B,T,K,H]
LORA_AXIS = "lora"  # the logical name of a LoRA adapter's rank axis (replicated: sharding/rules.py)
ADAPTERS_AXIS = "adapters"  # the logical name of the policies' axis of stacked adapters (replicated)


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
    """positions[B,T] -> (cos, sin)[B,T,H] in `dtype` (angles computed in float32)."""
    freqs = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)[None, None, :]
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb).astype(dtype), jnp.sin(emb).astype(dtype)


def apply_rope(x: Array, cos: Array, sin: Array) -> Array:
    """x[B,T,N,H] rotated by (cos, sin)[B,T,H] (the "rotate half" layout of HF checkpoints)."""
    x1, x2 = jnp.split(x, 2, axis=-1)
    rot = jnp.concatenate([-x2, x1], axis=-1)
    return x * cos[:, :, None, :] + rot * sin[:, :, None, :]


def dense(x: Array, w: Array) -> Array:
    """x[..., D] @ w[D, ...] -> [..., *w.shape[1:]] as one 2-D matmul."""
    lead, d = x.shape[:-1], x.shape[-1]
    x2, w2 = x.reshape(-1, d), w.reshape(d, -1)
    y = cpu.matmul(x2, w2) if cpu.cpu_tuning("matmul_vjp") else x2 @ w2
    return y.reshape(*lead, *w.shape[1:])


class MultiLoRA(nnx.Module):
    """Several policies' LoRA adapters on one projection: A[P, K, rank] and B[P, rank, N] (`nnx.LoRAParam`s, B zero
    at init). Each token of x[B, T, K] runs with the adapter its one-hot `select[B, T or 1, P]` names (per token, or
    one per row): (x A_p) B_p, computed for every p at once as x [A_0 .. A_P-1] ([K, P * rank]), the other adapters'
    columns zeroed per token, then times [B_0; ..; B_P-1] ([P * rank, N]). Two dense matmuls whatever the mix (no
    gather of per-row weights, nothing ragged): P times the adapters' FLOPs, rank (1/K + 1/N) of the projection's.
    A projection's output for a token depends only on that token's input and adapter, so a batch of mixed policies
    gives each row exactly what a batch of its policy alone gives, and an adapter's gradient comes only from the
    sequences of its policy, as long as every sequence (attention segment) is one policy's and every adapter is
    finite (a zeroed column still multiplies a NaN)."""

    def __init__(self, k: int, rank: int, n: int, adapters: int, names: tuple[str, str], *, dtype, rngs: nnx.Rngs):
        init = jax.nn.initializers.he_uniform(in_axis=-2, out_axis=-1, batch_axis=(0,))  # nnx.LoRA's, per adapter
        meta = lambda axes: {"out_sharding": (ADAPTERS_AXIS, *axes), "eager_sharding": False}
        self.lora_a = nnx.LoRAParam(
            init(rngs.params(), (adapters, k, rank), jnp.float32), **meta((names[0], LORA_AXIS))
        )
        self.lora_b = nnx.LoRAParam(jnp.zeros((adapters, rank, n), jnp.float32), **meta((LORA_AXIS, names[1])))
        self.dtype = dtype

    def __call__(self, x: Array, select: Array | None) -> Array:
        if select is None:
            raise ValueError("a model with several adapters needs each row's adapter (adapter_ids)")
        a, b = self.lora_a[...].astype(self.dtype), self.lora_b[...].astype(self.dtype)
        p, k, r = a.shape
        h = dense(x, a.transpose(1, 0, 2).reshape(k, p * r))  # [B, T, P * rank]
        lead = h.shape[:-1]
        h = (h.reshape(*lead, p, r) * select.astype(h.dtype)[..., None]).reshape(*lead, p * r)
        return dense(h, b.reshape(p * r, -1))


def project(
    x: Array, p: nnx.Param, lora: nnx.LoRA | MultiLoRA | None = None, scale: float = 1.0, select: Array | None = None
) -> Array:
    """x[..., K] times the projection `p`, stored [in..., out...] and read as [K, N] -> [..., N] in x's dtype.
    With a LoRA adapter, plus scale * (x A) B (A[K, rank], B[rank, N]); with several (`MultiLoRA`), each row's
    by `select` (one-hot [B, T or 1, adapters])."""
    y = dense(x, p[...].astype(x.dtype).reshape(x.shape[-1], -1))
    if lora is None:
        return y
    return y + scale * (lora(x, select) if isinstance(lora, MultiLoRA) else lora(x))


def adapter(
    cfg: ModelConfig, target: str, shape: tuple[int, int], names: tuple[str, str], rngs: nnx.Rngs
) -> nnx.LoRA | MultiLoRA | None:
    """The LoRA adapter of projection `target` (read as [K, N] = `shape`, logical axes `names`) when `cfg.lora`
    puts one there, else None: A[K, rank] He-uniform, B[rank, N] zero, so the adapted model starts equal to its
    base; float32 (they are small, and Adam's small steps would vanish in bfloat16), computed in cfg.dtype. With
    several adapters (`lora.adapters`, one per policy), a `MultiLoRA` of them."""
    lora = cfg.lora
    if not lora.rank or target not in lora.targets:
        return None
    if lora.adapters > 1:
        return MultiLoRA(shape[0], lora.rank, shape[1], lora.adapters, names, dtype=jnp.dtype(cfg.dtype), rngs=rngs)
    meta = lambda axes: {"out_sharding": axes, "eager_sharding": False}
    return nnx.LoRA(
        shape[0],
        lora.rank,
        shape[1],
        dtype=jnp.dtype(cfg.dtype),
        param_dtype=jnp.float32,
        rngs=rngs,
        a_metadata=meta((names[0], LORA_AXIS)),
        b_metadata=meta((LORA_AXIS, names[1])),
    )


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, lora_rngs: nnx.Rngs):
        d, n, k, h, pd = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.param_dtype
        self.cfg = cfg
        self.q = param(rngs, (d, n, h), ("embed", "heads", "head_dim"), pd)
        self.k = param(rngs, (d, k, h), ("embed", "kv_heads", "head_dim"), pd)
        self.v = param(rngs, (d, k, h), ("embed", "kv_heads", "head_dim"), pd)
        self.o = param(rngs, (n, h, d), ("heads", "head_dim", "embed"), pd)
        # the adapters' [K, N] axes: the flattened heads take the heads' name (tensor-sharded in whole heads)
        self.q_lora = adapter(cfg, "q", (d, n * h), ("embed", "heads"), lora_rngs)
        self.k_lora = adapter(cfg, "k", (d, k * h), ("embed", "kv_heads"), lora_rngs)
        self.v_lora = adapter(cfg, "v", (d, k * h), ("embed", "kv_heads"), lora_rngs)
        self.o_lora = adapter(cfg, "o", (n * h, d), ("heads", "embed"), lora_rngs)
        if cfg.qkv_bias:
            self.q_bias = param(rngs, (n, h), ("heads", "head_dim"), pd)
            self.k_bias = param(rngs, (k, h), ("kv_heads", "head_dim"), pd)
            self.v_bias = param(rngs, (k, h), ("kv_heads", "head_dim"), pd)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(h, cfg.rms_norm_eps, ("head_dim",), cfg)
            self.k_norm = RMSNorm(h, cfg.rms_norm_eps, ("head_dim",), cfg)

    def __call__(
        self,
        x: Array,
        cos: Array,
        sin: Array,
        mask: Mask,
        kv: tuple[Array, Array] | None,
        slots: Array | None,
        select: Array | None = None,
    ) -> tuple[Array, tuple[Array, Array] | None]:
        """x[B,T,D] -> out[B,T,D], attending as `mask` says; with a cache kv = (keyT[B,K,H,S], value[B,K,S,H]),
        token t of row b writes its key and value to slot slots[b,t] (int32[B,T]; a slot >= S writes nothing) and
        attends the cache. `select`: each token's adapter (one-hot [B, T or 1, adapters]) where there are several."""
        dt = x.dtype
        b, t = x.shape[:2]
        n, kh, h = self.cfg.num_heads, self.cfg.num_kv_heads, self.cfg.head_dim
        s = self.cfg.lora.scale
        q = constrain(project(x, self.q, self.q_lora, s, select).reshape(b, t, n, h), HEADS)  # "BTD,DNH->BTNH"
        k = constrain(project(x, self.k, self.k_lora, s, select).reshape(b, t, kh, h), KV_HEADS)  # "BTD,DKH->BTKH"
        v = constrain(project(x, self.v, self.v_lora, s, select).reshape(b, t, kh, h), KV_HEADS)
        if self.cfg.qkv_bias:
            q = q + self.q_bias[...].astype(dt)
            k = k + self.k_bias[...].astype(dt)
            v = v + self.v_bias[...].astype(dt)
        if self.cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        # The cache's layouts, keyT[B,K,H,S] and value[B,K,S,H], are what `attention` takes.
        if kv is None:
            k, v = k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3)
        else:  # scatter the [B,T,K,H] rows to their slots
            ck, cv = kv
            rows = jnp.arange(b)[:, None]
            ck = ck.at[rows, :, :, slots].set(k.astype(ck.dtype), mode="drop")
            cv = cv.at[rows, :, slots, :].set(v.astype(cv.dtype), mode="drop")
            kv = (ck, cv)
            k, v = ck, cv
        out = constrain(attention(q, k, v, mask, self.cfg.attention), HEADS)  # [B,T,N,H]
        # "BTNH,NHD->BTD" as one [B*T, N*H] x [N*H, D] matmul
        return project(out.reshape(b, t, n * h), self.o, self.o_lora, s, select), kv


class MLP(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, lora_rngs: nnx.Rngs):
        d, f, pd = cfg.hidden_size, cfg.intermediate_size, cfg.param_dtype
        self.gate = param(rngs, (d, f), ("embed", "mlp"), pd)
        self.up = param(rngs, (d, f), ("embed", "mlp"), pd)
        self.down = param(rngs, (f, d), ("mlp", "embed"), pd)
        self.gate_lora = adapter(cfg, "gate", (d, f), ("embed", "mlp"), lora_rngs)
        self.up_lora = adapter(cfg, "up", (d, f), ("embed", "mlp"), lora_rngs)
        self.down_lora = adapter(cfg, "down", (f, d), ("mlp", "embed"), lora_rngs)
        self.lora_scale = cfg.lora.scale

    def __call__(self, x: Array, select: Array | None = None) -> Array:
        s = self.lora_scale
        gate, up = project(x, self.gate, self.gate_lora, s, select), project(x, self.up, self.up_lora, s, select)
        hidden = constrain(jax.nn.silu(gate) * up, ("batch", None, "mlp"))
        return project(hidden, self.down, self.down_lora, s, select)


class Block(nnx.Module):
    """One decoder layer: attention, then the dense SwiGLU `MLP` or, in a sparse layer of a mixture of experts
    (`cfg.is_sparse`), the `MoE` under the same name (`mlp`, as HF names both)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs, lora_rngs: nnx.Rngs, sparse: bool = False):
        self.attn_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ("embed",), cfg)
        self.attn = Attention(cfg, rngs=rngs, lora_rngs=lora_rngs)
        self.mlp_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps, ("embed",), cfg)
        self.sparse = sparse
        self.mlp = MoE(cfg, rngs=rngs) if sparse else MLP(cfg, rngs=rngs, lora_rngs=lora_rngs)

    def __call__(self, x, cos, sin, mask, kv, slots, select=None, valid=None, expert_ids=None):
        """-> (x, kv, the sparse layer's `Route` or None). `valid` (bool[B,T]) and `expert_ids` (int32[B,T,k], a
        recorded choice to replay) reach a sparse layer's `MoE`; a dense layer ignores them."""
        a, kv = self.attn(self.attn_norm(x), cos, sin, mask, kv, slots, select)
        x = constrain(x + a, ACTIVATIONS)
        if not self.sparse:
            return constrain(x + self.mlp(self.mlp_norm(x), select), ACTIVATIONS), kv, None
        out, route = self.mlp(self.mlp_norm(x), valid, expert_ids)
        return constrain(x + out, ACTIVATIONS), kv, route
