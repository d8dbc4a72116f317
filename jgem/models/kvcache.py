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


def init_cache(cfg: ModelConfig, batch: int, max_len: int, dtype=None) -> KVCache:
    """An empty cache for `batch` rows of `max_len` slots (dtype defaults to the compute dtype)."""
    dtype = jnp.dtype(dtype or cfg.dtype)
    kshape = (batch, cfg.num_kv_heads, cfg.head_dim, max_len)
    vshape = (batch, cfg.num_kv_heads, max_len, cfg.head_dim)
    return KVCache(
        k=tuple(jnp.zeros(kshape, dtype) for _ in range(cfg.num_layers)),
        v=tuple(jnp.zeros(vshape, dtype) for _ in range(cfg.num_layers)),
        segment_ids=jnp.zeros((batch, max_len), jnp.int32),
        end=jnp.zeros((), jnp.int32),
    )
