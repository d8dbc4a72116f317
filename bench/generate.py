"""Decode throughput: jgem's Sampler vs transformers' `generate` (PyTorch), same weights, greedy.

Prints one JSON line per (model, batch) plus one for the machine's f32 matmul peak (JAX), e.g.
    .venv/bin/python bench/generate.py                       # tiny and 100m at batch 1, 8, 32
    .venv/bin/python bench/generate.py --models tiny --batches 1 --reps 1
Tokens/s count generated tokens (batch * new tokens) over the wall time of a whole generate call
(prefill included, compilation excluded: one warm-up call first). Achieved FLOP/s uses 2 * matmul params
per token (+ attention over the cache) over the same time.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jgem.models.config import ModelConfig, preset
from jgem.models.hf import save_pretrained
from jgem.models.sampler import Sampler
from jgem.models.transformer import Transformer


def matmul_peak(n: int = 2048, reps: int = 10) -> float:
    """f32 GFLOP/s of a jitted n x n matmul on the default JAX device."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    f = jax.jit(lambda x, y: x @ y)
    f(a, a).block_until_ready()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        f(a, a).block_until_ready()
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


def model_flops(cfg: ModelConfig, batch: int, prompt: int, new: int) -> float:
    """Matmul FLOPs of prefill (prompt tokens, one logits row) plus new-1 decode steps."""
    d, h, n, k, f, v = (
        cfg.hidden_size,
        cfg.head_dim,
        cfg.num_heads,
        cfg.num_kv_heads,
        cfg.intermediate_size,
        cfg.vocab_size,
    )
    per_tok = cfg.num_layers * 2 * (d * n * h + 2 * d * k * h + n * h * d + 3 * d * f)
    attn = lambda ctx: cfg.num_layers * 4 * n * h * ctx  # scores + weighted sum against ctx keys
    total = batch * prompt * per_tok + batch * sum(attn(t + 1) for t in range(prompt)) + batch * 2 * d * v
    for i in range(1, new):
        total += batch * (per_tok + attn(prompt + i) + 2 * d * v)
    return float(total)


def bench_jgem(model: Transformer, cfg: ModelConfig, prompts: np.ndarray, new: int, reps: int) -> float:
    sampler = Sampler(cfg, eos_ids=[], pad_id=0, max_prompt_buckets=(prompts.shape[1],))
    gs = nnx.split(model)
    plist = prompts.tolist()
    out = sampler.generate(gs, plist, jax.random.key(0), max_new_tokens=new, greedy=True)
    out.tokens.block_until_ready()
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        out = sampler.generate(gs, plist, jax.random.key(0), max_new_tokens=new, greedy=True)
        out.tokens.block_until_ready()
        best = min(best, time.perf_counter() - t)
    assert int(np.asarray(out.lengths).min()) == new, "every row must generate all tokens (no EOS in the benchmark)"
    return best


def bench_torch(hf_model, prompts: np.ndarray, new: int, reps: int) -> float:
    import torch

    ids = torch.tensor(prompts)
    kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        hf_model.generate(ids, **kw)
        best = float("inf")
        for _ in range(reps):
            t = time.perf_counter()
            out = hf_model.generate(ids, **kw)
            best = min(best, time.perf_counter() - t)
    assert out.shape[1] == prompts.shape[1] + new
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["tiny", "100m"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32])
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3, help="timed repetitions; the best is reported")
    ap.add_argument("--no-torch", action="store_true", help="skip the transformers peer")
    args = ap.parse_args()

    peak = matmul_peak()
    print(
        json.dumps({"bench": "matmul_peak", "device": str(jax.devices()[0]), "gflops_f32": round(peak, 1)}), flush=True
    )
    for name in args.models:
        cfg = preset(name)
        model = Transformer(cfg, rngs=nnx.Rngs(0))
        hf_model = None
        if not args.no_torch:
            import torch
            from transformers import AutoModelForCausalLM

            with tempfile.TemporaryDirectory() as d:
                save_pretrained(model, cfg, d)
                hf_model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
        rs = np.random.RandomState(0)
        for b in args.batches:
            prompts = rs.randint(1, cfg.vocab_size, (b, args.prompt_len)).astype(np.int32)
            n_tok = b * args.new_tokens
            t_j = bench_jgem(model, cfg, prompts, args.new_tokens, args.reps)
            row = {
                "bench": "generate",
                "model": name,
                "params_m": round(cfg.num_params / 1e6, 2),
                "batch": b,
                "prompt_len": args.prompt_len,
                "new_tokens": args.new_tokens,
                "jgem_tok_s": round(n_tok / t_j, 1),
            }
            gflops = model_flops(cfg, b, args.prompt_len, args.new_tokens) / t_j / 1e9
            row.update(jgem_gflops=round(gflops, 1), jgem_frac_of_peak=round(gflops / peak, 3))
            if hf_model is not None:
                t_t = bench_torch(hf_model, prompts, args.new_tokens, args.reps)
                row.update(transformers_tok_s=round(n_tok / t_t, 1), speedup=round(t_t / t_j, 2))
            row["load_avg_1m"] = round(os.getloadavg()[0], 2)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
