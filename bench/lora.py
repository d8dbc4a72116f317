"""LoRA's memory saving: the compiled memory of jgem's update step with LoRA adapters against full fine-tuning
(the peer) of the same model, batch and learner config, compile-only.

    .venv/bin/python bench/lora.py --models 100m experiments/tpu_pod/configs/qwen3-1.7b.json \\
        experiments/tpu_pod/configs/qwen3-4b.json --rank 16 --batch 8 --seq 1024 [--micro-batch-size 1]

For each model, `jgem.algos.learner.update` is lowered on abstract arguments (ShapeDtypeStructs of the TrainState
that `init_train_state` builds and of a full TrainBatch; nothing of the model is allocated) and compiled for the
local backend; `memory_analysis()` gives its arguments (params, optimizer state, batch), outputs, the outputs
aliased to donated arguments, and temporaries. The peak it needs is arguments + outputs - aliased + temporaries.
The optimizer state's bytes are counted from the state itself. Prints one JSON line per model and mode, then
one per model with the LoRA / full ratios. Defaults: bfloat16 compute over float32 parameters (and Adam moments),
`remat="full"`, rank 16 on every projection, AdamW with weight decay.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
from flax import nnx

from jgem.algos.config import LearnerConfig
from jgem.algos.learner import init_train_state, update
from jgem.algos.types import TrainBatch
from jgem.models.config import PRESETS, LoraConfig, ModelConfig, preset
from jgem.models.transformer import Transformer

MIB = 2**20


def emit(**kw) -> None:
    print(json.dumps(kw), flush=True)


def model_config(name: str, args: argparse.Namespace) -> ModelConfig:
    """A preset name or an HF config.json, with the run's dtypes and remat."""
    opts = dict(dtype=args.dtype, param_dtype=args.param_dtype, remat=args.remat)
    return preset(name, **opts) if name in PRESETS else ModelConfig.from_hf(name, **opts)


def abstract_state(mcfg: ModelConfig, lcfg: LearnerConfig):
    """The TrainState `init_train_state(Transformer(mcfg), lcfg)` returns, as ShapeDtypeStructs."""
    graphdef, state = nnx.split(nnx.eval_shape(lambda: Transformer(mcfg, rngs=nnx.Rngs(0))))
    return jax.eval_shape(lambda st: init_train_state(nnx.merge(graphdef, st), lcfg), state)


def nbytes(tree) -> int:
    return sum(x.size * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def measure(mcfg: ModelConfig, lcfg: LearnerConfig, b: int, t: int) -> dict:
    state = abstract_state(mcfg, lcfg)
    t0 = time.perf_counter()
    m = update.lower(state, TrainBatch.abstract(b, t)).compile().memory_analysis()
    peak = m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes
    return {
        "trainable_params": sum(x.size for x in jax.tree.leaves(state.params)),
        "argument_mib": m.argument_size_in_bytes / MIB,
        "output_mib": m.output_size_in_bytes / MIB,
        "alias_mib": m.alias_size_in_bytes / MIB,
        "temp_mib": m.temp_size_in_bytes / MIB,
        "peak_mib": peak / MIB,
        "opt_state_mib": nbytes(state.opt_state) / MIB,
        "frozen_mib": nbytes(state.model_state) / MIB,
        "compile_s": round(time.perf_counter() - t0, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["100m"], help="presets or HF config.json paths")
    p.add_argument("--rank", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32.0)
    p.add_argument("--targets", nargs="+", default=list(LoraConfig().targets))
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--micro-batch-size", type=int, default=None)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--param-dtype", default="float32")
    p.add_argument("--remat", default="full")
    p.add_argument(
        "--lora-base-dtype", default=None, help="the frozen base's param dtype in the LoRA run (default: --param-dtype)"
    )
    args = p.parse_args()
    lcfg = LearnerConfig(lr=1e-5, weight_decay=0.01, micro_batch_size=args.micro_batch_size)
    lora = LoraConfig(rank=args.rank, alpha=args.alpha, targets=tuple(args.targets))
    for name in args.models:
        mcfg = model_config(name, args)
        common = dict(
            model=name,
            params=mcfg.num_params,
            batch=args.batch,
            seq=args.seq,
            dtype=args.dtype,
            param_dtype=args.param_dtype,
            micro_batch_size=args.micro_batch_size or args.batch,
            remat=mcfg.remat,
            backend=jax.default_backend(),
        )
        full = measure(mcfg, lcfg, args.batch, args.seq)
        emit(mode="full", **common, **full)
        base_dtype = args.lora_base_dtype or args.param_dtype  # a frozen base needs no float32 for its updates
        adapted = measure(mcfg.replace(lora=lora, param_dtype=base_dtype), lcfg, args.batch, args.seq)
        emit(mode="lora", rank=args.rank, targets=list(lora.targets), **common, base_dtype=base_dtype, **adapted)
        emit(
            mode="ratio",
            model=name,
            rank=args.rank,
            trainable=adapted["trainable_params"] / full["trainable_params"],
            peak=adapted["peak_mib"] / full["peak_mib"],
            opt_state=adapted["opt_state_mib"] / full["opt_state_mib"],
            temp=adapted["temp_mib"] / full["temp_mib"],
        )


if __name__ == "__main__":
    main()
