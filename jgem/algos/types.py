"""Fixed-shape training batch: what the trainer packs and `learner.update` consumes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class TrainBatch:
    """One training batch of B rows of T tokens (packed episodes or one transition per row).

    tokens[B, T] int32         token ids (prompt, action and observation tokens)
    positions[B, T] int32      position of each token inside its segment
    segment_ids[B, T] int32    packing: tokens attend only within their segment; 0 marks padding
    loss_mask[B, T] bool       True on sampled action tokens (the only tokens that carry a loss)
    advantages[B, T] f32       each action token carries its own turn's advantage
    old_logprobs[B, T] f32     log p(tokens[:, t] | tokens[:, <t]) under the sampling policy
    ref_logprobs[B, T] f32     same under the frozen reference policy (None without a KL penalty)
    returns[B, T] f32          critic targets at value positions (PPO with a critic only)
    values[B, T] f32           critic values at sampling time, for value clipping (PPO only)
    value_mask[B, T] bool      True at the last prompt token of each turn (PPO only)
    """

    tokens: jax.Array
    positions: jax.Array
    segment_ids: jax.Array
    loss_mask: jax.Array
    advantages: jax.Array
    old_logprobs: jax.Array
    ref_logprobs: jax.Array | None = None
    returns: jax.Array | None = None
    values: jax.Array | None = None
    value_mask: jax.Array | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.tokens.shape)

    def validate(self) -> None:
        """Host-side shape check; raises ValueError naming the offending field."""
        if self.tokens.ndim != 2:
            raise ValueError(f"tokens must be [B, T], got shape {self.tokens.shape}")
        for name in ("positions", "segment_ids", "loss_mask", "advantages", "old_logprobs",
                     "ref_logprobs", "returns", "values", "value_mask"):
            x = getattr(self, name)
            if x is not None and tuple(x.shape) != tuple(self.tokens.shape):
                raise ValueError(f"TrainBatch.{name} has shape {x.shape}, expected {self.tokens.shape} like tokens")
        needs_critic = [n for n in ("returns", "values", "value_mask") if getattr(self, n) is not None]
        if needs_critic and len(needs_critic) != 3:
            raise ValueError(f"TrainBatch critic fields must be given together; got only {needs_critic}")


def dummy_batch(batch_size: int, seq_len: int, vocab_size: int, *, seed: int = 0, critic: bool = False,
                ref: bool = False) -> TrainBatch:
    """A random but well-formed batch (two packed segments per row) for tests and benchmarks."""
    k = jax.random.split(jax.random.key(seed), 4)
    B, T = batch_size, seq_len
    half = T // 2
    pos = jnp.arange(T)
    positions = jnp.broadcast_to(jnp.where(pos < half, pos, pos - half), (B, T)).astype(jnp.int32)
    segment_ids = jnp.broadcast_to(jnp.where(pos < half, 1, 2), (B, T)).astype(jnp.int32)
    # second half of each segment is the "action"
    loss_mask = jnp.broadcast_to(positions >= half // 2, (B, T))
    value_mask = jnp.broadcast_to(positions == half // 2 - 1, (B, T))
    return TrainBatch(
        tokens=jax.random.randint(k[0], (B, T), 0, vocab_size, dtype=jnp.int32),
        positions=positions,
        segment_ids=segment_ids,
        loss_mask=loss_mask,
        advantages=jax.random.normal(k[1], (B, T)) * loss_mask,
        old_logprobs=jnp.where(loss_mask, -jnp.log(float(vocab_size)) + 0.1 * jax.random.normal(k[2], (B, T)), 0.0),
        ref_logprobs=jnp.where(loss_mask, -jnp.log(float(vocab_size)), 0.0) if ref else None,
        returns=jax.random.normal(k[3], (B, T)) * value_mask if critic else None,
        values=jnp.zeros((B, T)) if critic else None,
        value_mask=value_mask if critic else None,
    )
