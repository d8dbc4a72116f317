"""Grouped-query attention with causal and segment masking, one function over four implementations.

`attention(q, k_t, v, mask, implementation)` takes queries q[B,T,N,H] and keys and values in the KV cache's
layouts, k_t[B,K,H,S] (keys transposed) and v[B,K,S,H], and returns out[B,T,N,H]. The mask is described, never
materialised by the caller (`Mask`): key slot s is visible from query t of row b iff s <= q_slot[b,t] and
kv_segment[b,s] == q_segment[b,t].

Implementations (`IMPLEMENTATIONS`; "auto" picks by `platform()` and shape, `choose`):
- "xla": the plain one, scores [B,K,G,T,S] in float32 and a softmax. The reference the others are tested against,
  and what short calls use (decode, short rows), where a kernel's fixed costs do not pay.
- "blockwise": flash-style online softmax over blocks of BLOCK key slots (`lax.scan`), with a custom VJP that
  recomputes each block's probabilities from the saved log-sum-exp: forward and backward hold [T, BLOCK]
  scores, never [T, S]. Pure jnp, so it runs everywhere; on CPU it is the self-attention implementation (its
  backward beats autodiff of the plain one at every length measured), and everywhere it serves long calls over a
  cache (prefill into a cache, the rollout engine's extend).
- "cudnn": `jax.nn.dot_product_attention(implementation="cudnn")` on GPU; the segment mask goes in as a
  [B,1,T,S] boolean (cuDNN folds it into a bias), no score matrix per head. 16-bit inputs only: a float32 model
  (the tiny preset) on a GPU runs blockwise or xla instead.
- "splash": the Pallas splash attention kernel on TPU, with segment ids, a causal mask and grouped kv heads.
  Under a mesh it runs per shard (`shard_map`: batch over data/fsdp, heads over tensor). Off TPU it runs in
  Pallas's interpret mode (tests only: slow).
cuDNN and splash take the self-attention calls only (the keys are the queries' own tokens, `Mask.self_attention`:
the training forward and the learner's log-probs); a call over a cache uses blockwise when long, xla when short.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from jgem.models.config import ATTENTION as IMPLEMENTATIONS
from jgem.models.platform import platform

Array = jax.Array
BLOCK = 512  # key slots per block of the blockwise implementation
BLOCKWISE_MIN_SCORES = 1 << 20  # "auto": a call over a cache with at least this many T x S scores goes blockwise
SPLASH_BLOCK = 512  # splash's query and key tiles (at most; they must divide T)
_NEG = -0.7 * float(np.finfo(np.float32).max)  # masked score: finite, so a fully masked row stays NaN-free


@flax.struct.dataclass
class Mask:
    """Which keys each query sees: slot s from query t of row b iff s <= q_slot[b,t] and the segments match.

    `self_attention` (static): the keys are the queries' own T tokens (S == T, q_slot[b,t] == t), the case the
    fused kernels take."""

    q_slot: Array  # int32[B,T]
    q_segment: Array  # int32[B,T]
    kv_segment: Array  # int32[B,S]
    self_attention: bool = flax.struct.field(pytree_node=False, default=False)

    @classmethod
    def causal(cls, segment_ids: Array) -> Mask:
        """Self-attention over packed rows: causal within each segment of segment_ids[B,T]."""
        b, t = segment_ids.shape
        slots = jnp.broadcast_to(jnp.arange(t, dtype=jnp.int32), (b, t))
        return cls(slots, segment_ids, segment_ids, self_attention=True)

    def visible(self, start: Array | int, size: int) -> Array:
        """bool[B,T,size]: what the queries see of key slots [start, start + size)."""
        slots = start + jnp.arange(size, dtype=jnp.int32)
        seg = jax.lax.dynamic_slice_in_dim(self.kv_segment, start, size, axis=1)
        causal = slots[None, None, :] <= self.q_slot[:, :, None]
        return causal & (self.q_segment[:, :, None] == seg[:, None, :])


def check_implementation(name: str) -> str:
    if name not in IMPLEMENTATIONS:
        raise ValueError(f"attention implementation {name!r} is not one of {IMPLEMENTATIONS}")
    return name


def choose(name: str, mask: Mask, t: int, s: int, dtype: Any = jnp.bfloat16) -> str:
    """The implementation a call of T queries over S key slots in `dtype` runs: `name`, resolved where it is "auto"
    or a fused kernel that does not take this call (see the module docstring; cuDNN's takes 16-bit inputs only)."""
    check_implementation(name)
    long = t * s >= BLOCKWISE_MIN_SCORES
    if name in ("cudnn", "splash") and not mask.self_attention:
        return "blockwise" if long else "xla"
    if name in ("cudnn", "auto") and platform() == "gpu" and jnp.dtype(dtype).itemsize > 2:
        return "blockwise" if long else "xla"  # a float32 model (the tiny preset) on a GPU
    if name != "auto":
        return name
    if mask.self_attention and platform() == "cpu":  # its custom VJP: 0.5-0.8x the plain fwd+bwd at T 128-2048
        return "blockwise"
    if mask.self_attention and platform() == "gpu":
        return "cudnn"
    if mask.self_attention and platform() == "tpu" and t % 128 == 0:
        return "splash"
    return "blockwise" if long else "xla"


def attention(q: Array, k_t: Array, v: Array, mask: Mask, implementation: str = "auto") -> Array:
    """q[B,T,N,H], k_t[B,K,H,S], v[B,K,S,H] -> out[B,T,N,H] in q's dtype (see the module docstring)."""
    impl = choose(implementation, mask, q.shape[1], v.shape[2], q.dtype)
    if impl == "xla":
        return xla_attention(q, k_t, v, mask)
    if impl == "blockwise":
        return blockwise_attention(q, k_t, v, mask)
    if impl == "cudnn":
        return cudnn_attention(q, k_t, v, mask)
    return splash_attention(q, k_t, v, mask)


def _group(q: Array, kh: int) -> Array:
    """q[B,T,N,H] -> [B,K,G*T,H]: each kv head's G query heads, as the rows of one (B,K)-batched matmul."""
    b, t, n, h = q.shape
    return q.reshape(b, t, kh, n // kh, h).transpose(0, 2, 3, 1, 4).reshape(b, kh, -1, h)


def _ungroup(out: Array, t: int) -> Array:
    """out[B,K,G*T,H] -> [B,T,N,H]."""
    b, kh, _, h = out.shape
    return out.reshape(b, kh, -1, t, h).transpose(0, 3, 1, 2, 4).reshape(b, t, -1, h)


def xla_attention(q: Array, k_t: Array, v: Array, mask: Mask) -> Array:
    """The plain implementation: all scores f32[B,K,G,T,S] at once."""
    b, t, n, h = q.shape
    kh, s = k_t.shape[1], k_t.shape[3]
    scores = jnp.einsum("BKQH,BKHS->BKQS", _group(q, kh), k_t.astype(q.dtype), preferred_element_type=jnp.float32)
    scores = (scores / math.sqrt(h)).reshape(b, kh, n // kh, t, s)
    scores = jnp.where(mask.visible(0, s)[:, None, None], scores, _NEG)
    probs = jax.nn.softmax(scores, axis=-1).astype(q.dtype).reshape(b, kh, -1, s)
    return _ungroup(jnp.einsum("BKQS,BKSH->BKQH", probs, v.astype(q.dtype)), t)


# ---------------------------------------------------------------------- blockwise (online softmax)


def blockwise_attention(q: Array, k_t: Array, v: Array, mask: Mask, block: int | None = None) -> Array:
    """Online softmax over blocks of `block` (default BLOCK) key slots: O(T * block) scores live at a time, forward
    and backward."""
    t, s = q.shape[1], v.shape[2]
    block = min(BLOCK if block is None else block, s)
    pad = -s % block
    if pad:  # padded slots get segment -1, which no query has: masked
        k_t = jnp.pad(k_t, ((0, 0), (0, 0), (0, 0), (0, pad)))
        v = jnp.pad(v, ((0, 0), (0, 0), (0, pad), (0, 0)))
        mask = mask.replace(kv_segment=jnp.pad(mask.kv_segment, ((0, 0), (0, pad)), constant_values=-1))
    qg = _group(q, k_t.shape[1])
    out = _flash(qg, k_t.astype(q.dtype), v.astype(q.dtype), mask.q_slot, mask.q_segment, mask.kv_segment, block)
    return _ungroup(out, t)


def _block_scores(qg: Array, k_blk: Array, q_slot, q_seg, kv_seg, start, block: int) -> Array:
    """Masked scores f32[B,K,G*T,block] of key slots [start, start + block)."""
    b, kh, gt, h = qg.shape
    s = jnp.einsum("BKQH,BKHS->BKQS", qg, k_blk, preferred_element_type=jnp.float32) / math.sqrt(h)
    m = Mask(q_slot, q_seg, kv_seg).visible(start, block)  # [B,T,block]
    s = s.reshape(b, kh, gt // q_slot.shape[1], q_slot.shape[1], block)
    return jnp.where(m[:, None, None], s, _NEG).reshape(b, kh, gt, block)


def _blocks(k_t: Array, v: Array, block: int) -> tuple[Array, Array]:
    """k_t[B,K,H,S], v[B,K,S,H] -> per block: [nb,B,K,H,block], [nb,B,K,block,H]."""
    b, kh, h, s = k_t.shape
    nb = s // block
    return (
        k_t.reshape(b, kh, h, nb, block).transpose(3, 0, 1, 2, 4),
        v.reshape(b, kh, nb, block, h).transpose(2, 0, 1, 3, 4),
    )


def _flash_forward(qg, k_t, v, q_slot, q_seg, kv_seg, block):
    b, kh, gt, h = qg.shape
    kb, vb = _blocks(k_t, v, block)
    starts = jnp.arange(kb.shape[0], dtype=jnp.int32) * block

    def step(carry, xs):
        acc, m, l = carry
        k_blk, v_blk, start = xs
        s = _block_scores(qg, k_blk, q_slot, q_seg, kv_seg, start, block)
        m_new = jnp.maximum(m, jnp.max(s, axis=-1))
        p = jnp.exp(s - m_new[..., None])
        alpha = jnp.exp(m - m_new)
        pv = jnp.einsum("BKQS,BKSH->BKQH", p.astype(v_blk.dtype), v_blk, preferred_element_type=jnp.float32)
        return (acc * alpha[..., None] + pv, m_new, l * alpha + jnp.sum(p, axis=-1)), None

    init = (
        jnp.zeros((b, kh, gt, h), jnp.float32),
        jnp.full((b, kh, gt), _NEG, jnp.float32),
        jnp.zeros((b, kh, gt), jnp.float32),
    )
    (acc, m, l), _ = jax.lax.scan(step, init, (kb, vb, starts))
    return (acc / l[..., None]).astype(qg.dtype), m + jnp.log(l)


@partial(jax.custom_vjp, nondiff_argnums=(6,))
def _flash(qg, k_t, v, q_slot, q_seg, kv_seg, block):
    return _flash_forward(qg, k_t, v, q_slot, q_seg, kv_seg, block)[0]


def _flash_fwd(qg, k_t, v, q_slot, q_seg, kv_seg, block):
    out, lse = _flash_forward(qg, k_t, v, q_slot, q_seg, kv_seg, block)
    return out, (qg, k_t, v, q_slot, q_seg, kv_seg, out, lse)


def _flash_bwd(block, res, dout):
    qg, k_t, v, q_slot, q_seg, kv_seg, out, lse = res
    h = qg.shape[-1]
    kb, vb = _blocks(k_t, v, block)
    starts = jnp.arange(kb.shape[0], dtype=jnp.int32) * block
    dout32 = dout.astype(jnp.float32)
    delta = jnp.sum(dout32 * out.astype(jnp.float32), axis=-1)  # [B,K,G*T]

    def step(dq, xs):
        k_blk, v_blk, start = xs
        p = jnp.exp(_block_scores(qg, k_blk, q_slot, q_seg, kv_seg, start, block) - lse[..., None])
        dv = jnp.einsum("BKQS,BKQH->BKSH", p, dout32)
        dp = jnp.einsum("BKQH,BKSH->BKQS", dout32, v_blk, preferred_element_type=jnp.float32)
        ds = p * (dp - delta[..., None]) / math.sqrt(h)
        dq = dq + jnp.einsum("BKQS,BKHS->BKQH", ds, k_blk, preferred_element_type=jnp.float32)
        dk_t = jnp.einsum("BKQS,BKQH->BKHS", ds, qg, preferred_element_type=jnp.float32)
        return dq, (dk_t, dv)

    dq, (dk_t, dv) = jax.lax.scan(step, jnp.zeros(qg.shape, jnp.float32), (kb, vb, starts))
    nb, b, kh = dk_t.shape[:3]
    dk_t = dk_t.transpose(1, 2, 3, 0, 4).reshape(k_t.shape)  # [nb,B,K,H,blk] -> [B,K,H,S]
    dv = dv.transpose(1, 2, 0, 3, 4).reshape(v.shape)  # [nb,B,K,blk,H] -> [B,K,S,H]
    return dq.astype(qg.dtype), dk_t.astype(k_t.dtype), dv.astype(v.dtype), None, None, None


_flash.defvjp(_flash_fwd, _flash_bwd)


# ---------------------------------------------------------------------- fused kernels (self-attention)


def cudnn_attention(q: Array, k_t: Array, v: Array, mask: Mask) -> Array:
    """cuDNN's fused attention (GPU only): causal, with the segment mask as a [B,1,T,S] boolean."""
    same = mask.q_segment[:, None, :, None] == mask.kv_segment[:, None, None, :]
    k = k_t.transpose(0, 3, 1, 2).astype(q.dtype)  # [B,S,K,H]
    return jax.nn.dot_product_attention(
        q, k, v.transpose(0, 2, 1, 3).astype(q.dtype), mask=same, is_causal=True, implementation="cudnn"
    )


def splash_attention(q: Array, k_t: Array, v: Array, mask: Mask) -> Array:
    """The Pallas splash kernel (TPU; interpret mode elsewhere): causal, segment ids, grouped kv heads."""
    from jax.experimental.pallas.ops.tpu import splash_attention as splash

    b, t, n, h = q.shape
    kh, s = k_t.shape[1], k_t.shape[3]
    bq, bkv = math.gcd(t, SPLASH_BLOCK), math.gcd(s, SPLASH_BLOCK)
    sizes = splash.BlockSizes(
        block_q=bq,
        block_kv=bkv,
        block_kv_compute=bkv,
        block_q_dkv=bq,
        block_kv_dkv=bkv,
        block_kv_dkv_compute=bkv,
        block_q_dq=bq,
        block_kv_dq=bkv,
    )
    interpret = platform() != "tpu"

    def local(q, k_t, v, q_seg, kv_seg):  # one shard: q[b,N,T,H], k[b,K,S,H], v[b,K,S,H]
        heads = q.shape[1]
        kernel = splash.make_splash_mha(
            splash.MultiHeadMask([splash.CausalMask((t, s))] * heads),
            head_shards=1,
            q_seq_shards=1,
            block_sizes=sizes,
            interpret=interpret,
        )
        return jax.vmap(kernel)(q, k_t, v, segment_ids=splash.SegmentIds(q_seg, kv_seg))

    args = (
        (q / math.sqrt(h)).transpose(0, 2, 1, 3),
        k_t.transpose(0, 1, 3, 2).astype(q.dtype),
        v.astype(q.dtype),
        mask.q_segment,
        mask.kv_segment,
    )
    mesh = jax.sharding.get_abstract_mesh()
    if mesh.empty:
        out = local(*args)
    else:  # the kernel is not partitionable by XLA: run it per shard
        from jax.sharding import PartitionSpec as P

        batch, rows = [], 1
        for a in ("data", "fsdp", "expert"):  # the batch axes (expert: a mixture of experts' mesh)
            if a in mesh.shape and b % (rows * mesh.shape[a]) == 0:
                batch.append(a)
                rows *= mesh.shape[a]
        batch = tuple(batch) or None
        tp = mesh.shape.get("tensor", 1)
        heads = "tensor" if tp > 1 and kh % tp == 0 else None
        spec = P(batch, heads, None, None)
        # check_vma=False: the Pallas kernel's out_shape carries no varying-axes annotation
        specs = (spec, spec, spec, P(batch, None), P(batch, None))
        out = jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=spec, check_vma=False)(*args)
    return out.transpose(0, 2, 1, 3)
