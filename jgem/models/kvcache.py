"""KV cache: per-layer key/value slots plus the segment id of each slot, written at a shared `end` index."""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from jgem.models.config import ModelConfig


@flax.struct.dataclass
class KVCache:
    """Per layer l: k[l] keys transposed [B,K,H,S], v[l] values [B,K,S,H]; segment_ids[B,S] (0 = empty or
    padding); end: int32[] the next slot to write.

    All rows write the same slots, so prompts of different lengths are right-aligned by the caller and padded
    on the left with segment 0 (see Sampler). Writing past S is not checked on device: size S for the whole
    sequence (prompt bucket + new tokens).
    """

    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]
    segment_ids: jax.Array
    end: jax.Array

    @property
    def max_len(self) -> int:
        return self.segment_ids.shape[1]


def _zero_kv(cfg: ModelConfig, rows: int, max_len: int, dtype) -> tuple[tuple[jax.Array, ...], tuple[jax.Array, ...]]:
    """Zero keys (transposed, [rows,K,H,S]) and values ([rows,K,S,H]) per layer, in `dtype` or the compute dtype."""
    dtype = jnp.dtype(dtype or cfg.dtype)
    kshape = (rows, cfg.num_kv_heads, cfg.head_dim, max_len)
    vshape = (rows, cfg.num_kv_heads, max_len, cfg.head_dim)
    zeros = lambda shape: tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_layers))
    return zeros(kshape), zeros(vshape)


def init_cache(cfg: ModelConfig, batch: int, max_len: int, dtype=None) -> KVCache:
    """An empty cache for `batch` rows of `max_len` slots (dtype defaults to the compute dtype)."""
    k, v = _zero_kv(cfg, batch, max_len, dtype)
    return KVCache(
        k=k,
        v=v,
        segment_ids=jnp.zeros((batch, max_len), jnp.int32),
        end=jnp.zeros((), jnp.int32),
    )


@flax.struct.dataclass
class SlotCache:
    """Per-episode KV rows for the rollout engine: per layer l, k[l] keys transposed [B,K,H,S], v[l] values
    [B,K,S,H].

    Row b holds one episode's token stream by absolute position: the key and value of stream position p live at
    slot p. So there is no segment array and no shared write index: a forward with a `SlotCache` writes each token
    at the slot of its position and lets query position p attend slots 0..p. Slots past what a row holds may keep
    stale values from an earlier episode; causality means they are rewritten before any query reads them. A token
    written at a position >= S is dropped (the engine never lets a stream outgrow S).
    """

    k: tuple[jax.Array, ...]
    v: tuple[jax.Array, ...]

    @property
    def max_len(self) -> int:
        return self.v[0].shape[2]

    @property
    def num_rows(self) -> int:
        return self.v[0].shape[0]


def init_slots(cfg: ModelConfig, rows: int, max_len: int, dtype=None) -> SlotCache:
    """An empty slot cache of `rows` rows of `max_len` positions (dtype defaults to the compute dtype)."""
    k, v = _zero_kv(cfg, rows, max_len, dtype)
    return SlotCache(k=k, v=v)


def slot_cache_bytes(cfg: ModelConfig, max_len: int, dtype=None) -> int:
    """Bytes of one slot (one row of `max_len` positions, every layer's keys and values)."""
    itemsize = jnp.dtype(dtype or cfg.dtype).itemsize
    return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * max_len * itemsize
