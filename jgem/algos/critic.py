"""PPO's critic: the Transformer with a value head, separate params, initialised from the policy or fresh."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jgem.models.config import ModelConfig
from jgem.models.transformer import Transformer, init_model


def make_critic(
    cfg: ModelConfig, *, policy: nnx.Module | None = None, seed: int = 0, mesh: jax.sharding.Mesh | None = None
) -> Transformer:
    """A value model of `cfg`'s shape; with `policy`, every matching param (all but the value head) is copied.

    The copy is a fresh array: critic and policy train separately and never alias. With `mesh`, the fresh params are
    created sharded (`init_model`).
    """
    critic = init_model(cfg, seed=seed, value_head=True, mesh=mesh)
    if policy is None:
        return critic
    src = nnx.to_flat_state(nnx.state(policy, nnx.Param))
    src = {path: var for path, var in src}
    dst = nnx.state(critic, nnx.Param)
    copied = 0
    for path, var in nnx.to_flat_state(dst):
        if path in src and src[path].get_value().shape == var.get_value().shape:
            var.set_value(jnp.array(src[path].get_value(), copy=True))
            copied += 1
    if copied == 0:
        raise ValueError(
            "make_critic(policy=...): no parameter of the policy matches the critic's; "
            "pass a policy built from the same ModelConfig"
        )
    nnx.update(critic, dst)
    return critic


def critic_values(
    critic: Transformer, tokens: jax.Array, positions: jax.Array, segment_ids: jax.Array | None = None
) -> jax.Array:
    """values f32[B, T]: the critic's estimate at every position (the trainer reads the last prompt token of a turn)."""
    h, _ = critic.hidden(tokens, positions, segment_ids=segment_ids)
    return critic.value(h)
