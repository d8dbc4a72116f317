"""The KV cache: per-row key/value slots indexed by stream position (the rollout engine's cache, the model's only
one)."""

from __future__ import annotations

import flax.struct
import jax
import jax.numpy as jnp

from jgem.models.config import ModelConfig


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
    dtype = jnp.dtype(dtype or cfg.dtype)
    kshape = (rows, cfg.num_kv_heads, cfg.head_dim, max_len)
    vshape = (rows, cfg.num_kv_heads, max_len, cfg.head_dim)
    zeros = lambda shape: tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_layers))
    return SlotCache(k=zeros(kshape), v=zeros(vshape))


def slot_cache_bytes(cfg: ModelConfig, max_len: int, dtype=None) -> int:
    """Bytes of one slot (one row of `max_len` positions, every layer's keys and values)."""
    itemsize = jnp.dtype(dtype or cfg.dtype).itemsize
    return 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * max_len * itemsize
