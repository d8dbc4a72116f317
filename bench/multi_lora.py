"""Several policies in one decode batch: slots of P LoRA adapters decoded together (jgem's `MultiLoRA`, one chunk)
against the peer, decoding each adapter's slots apart (P chunks of N / P slots, each with a model of that one
adapter, as a server that serves one adapter per batch does), on the same base model and slots.

    .venv/bin/python bench/multi_lora.py --models tiny 100m qwen3-1.7b --adapters 2 4 --slots 64 --window 2048
    .venv/bin/python bench/multi_lora.py --models tiny --wall 20      # plus wall-clock on this machine

Compile-only figures, which hold on any hardware: the decode program (`SlotEngine.lower_decode`, one step of the
chunk's loop: XLA counts a loop body once) is compiled for the local backend on abstract arguments (nothing of the
model is allocated) for N slots of P adapters, and for N / P slots of a one-adapter model (each apart chunk);
`cost_analysis()` gives its FLOPs and bytes accessed. Per decode step the mixed batch costs one program, the apart
decoding P programs. Decode reads every weight once per program: apart, the base weights are read P times a step,
mixed once, at the cost of P times the adapters' (rank / width of the projections') FLOPs. With --wall K, the tiny
model also decodes K chunks of both kinds on this machine (median seconds per step). One JSON line per model and P,
with the ratios mixed / apart.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
from flax import nnx

from jgem.models.config import PRESETS, LoraConfig, ModelConfig, preset
from jgem.models.transformer import Transformer
from jgem.rollout.config import Sampling
from jgem.rollout.slots import SlotEngine


def model_config(name: str, rank: int, adapters: int) -> ModelConfig:
    cfg = preset(name) if name in PRESETS else ModelConfig.from_hf(name)
    return cfg.replace(lora=LoraConfig(rank=rank, adapters=adapters), remat="none")


def cost(cfg: ModelConfig, rows: int, window: int, chunk: int) -> dict[str, float]:
    """FLOPs and bytes accessed of one decode step for `rows` slots attending `window` positions (compiled)."""
    engine = SlotEngine(cfg, num_slots=rows, max_len=window, eos_ids=[0], chunk_steps=chunk, allocate=False)
    model = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
    analysis = engine.lower_decode(model, rows, window).compile().cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    return {"flops": float(analysis.get("flops", 0.0)), "bytes": float(analysis.get("bytes accessed", 0.0))}


def _engine(cfg: ModelConfig, slots: int, chunk: int, adapter_of) -> tuple[SlotEngine, tuple]:
    """An engine of `slots` slots (slot s on adapter `adapter_of(s)`), prefilled, and its model (adapters moved
    off their zero init)."""
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    nnx.update(model, jax.tree.map(lambda x: x + 0.1, nnx.state(model, nnx.LoRAParam)))
    split = nnx.split(model)
    engine = SlotEngine(cfg, num_slots=slots, max_len=256, eos_ids=[-1], chunk_steps=chunk)
    for s in range(slots):
        engine.set_adapter(s, adapter_of(s))
    engine.extend(split, [(s, [5 + s % 7, 6, 7, 8], 0) for s in range(slots)])
    return engine, split


def wall(name: str, rank: int, slots: int, adapters: int, chunks: int, chunk: int) -> dict[str, float]:
    """Median seconds per decode step's chunks on this machine: one chunk of `slots` slots on P adapters (mixed)
    against P chunks of slots / P slots, each engine with a one-adapter model (apart)."""
    per = slots // adapters
    engines = [_engine(model_config(name, rank, adapters), slots, chunk, lambda s: s // per)]
    apart = [_engine(model_config(name, rank, 1), per, chunk, lambda s: 0) for _ in range(adapters)]
    key, sampling = jax.random.key(0), Sampling()

    def run(parts: list[tuple[SlotEngine, tuple]]) -> float:
        t0 = time.perf_counter()
        for engine, split in parts:
            n = engine.num_slots
            g = list(range(n))
            handle, _ = engine.decode(split, g, [8] * n, [4] * n, [0] * n, [chunk] * n, g, [0] * n, key, sampling)
            engine.fetch(handle)
        return time.perf_counter() - t0

    run(engines), run(apart)  # compile both
    return {
        "mixed_s": statistics.median(run(engines) for _ in range(chunks)),
        "apart_s": statistics.median(run(apart) for _ in range(chunks)),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["tiny", "100m"], help="presets or HF config.json paths")
    ap.add_argument("--adapters", type=int, nargs="+", default=[2, 4], help="policies P (LoRA adapters)")
    ap.add_argument("--slots", type=int, default=64, help="slots decoding (N), divisible by each P")
    ap.add_argument("--window", type=int, default=2048, help="positions each slot attends")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--chunk", type=int, default=8, help="decode steps a chunk")
    ap.add_argument("--wall", type=int, default=0, help="also time K chunks of each kind on the tiny model here")
    args = ap.parse_args(argv)
    for name in args.models:
        for p in args.adapters:
            if args.slots % p:
                raise SystemExit(f"--slots {args.slots} is not divisible by {p} adapters")
            cfg = model_config(name, args.rank, p)
            mixed = cost(cfg, args.slots, args.window, args.chunk)
            one = cost(model_config(name, args.rank, 1), args.slots // p, args.window, args.chunk)
            apart = {k: p * v for k, v in one.items()}
            row = {
                "model": name,
                "adapters": p,
                "slots": args.slots,
                "window": args.window,
                "mixed": mixed,
                "apart": apart,
                "programs_per_step": {"mixed": 1, "apart": p},
                "bytes_ratio_mixed_over_apart": mixed["bytes"] / apart["bytes"] if apart["bytes"] else None,
                "flops_ratio_mixed_over_apart": mixed["flops"] / apart["flops"] if apart["flops"] else None,
            }
            if args.wall and name == "tiny":
                t = wall(name, args.rank, args.slots, p, args.wall, args.chunk)
                row |= t | {"wall_ratio_mixed_over_apart": t["mixed_s"] / t["apart_s"]}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
