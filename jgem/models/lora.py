"""LoRA: what training updates in an adapted model, and the merge that folds the adapters into the base weights.

`ModelConfig.lora` (a `LoraConfig`) puts flax NNX's own `nnx.LoRA` beside each targeted projection W
(`jgem.models.layers.adapter`, named `<projection>_lora`): the projection computes x W + (alpha / rank) (x A) B,
with A[K, rank] and B[rank, N] `nnx.LoRAParam`s and B zero at init, so an adapted model starts equal to its base.
Training splits the model by `trainable`: the adapters (and a critic's value head) are the params that get
gradients and optimizer state; the base weights ride along frozen (`TrainState.model_state`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from jgem.models.config import LoraConfig, ModelConfig
from jgem.models.transformer import Transformer

# A critic's value head trains beside its adapters: it is new, so there is no base to adapt.
VALUE_HEAD = nnx.Any(nnx.PathContains("value_w"), nnx.PathContains("value_b"))


def has_adapters(model: nnx.Module) -> bool:
    return bool(jax.tree.leaves(nnx.state(model, nnx.LoRAParam)))


def trainable(model: nnx.Module) -> nnx.filterlib.Filter:
    """The nnx filter of what training updates in `model`: every `nnx.Param`, or, in a model with LoRA adapters,
    only the `nnx.LoRAParam`s and a value head (the base weights are frozen)."""
    return nnx.Any(nnx.LoRAParam, VALUE_HEAD) if has_adapters(model) else nnx.Param


def merged(model: Transformer, adapter: int | None = None) -> Transformer:
    """A Transformer without adapters (`cfg.lora` off) whose projections are W + (alpha / rank) A B, reshaped to
    W's layout and computed in float32: the adapted model as one plain set of weights (what an HF export holds).
    A model without adapters is returned as it is. With several adapters (one per policy), `adapter` picks whose."""
    cfg = model.cfg
    if not cfg.lora.rank:
        return model
    n = cfg.lora.adapters
    if (adapter is None and n > 1) or (adapter is not None and not 0 <= adapter < n):
        raise ValueError(f"merged: the model has {n} adapters (policies); name one, 0..{n - 1}, not {adapter}")
    adapter = adapter if n > 1 else None
    plain = cfg.replace(lora=LoraConfig())
    graphdef, target = nnx.split(
        nnx.eval_shape(lambda: Transformer(plain, rngs=nnx.Rngs(0), value_head=model.has_value_head))
    )
    source = dict(nnx.to_flat_state(nnx.state(model)))
    flat = []
    for path, var in nnx.to_flat_state(target):
        w = source[path][...]
        a = source.get((*path[:-1], f"{path[-1]}_lora", "lora_a"))
        if a is not None:
            a, b = a[...], source[(*path[:-1], f"{path[-1]}_lora", "lora_b")][...]
            if adapter is not None:
                a, b = a[adapter], b[adapter]
            delta = cfg.lora.scale * jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST)
            w = (w.astype(jnp.float32) + delta.reshape(w.shape)).astype(w.dtype)
        flat.append((path, var.replace(w)))
    return nnx.merge(graphdef, nnx.from_flat_state(flat))


def fresh_adapters(cfg: ModelConfig, *, seed: int = 0) -> dict[str, jax.Array]:
    """{"layers.0.attn.q_lora.lora_a": array, ...}: the adapters `Transformer(cfg, rngs=nnx.Rngs(seed))` draws,
    without materialising its base weights (they are dead code in the jitted init and never computed); for a
    model whose base comes from a checkpoint."""

    @jax.jit
    def init():
        return nnx.state(Transformer(cfg, rngs=nnx.Rngs(seed)), nnx.LoRAParam)

    return {".".join(map(str, p)): v[...] for p, v in nnx.to_flat_state(init())}
