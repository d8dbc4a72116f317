"""Shared tiny fixtures for the learner tests: one config and shape set, so jit caches are reused across tests."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jgem.algos.config import LearnerConfig
from jgem.algos.learner import token_logprobs
from jgem.algos.types import TrainBatch
from jgem.models.config import preset
from jgem.models.transformer import Transformer, init_model

MODEL_CFG = preset("tiny", num_layers=1, vocab_size=256)
B, T = 16, 24
# 2 epochs x 2 minibatches = 4 optimizer steps per update; micro-batches set per mesh
CFG = LearnerConfig(lr=3e-3, epochs=2, minibatches=2, kl_coef=0.05, entropy_coef=0.01, weight_decay=0.01)


def tiny_model(seed: int = 0) -> Transformer:
    return init_model(MODEL_CFG, seed=seed)


def make_batch(model: Transformer | None = None, seed: int = 0, critic: bool = False) -> TrainBatch:
    """Two packed episodes per row (segments 1 and 2) with prompt/action structure; old logprobs on-policy."""
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, MODEL_CFG.vocab_size, (B, T), dtype=np.int32)
    half = T // 2
    pos = np.arange(T)
    positions = np.broadcast_to(np.where(pos < half, pos, pos - half), (B, T)).astype(np.int32)
    segment_ids = np.broadcast_to(np.where(pos < half, 1, 2), (B, T)).astype(np.int32).copy()
    segment_ids[-1, half:] = 0  # padding in the last row
    loss_mask = (positions >= 4) & (segment_ids > 0)
    advantages = np.where(loss_mask, rng.normal(size=(B, T)), 0.0).astype(np.float32)
    model = model or tiny_model()
    logp, _ = jax.jit(lambda t, p, s: token_logprobs(model, t, p, s))(tokens, positions, segment_ids)
    old = np.where(loss_mask, np.asarray(logp) + 0.05 * rng.normal(size=(B, T)), 0.0).astype(np.float32)
    ref = np.where(loss_mask, np.asarray(logp) + 0.1 * rng.normal(size=(B, T)), 0.0).astype(np.float32)
    value_mask = (positions == 3) & (segment_ids > 0)
    return TrainBatch(
        tokens=jnp.asarray(tokens),
        positions=jnp.asarray(positions),
        segment_ids=jnp.asarray(segment_ids),
        loss_mask=jnp.asarray(loss_mask),
        advantages=jnp.asarray(advantages),
        old_logprobs=jnp.asarray(old),
        ref_logprobs=jnp.asarray(ref),
        returns=jnp.asarray(np.where(value_mask, rng.normal(size=(B, T)), 0.0).astype(np.float32)) if critic else None,
        values=jnp.zeros((B, T), jnp.float32) if critic else None,
        value_mask=jnp.asarray(value_mask) if critic else None,
    )


def host(tree):
    return jax.tree.map(np.asarray, jax.device_get(tree))
