"""`param`: a parameter with logical axis names (shared by jgem.models.layers and jgem.models.moe)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx


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
        # the barrier keeps XLA from folding std into normal's own scale inside a jitted init (`init_model`): the
        # values are then those of an eager build, bit for bit
        x = (std * jax.lax.optimization_barrier(jax.random.normal(rngs.params(), shape, jnp.float32))).astype(dtype)
    # eager_sharding=False: build without a mesh; placement is decided later from the names.
    return nnx.Param(x, out_sharding=names, eager_sharding=False)
