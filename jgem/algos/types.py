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
    sampler_logprobs[B, T] f32 the behaviour (sampler's) log-probs when an off-policy correction replaced
                               old_logprobs by the proximal policy's (the learner's, recomputed before the update)
    is_weights[B, T] f32       the correction's stop-gradient weight on each token's policy loss (e.g. truncated
                               importance weights min(pi_prox / pi_behaviour, cap)); 0 off the loss
    adapter_ids[B, T] i32      each token's LoRA adapter (policy) in a model with several (None: one policy); the
                               loss is then normalised per policy, so each adapter's gradient is its own episodes'
    expert_ids[B, T, M, k] i32 a mixture of experts' recorded routing: each token's experts in each of the M sparse
                               layers when the sampler fed it (-1: no record); replayed with routing "replay"
                               (None: a dense model)
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
    sampler_logprobs: jax.Array | None = None
    is_weights: jax.Array | None = None
    adapter_ids: jax.Array | None = None
    expert_ids: jax.Array | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.tokens.shape)

    @staticmethod
    def abstract(rows: int, tokens: int, *, sharding=None, ref_logprobs: bool = False) -> TrainBatch:
        """A policy batch of `ShapeDtypeStruct`s (for lowering `update` without data; AOT and memory benches)."""
        spec = lambda dtype: jax.ShapeDtypeStruct((rows, tokens), dtype, sharding=sharding)
        return TrainBatch(
            tokens=spec(jnp.int32),
            positions=spec(jnp.int32),
            segment_ids=spec(jnp.int32),
            loss_mask=spec(jnp.bool_),
            advantages=spec(jnp.float32),
            old_logprobs=spec(jnp.float32),
            ref_logprobs=spec(jnp.float32) if ref_logprobs else None,
        )

    def validate(self) -> None:
        """Host-side shape check; raises ValueError naming the offending field."""
        if self.tokens.ndim != 2:
            raise ValueError(f"tokens must be [B, T], got shape {self.tokens.shape}")
        for name in (
            "positions",
            "segment_ids",
            "loss_mask",
            "advantages",
            "old_logprobs",
            "ref_logprobs",
            "returns",
            "values",
            "value_mask",
            "sampler_logprobs",
            "is_weights",
            "adapter_ids",
        ):
            x = getattr(self, name)
            if x is not None and tuple(x.shape) != tuple(self.tokens.shape):
                raise ValueError(f"TrainBatch.{name} has shape {x.shape}, expected {self.tokens.shape} like tokens")
        if self.expert_ids is not None and (self.expert_ids.ndim != 4 or self.expert_ids.shape[:2] != self.shape):
            raise ValueError(
                f"TrainBatch.expert_ids has shape {self.expert_ids.shape}, expected [B, T, M, k] with "
                f"[B, T] = {self.shape} like tokens"
            )
        needs_critic = [n for n in ("returns", "values", "value_mask") if getattr(self, n) is not None]
        if needs_critic and len(needs_critic) != 3:
            raise ValueError(f"TrainBatch critic fields must be given together; got only {needs_critic}")
