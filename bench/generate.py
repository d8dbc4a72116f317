"""Decode throughput: jgem's rollout engine vs transformers' `generate` (PyTorch), same weights, greedy.

Prints one JSON line per (model, batch) plus one for the machine's f32 matmul peak (JAX), e.g.
    .venv/bin/python bench/generate.py                       # tiny and 100m at batch 1, 8, 32
    .venv/bin/python bench/generate.py --models tiny --batches 1 --reps 1
    python bench/generate.py --dtype bfloat16 --models 100m qwen3-0.6b   # on a GPU: both on the GPU
jgem generates as a rollout's first turn does: a `SlotEngine` of one slot per prompt, each prompt prefilled into its
slot (`extend`), then decode chunks of `--chunk-steps` steps (the host reading each chunk's tokens between them) to
`--new-tokens` tokens (`jgem.rollout.generate`). Tokens/s count generated tokens (batch * new tokens) over the wall
time of a whole call (prefill included, compilation excluded: one warm-up call first). On CPU the process has
`--cpu-devices` JAX devices (default 1); with more, the engine shards its slots over a data mesh of them and each call
also places the params (replicated) on it; `jgem_devices` in each row says which. transformers runs on torch's threads
(one per core). jgem and transformers run in turn, `--reps` rounds: tok/s and `speedup` use the best call of each,
`speedup_median_round` the median over rounds of the two calls' ratio. Achieved FLOP/s uses 2 * matmul params per
token (+ attention over the cache) over the same time, against the matmul peak in the same dtype (the highest of the
start, a re-measure before each row and one measured in each round right after the jgem call: `peak_gflops` in each
row): `jgem_frac_of_peak` is the best call over that highest peak; `jgem_frac_of_peak_median_round` the median over
rounds of each call's FLOP/s over the peak measured in its own round (the same moment's speed of a box whose speed
drifts). On a GPU the run also measures the memory bandwidth (a large device copy) and reports the fraction of it
that the decode reaches, counting the fewest bytes a decode must read (every weight once per step, the KV cache up to
the current length) and write (the new K/V).
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
from jax.sharding import NamedSharding, PartitionSpec

from jgem import hostmem
from jgem.models.config import ModelConfig, preset
from jgem.models.hf import save_pretrained
from jgem.models.transformer import Transformer
from jgem.rollout.config import Sampling
from jgem.rollout.generate import generate
from jgem.rollout.slots import SlotEngine
from jgem.sharding.config import MeshConfig
from jgem.sharding.mesh import make_mesh


def _best(fn, reps: int) -> float:
    fn()  # warm-up: compilation stays out of the timing
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def on_gpu() -> bool:
    return jax.default_backend() == "gpu"


def matmul_peak(dtype: str = "float32", n: int | None = None, reps: int = 10) -> float:
    """GFLOP/s of a jitted n x n matmul in `dtype` on the default JAX device (n: 8192 on a GPU, else 2048)."""
    n = n or (8192 if on_gpu() else 2048)
    a = jax.random.normal(jax.random.key(0), (n, n), dtype)
    b = jax.random.normal(jax.random.key(1), (n, n), dtype)
    f = jax.jit(lambda x, y: x @ y)
    return 2 * n**3 / _best(lambda: f(a, b).block_until_ready(), reps) / 1e9


def copy_bandwidth(nbytes: int = 2 << 30, reps: int = 10) -> float:
    """GB/s of a jitted elementwise pass over `nbytes` of f32 (bytes read + bytes written)."""
    x = jnp.ones((nbytes // 4,), jnp.float32)
    f = jax.jit(lambda v: v * 2.0)
    return 2 * nbytes / _best(lambda: f(x).block_until_ready(), reps) / 1e9


def decode_bytes(cfg: ModelConfig, batch: int, prompt: int, new: int) -> float:
    """Fewest HBM bytes of the new-1 decode steps: all weights but the embedding table once per step (plus one
    embedding row per sequence), the KV cache read up to the current length, the new K/V written."""
    item = jnp.dtype(cfg.param_dtype).itemsize
    d, kv = cfg.hidden_size, cfg.num_kv_heads * cfg.head_dim
    weights = cfg.num_params - (0 if cfg.tie_word_embeddings else cfg.vocab_size * d)
    total = 0.0
    for i in range(1, new):
        ctx = prompt + i
        total += weights * item + batch * d * item + batch * cfg.num_layers * 2 * kv * (ctx + 1) * item
    return total


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


def jgem_call(model: Transformer, cfg: ModelConfig, prompts: np.ndarray, new: int, chunk_steps: int, mesh=None):
    """A timed call of jgem's rollout engine (its programs compiled on first use): one slot per prompt, extend, then
    decode chunks to `new` tokens; on `mesh` if given (slots over its data axis, params replicated on it)."""
    engine = SlotEngine(
        cfg, num_slots=len(prompts), max_len=prompts.shape[1] + new, eos_ids=[], chunk_steps=chunk_steps, mesh=mesh
    )
    graphdef, state = nnx.split(model)
    plist = prompts.tolist()

    def run():
        # every call pays for placing the params on the mesh, as after each learner update
        gs = (graphdef, state if mesh is None else jax.device_put(state, NamedSharding(mesh, PartitionSpec())))
        out = generate(engine, gs, plist, jax.random.key(0), max_new_tokens=new, sampling=Sampling(greedy=True))
        assert min(t.size for t, _ in out) == new, "every row must generate all tokens (no EOS here)"

    return run


def torch_call(hf_model, prompts: np.ndarray, new: int):
    """A timed call of transformers' greedy `generate` on the same prompts."""
    import torch

    dev = hf_model.device
    ids = torch.tensor(prompts, device=dev)
    kw = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False, eos_token_id=None, pad_token_id=0)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def run():
        with torch.no_grad():
            out = hf_model.generate(ids, **kw)
        sync()
        assert out.shape[1] == prompts.shape[1] + new

    return run


def interleaved(fns: dict, reps: int) -> dict:
    """Wall times of each call over `reps` rounds that run every call once, in turn: load on a shared box drifts
    over seconds (tiny at batch 32: 12-20k tok/s within one minute), and interleaving gives each side the same
    conditions. One warm-up call each first."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["tiny", "100m"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 8, 32])
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5, help="timed rounds (jgem and transformers in turn); best reported")
    ap.add_argument("--no-torch", action="store_true", help="skip the transformers peer")
    ap.add_argument("--chunk-steps", type=int, default=8, help="decode steps per engine chunk (RolloutConfig's)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="weights and compute, both")
    ap.add_argument(
        "--cpu-devices",
        type=int,
        default=1,
        help="JAX CPU devices; with more than one, the engine's slots are sharded over a data mesh of them",
    )
    hostmem.add_flag(ap)
    args = ap.parse_args()
    hostmem.from_flag(args)  # jgem's and transformers' runs share the process and the setting
    jax.config.update("jax_num_cpu_devices", args.cpu_devices)  # before the first JAX call starts the backend

    peak = matmul_peak(args.dtype)
    head = {"bench": "matmul_peak", "device": str(jax.devices()[0]), "dtype": args.dtype, "gflops": round(peak, 1)}
    bw = copy_bandwidth() if on_gpu() else None
    if bw is not None:
        head["copy_gb_s"] = round(bw, 1)
    print(json.dumps(head), flush=True)
    for name in args.models:
        cfg = preset(name, dtype=args.dtype, param_dtype=args.dtype)
        model = Transformer(cfg, rngs=nnx.Rngs(0))
        hf_model = None
        if not args.no_torch:
            import torch
            from transformers import AutoModelForCausalLM

            dev = "cuda" if on_gpu() and torch.cuda.is_available() else "cpu"
            with tempfile.TemporaryDirectory() as d:
                save_pretrained(model, cfg, d)
                hf_model = AutoModelForCausalLM.from_pretrained(d, dtype=getattr(torch, args.dtype)).eval().to(dev)
        rs = np.random.RandomState(0)
        for b in args.batches:
            prompts = rs.randint(1, cfg.vocab_size, (b, args.prompt_len)).astype(np.int32)
            n_tok = b * args.new_tokens
            peak = max(peak, matmul_peak(args.dtype))  # re-measured: load on a shared box drifts; highest so far
            several_cpus = jax.default_backend() == "cpu" and len(jax.local_devices()) > 1
            mesh = make_mesh(MeshConfig(data=-1), jax.local_devices()) if several_cpus else None
            round_peaks: list[float] = []  # one per round, measured right after the jgem call
            calls = {
                "jgem": jgem_call(model, cfg, prompts, args.new_tokens, args.chunk_steps, mesh),
                "peak": lambda out=round_peaks: out.append(matmul_peak(args.dtype, reps=3)),
            }
            if hf_model is not None:
                calls["transformers"] = torch_call(hf_model, prompts, args.new_tokens)
            times = interleaved(calls, args.reps)
            round_peaks = round_peaks[1:]  # the warm-up round's is not paired with a timed call
            peak = max(peak, *round_peaks)
            t_j = min(times["jgem"])
            row = {
                "bench": "generate",
                "model": name,
                "params_m": round(cfg.num_params / 1e6, 2),
                "dtype": args.dtype,
                "batch": b,
                "prompt_len": args.prompt_len,
                "new_tokens": args.new_tokens,
                "chunk_steps": args.chunk_steps,
                "jgem_devices": 1 if mesh is None else mesh.size,
                "jgem_tok_s": round(n_tok / t_j, 1),
            }
            flops = model_flops(cfg, b, args.prompt_len, args.new_tokens)
            gflops = flops / t_j / 1e9
            paired = np.median([flops / t / 1e9 / p for t, p in zip(times["jgem"], round_peaks)])
            row.update(
                jgem_gflops=round(gflops, 1),
                peak_gflops=round(peak, 1),
                jgem_frac_of_peak=round(gflops / peak, 3),
                jgem_frac_of_peak_median_round=round(float(paired), 3),
            )
            if bw is not None:
                gbs = decode_bytes(cfg, b, args.prompt_len, args.new_tokens) / t_j / 1e9
                row.update(jgem_decode_gb_s=round(gbs, 1), jgem_frac_of_bw=round(gbs / bw, 3))
            if hf_model is not None:
                t_t = min(times["transformers"])
                per_round = np.median(np.asarray(times["transformers"]) / np.asarray(times["jgem"]))
                row.update(
                    transformers_tok_s=round(n_tok / t_t, 1),
                    speedup=round(t_t / t_j, 2),
                    speedup_median_round=round(float(per_round), 2),
                )
            row["load_avg_1m"] = round(os.getloadavg()[0], 2)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
