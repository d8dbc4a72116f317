"""Roofline: how close jgem's two hot programs come to this machine's physical limits, measured in the same run.

The machine (one JAX CPU device, XLA's intra-op thread pool; `machine` row):
- memory bandwidth, STREAM-style, on arrays of `--stream-mib` MiB each (far above the L3): a jitted triad
  `x * a + y` (bytes: 2 read + 1 written per element) and scale `y * a` (1 + 1), each donating its output buffer
  so no call pays for faulting in fresh pages, and numpy's single-threaded `copyto` (1 + 1); the best of `--reps`
  calls each. `bandwidth_gb_s` is the highest of the three. Write-allocate reads are not counted (STREAM's rule),
  so a copy's true traffic can be up to 1.5x the count.
- peak FLOP/s: a jitted f32 `--matmul-n` square matmul (2 n^3 flops), best of `--matmul-reps`. `matmul_cpu_per_wall` is
  the process's CPU time over wall time in the timed calls: the threads XLA kept busy (`xla_threads` is the CPUs
  this process may run on, which XLA:CPU sizes its pool to).
The machine is measured first, again before each program's row and at the end; each rate is the highest of those
measurements (load on a shared box only slows a measurement down; each measurement is listed in the `*_all`
fields, with the load average at each), and every row's fractions are against those highest rates; `local_*`
fractions are against the measurement taken just before the row (the same moment's machine, when load drifts).

jgem's programs, per model preset in `--models` (random init, f32):
- `decode`: the rollout engine's decode chunk (`SlotEngine.decode` + `fetch`, `--chunk-steps` steps over a full
  batch of `--batches` slots, as bench/generate.py's calls run them; engine of prompt `--prompt-len` +
  `--new-tokens` positions), timed as one chunk at a fixed position (the prompt prefilled once; each timed call
  decodes from the prompt's last token again): best of `--reps` chunks, over the chunk's steps. Per step, the model
  numbers: FLOPs 2 * (matmul params, lm head included) * batch + attention (4 * layers * heads * head_dim * context
  per token); bytes, the fewest a step must move: every weight once (the embedding table as the tied lm head; an
  untied table only for its batch rows), the KV cache of the live context read and one position written per row.
- `train`: `learner.update` (jgem.algos.learner, PPO loss, AdamW) on a `--train-batch` x `--train-seq` batch, as
  bench/train_step.py builds it; best of `--train-reps` steps after a warm-up step. FLOPs: 6 * matmul params per token +
  causal attention (bench/train_step.py's count); bytes: params read by the forward and the backward pass, the
  gradient written, AdamW reading params, gradient and both moments and writing params and moments (10 x params x
  4 bytes; activations not counted).

XLA's own count for the same program: `jit(...).lower(...).compile().cost_analysis()` ('flops', 'bytes accessed')
of the program timed (the engine's `lower_decode` for the chunk the engine's `decode` runs; the learner's `update`,
whose compiled program the timed train steps call). XLA counts a while loop's body once: the decode chunk's loop
(its trip count is data-dependent) is then one step's cost, plus the chunk's once-per-chunk work (gathering the
attention window of the cache and writing it back), which is costed on its own and amortised over the chunk's steps
(`xla_flops`, `xla_bytes`; the chunk program's own count: `xla_chunk_*`). `xla_loops` lists the programs' loops by
known trip count ("?" unknown): a loop of trip count > 1 other than the decode's would make XLA's count too low.
XLA's 'bytes accessed' sums every operation's operands and outputs, cache-resident ones included, so it is above
the model's fewest bytes; the decode's attention also reads the whole window (a power of two >= the context), not
just the live context.

Per row: achieved FLOP/s and bytes/s from the model numbers over the best time, `frac_flops` / `frac_bw` of the
measured peak and bandwidth (the same from XLA's numbers: `xla_frac_*`), `bound`: the limit that binds (compute
when flops / peak >= bytes / bandwidth, else memory), and `frac_roofline`: the roofline's time for the step (the
larger of the two) over the measured time: 1 means the program runs at the machine's limit. On a CPU the ridge is
at peak / bandwidth flops per byte; an f32 decode step does about batch / 2 flops per weight byte.

    .venv/bin/python bench/roofline.py --quick                 # smoke run: tiny, small sizes (under a minute)
    .venv/bin/python bench/roofline.py                          # tiny and 100m; decode at batch 8 and 32
    .venv/bin/python bench/roofline.py --models 100m --batches 8 --reps 5

One JSON line per row (machine, then each program) to stdout once all are measured (progress goes to stderr), then
a plain table. Raw counts in the rows: `step_s` (seconds per step), `model_flops` / `model_bytes` and `xla_flops` /
`xla_bytes` (per step).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jgem.algos.config import LearnerConfig
from jgem.algos.learner import init_train_state, update
from jgem.algos.types import TrainBatch
from jgem.models.config import ModelConfig, preset
from jgem.models.transformer import Transformer
from jgem.rollout.config import Sampling
from jgem.rollout.slots import SlotEngine


def _best(fn: Callable[[], Any], reps: int) -> float:
    """Seconds of the fastest of `reps` calls, after one untimed warm-up call (compilation, page faults)."""
    fn()
    best = math.inf
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


# -- the machine -------------------------------------------------------------------------------------------------


def stream_bandwidth(mib: int = 512, reps: int = 10) -> dict[str, float]:
    """GB/s (1e9 bytes) of a jitted triad and scale and of numpy's copy on arrays of `mib` MiB each."""
    n = mib * 2**20 // 4
    x = jnp.full((n,), 1.0, jnp.float32)
    a = jnp.float32(0.5)
    one = jnp.float32(1.0)
    triad = jax.jit(lambda x, y, a: x * a + y, donate_argnums=1)  # y's buffer is reused for the result
    scale = jax.jit(lambda y, a: y * a, donate_argnums=0)
    box = {"y": jnp.full((n,), 2.0, jnp.float32)}

    def run_triad():
        box["y"] = triad(x, box["y"], a)
        box["y"].block_until_ready()

    def run_scale():
        box["y"] = scale(box["y"], one)
        box["y"].block_until_ready()

    src = np.ones(n, np.float32)
    dst = np.zeros_like(src)
    return {
        "triad_gb_s": 3 * n * 4 / _best(run_triad, reps) / 1e9,
        "scale_gb_s": 2 * n * 4 / _best(run_scale, reps) / 1e9,
        "numpy_copy_gb_s": 2 * n * 4 / _best(lambda: np.copyto(dst, src), reps) / 1e9,
    }


def matmul_peak(n: int = 2048, reps: int = 10) -> dict[str, float]:
    """GFLOP/s of a jitted f32 n x n matmul (best of reps), and CPU time over wall time in the timed calls."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    f = jax.jit(lambda x, y: x @ y)
    f(a, b).block_until_ready()
    best, cpu, wall = math.inf, 0.0, 0.0
    for _ in range(reps):
        c, t = time.process_time(), time.perf_counter()
        f(a, b).block_until_ready()
        dt = time.perf_counter() - t
        cpu, wall, best = cpu + time.process_time() - c, wall + dt, min(best, dt)
    return {"gflops": 2 * n**3 / best / 1e9, "cpu_per_wall": cpu / wall}


def measure_machine(stream_mib: int, matmul_n: int, reps: int, matmul_reps: int | None = None) -> dict[str, Any]:
    """The machine's bandwidth and peak, measured once (`merge_machine` keeps the best of several)."""
    bw = stream_bandwidth(stream_mib, reps)
    mm = matmul_peak(matmul_n, matmul_reps or reps)
    return {
        "bench": "roofline",
        "row": "machine",
        "device": str(jax.devices()[0]),
        "xla_threads": len(os.sched_getaffinity(0)),
        "matmul_cpu_per_wall": round(mm["cpu_per_wall"], 2),
        "stream_mib": stream_mib,
        **{k: round(v, 2) for k, v in bw.items()},
        "bandwidth_gb_s": round(max(bw.values()), 2),
        "matmul_n": matmul_n,
        "peak_gflops": round(mm["gflops"], 1),
        "ridge_flops_per_byte": round(mm["gflops"] / max(bw.values()), 2),
        "bandwidth_gb_s_all": [round(max(bw.values()), 2)],
        "peak_gflops_all": [round(mm["gflops"], 1)],
        "load_avg_1m_all": [round(os.getloadavg()[0], 2)],
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
    }


def merge_machine(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two measurements of the machine as one: each rate the higher (load on a shared box only slows a
    measurement down), the measurements themselves listed in the `*_all` fields."""
    out = dict(a)
    for k in ("triad_gb_s", "scale_gb_s", "numpy_copy_gb_s", "bandwidth_gb_s"):
        out[k] = max(a[k], b[k])
    if b["peak_gflops"] > a["peak_gflops"]:
        out["peak_gflops"], out["matmul_cpu_per_wall"] = b["peak_gflops"], b["matmul_cpu_per_wall"]
    for k in ("bandwidth_gb_s_all", "peak_gflops_all", "load_avg_1m_all"):
        out[k] = a[k] + b[k]
    out["ridge_flops_per_byte"] = round(out["peak_gflops"] / out["bandwidth_gb_s"], 2)
    return out


# -- XLA's count ---------------------------------------------------------------------------------------------------


def xla_cost(compiled: jax.stages.Compiled) -> dict[str, Any]:
    """XLA's cost analysis of a compiled program: flops, bytes accessed, and its while loops by known trip count."""
    ca = compiled.cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca  # older jax: one dict per device program
    trips: Counter[str] = Counter()
    for line in compiled.as_text().splitlines():
        if " while(" in line and "condition=" in line:
            n = re.search(r'"known_trip_count":\{"n":"(\d+)"\}', line)
            trips[n.group(1) if n else "?"] += 1
    return {
        "flops": float(ca.get("flops", 0.0)),
        "bytes": float(ca.get("bytes accessed", 0.0)),
        "loops": dict(sorted(trips.items())),
    }


# -- the model's numbers -------------------------------------------------------------------------------------------


def matmul_params(cfg: ModelConfig) -> int:
    """Weights a token multiplies by: every layer's projections and the lm head (not the embedding lookup)."""
    d, h, n, k, f = cfg.hidden_size, cfg.head_dim, cfg.num_heads, cfg.num_kv_heads, cfg.intermediate_size
    return cfg.num_layers * (d * n * h + 2 * d * k * h + n * h * d + 3 * d * f) + d * cfg.vocab_size


def decode_step_model(cfg: ModelConfig, batch: int, context: float) -> tuple[float, float]:
    """(FLOPs, fewest bytes) of one decode step of `batch` rows, each attending `context` positions (its own
    new one included)."""
    item = jnp.dtype(cfg.param_dtype).itemsize
    kv = cfg.num_kv_heads * cfg.head_dim
    flops = batch * (2 * matmul_params(cfg) + 4 * cfg.num_layers * cfg.num_heads * cfg.head_dim * context)
    weights = cfg.num_params - (0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size)
    bytes_ = (
        weights * item
        + batch * cfg.hidden_size * item  # the embedding rows
        + batch * cfg.num_layers * 2 * kv * context * item  # the KV cache read
        + batch * cfg.num_layers * 2 * kv * item  # the new K/V written
    )
    return float(flops), float(bytes_)


def train_step_model(cfg: ModelConfig, batch: int, seq: int) -> tuple[float, float]:
    """(FLOPs, fewest bytes) of one learner update: 6 * matmul params per token + causal attention (PaLM appendix
    B, as bench/train_step.py); params read twice, the gradient written, AdamW's 7 passes (10 x params x 4 B)."""
    per_token = 6 * matmul_params(cfg) + 6 * cfg.num_layers * cfg.num_heads * cfg.head_dim * seq
    return float(per_token * batch * seq), float(10 * cfg.num_params * 4)


def fractions(flops: float, bytes_: float, t: float, machine: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Achieved rates of `flops` and `bytes_` in `t` seconds against the machine's peak and bandwidth."""
    peak, bw = machine["peak_gflops"] * 1e9, machine["bandwidth_gb_s"] * 1e9
    t_compute, t_memory = flops / peak, bytes_ / bw
    out = {
        f"{prefix}gflops_s": round(flops / t / 1e9, 2),
        f"{prefix}gb_s": round(bytes_ / t / 1e9, 2),
        f"{prefix}frac_flops": round(flops / t / peak, 4),
        f"{prefix}frac_bw": round(bytes_ / t / bw, 4),
        f"{prefix}bound": "compute" if t_compute >= t_memory else "memory",
        f"{prefix}frac_roofline": round(max(t_compute, t_memory) / t, 4),
    }
    out[f"{prefix}flops_per_byte"] = round(flops / bytes_, 2)
    return out


def with_fractions(row: dict[str, Any], machine: dict[str, Any]) -> dict[str, Any]:
    """A program's row (`decode_row`, `train_row`) with its rates and fractions of `machine`'s limits, from the
    model's numbers and from XLA's."""
    out = {
        **row,
        **fractions(row["model_flops"], row["model_bytes"], row["step_s"], machine),
        **fractions(row["xla_flops"], row["xla_bytes"], row["step_s"], machine, "xla_"),
        "peak_gflops": machine["peak_gflops"],
        "bandwidth_gb_s": machine["bandwidth_gb_s"],
    }
    if "local_peak_gflops" in row:  # the measurement just before the row (main)
        local = {"peak_gflops": row["local_peak_gflops"], "bandwidth_gb_s": row["local_bandwidth_gb_s"]}
        f = fractions(row["model_flops"], row["model_bytes"], row["step_s"], local, "local_")
        out.update({k: f[k] for k in ("local_frac_flops", "local_frac_bw", "local_frac_roofline")})
    return out


# -- jgem's programs -----------------------------------------------------------------------------------------------


def decode_row(
    cfg: ModelConfig,
    model: Transformer,
    batch: int,
    *,
    prompt_len: int = 64,
    new_tokens: int = 128,
    chunk_steps: int = 8,
    reps: int = 5,
    name: str = "",
) -> dict[str, Any]:
    """One decode chunk over `batch` full slots, timed and costed per step (see the module docstring)."""
    gs = nnx.split(model)
    engine = SlotEngine(cfg, num_slots=batch, max_len=prompt_len + new_tokens, eos_ids=[], chunk_steps=chunk_steps)
    prompts = np.random.RandomState(0).randint(1, cfg.vocab_size, (batch, prompt_len))
    engine.extend(gs, [(i, p[:-1].tolist(), 0) for i, p in enumerate(prompts)])
    slots, last, pos = list(range(batch)), prompts[:, -1].tolist(), [prompt_len - 1] * batch
    key, sampling = jax.random.key(0), Sampling(greedy=True)

    def chunk():
        handle, _ = engine.decode(gs, slots, last, pos, [0] * batch, [10**9] * batch, slots, [0] * batch, key, sampling)
        out = engine.fetch(handle)
        assert all(t.size == chunk_steps for t, _ in out), "every slot must decode the whole chunk"

    t = _best(chunk, reps) / chunk_steps
    window = engine._window(prompt_len - 1 + chunk_steps)  # the window `decode` picks for these positions
    cost = xla_cost(engine.lower_decode(gs, batch, window).compile())
    # the chunk's once-per-chunk work, costed on its own: the window's gather from the cache and write-back
    layout = engine.layout
    edge = jax.jit(lambda c: layout.put(c, None, layout.take(c, None, window)), donate_argnums=0)
    once = xla_cost(edge.lower(engine.cache).compile())
    xla_flops = cost["flops"] - once["flops"] + once["flops"] / chunk_steps
    xla_bytes = cost["bytes"] - once["bytes"] + once["bytes"] / chunk_steps
    context = prompt_len + (chunk_steps - 1) / 2  # the chunk's mean context (positions attended, the new one too)
    flops, bytes_ = decode_step_model(cfg, batch, context)
    return {
        "bench": "roofline",
        "row": "decode",
        "model": name,
        "params_m": round(cfg.num_params / 1e6, 2),
        "batch": batch,
        "context": context,
        "window": window,
        "chunk_steps": chunk_steps,
        "step_s": t,
        "tok_s": round(batch / t, 1),
        "model_flops": flops,
        "model_bytes": bytes_,
        "xla_flops": xla_flops,  # per step: the loop body, and the once-per-chunk work over the chunk's steps
        "xla_bytes": xla_bytes,
        "xla_chunk_flops": cost["flops"],
        "xla_chunk_bytes": cost["bytes"],
        "xla_once_per_chunk_bytes": once["bytes"],
        "xla_over_model_flops": round(xla_flops / flops, 3),
        "xla_over_model_bytes": round(xla_bytes / bytes_, 3),
        "xla_loops": cost["loops"],
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


def make_batch(cfg: ModelConfig, b: int, t: int, seed: int = 0) -> TrainBatch:
    """bench/train_step.py's batch: one segment per row, a prompt of min(32, t // 2) tokens then action tokens."""
    rng = np.random.default_rng(seed)
    mask = np.broadcast_to(np.arange(t) >= min(32, t // 2), (b, t))
    return TrainBatch(
        tokens=jnp.asarray(rng.integers(0, cfg.vocab_size, (b, t), dtype=np.int32)),
        positions=jnp.asarray(np.broadcast_to(np.arange(t, dtype=np.int32), (b, t))),
        segment_ids=jnp.ones((b, t), jnp.int32),
        loss_mask=jnp.asarray(mask),
        advantages=jnp.asarray(np.where(mask, rng.normal(size=(b, t)), 0.0).astype(np.float32)),
        old_logprobs=jnp.asarray(
            np.where(mask, -np.log(cfg.vocab_size) + 0.05 * rng.normal(size=(b, t)), 0.0).astype(np.float32)
        ),
    )


def train_row(
    cfg: ModelConfig,
    model: Transformer,
    *,
    batch: int = 8,
    seq: int = 256,
    reps: int = 3,
    name: str = "",
) -> dict[str, Any]:
    """One learner update (bench/train_step.py's LearnerConfig and batch), timed and costed."""
    lcfg = LearnerConfig(lr=1e-5, weight_decay=0.01, max_grad_norm=1.0)
    data = make_batch(cfg, batch, seq)
    box = {"state": init_train_state(model, lcfg)}
    t0 = time.perf_counter()
    compiled = update.lower(box["state"], data).compile()
    compile_s = time.perf_counter() - t0
    cost = xla_cost(compiled)

    def step():
        box["state"], metrics = compiled(box["state"], data)  # the state is donated, as in `update`
        jax.block_until_ready((box["state"], metrics))

    t = _best(step, reps)
    flops, bytes_ = train_step_model(cfg, batch, seq)
    return {
        "bench": "roofline",
        "row": "train",
        "model": name,
        "params_m": round(cfg.num_params / 1e6, 2),
        "batch": batch,
        "seq": seq,
        "step_s": t,
        "tok_s": round(batch * seq / t, 1),
        "compile_s": round(compile_s, 1),
        "model_flops": flops,
        "model_bytes": bytes_,
        "xla_flops": cost["flops"],
        "xla_bytes": cost["bytes"],
        "xla_over_model_flops": round(cost["flops"] / flops, 3),
        "xla_over_model_bytes": round(cost["bytes"] / bytes_, 3),
        "xla_loops": cost["loops"],
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


# -- output ----------------------------------------------------------------------------------------------------


def table(machine: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    head = (
        f"machine: {machine['device']}, {machine['xla_threads']} XLA threads (matmul cpu/wall "
        f"{machine['matmul_cpu_per_wall']}); bandwidth {machine['bandwidth_gb_s']} GB/s (triad "
        f"{machine['triad_gb_s']}, scale {machine['scale_gb_s']}, numpy copy {machine['numpy_copy_gb_s']}; "
        f"{machine['stream_mib']} MiB arrays); peak {machine['peak_gflops']} GFLOP/s (f32 matmul "
        f"{machine['matmul_n']}^3); ridge {machine['ridge_flops_per_byte']} flops/byte; best of "
        f"{len(machine['peak_gflops_all'])} measurements (peaks {machine['peak_gflops_all']} GFLOP/s, bandwidths "
        f"{machine['bandwidth_gb_s_all']} GB/s)"
    )
    cols = [
        ("program", lambda r: r["row"]),
        ("model", lambda r: r["model"]),
        ("batch", lambda r: r["batch"] if r["row"] == "decode" else f"{r['batch']}x{r['seq']}"),
        ("ms/step", lambda r: f"{r['step_s'] * 1e3:.3g}"),
        ("GFLOP/step", lambda r: f"{r['model_flops'] / 1e9:.3g}"),
        ("MB/step", lambda r: f"{r['model_bytes'] / 1e6:.4g}"),
        ("xla/model flops", lambda r: r["xla_over_model_flops"]),
        ("xla/model bytes", lambda r: r["xla_over_model_bytes"]),
        ("GFLOP/s", lambda r: r["gflops_s"]),
        ("GB/s", lambda r: r["gb_s"]),
        ("frac flops", lambda r: r["frac_flops"]),
        ("frac bw", lambda r: r["frac_bw"]),
        ("bound", lambda r: r["bound"]),
        ("frac roofline", lambda r: r["frac_roofline"]),
        ("local frac roofline", lambda r: r.get("local_frac_roofline", "")),
        ("xla frac flops", lambda r: r["xla_frac_flops"]),
        ("xla frac bw", lambda r: r["xla_frac_bw"]),
    ]
    cells = [[str(f(r)) for _, f in cols] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (h, _) in enumerate(cols)]
    line = lambda vals: "| " + " | ".join(v.rjust(w) for v, w in zip(vals, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([head, "", line([h for h, _ in cols]), sep, *map(line, cells)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["tiny", "100m"])
    ap.add_argument("--batches", nargs="+", type=int, default=[8, 32], help="decode slots")
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--new-tokens", type=int, default=128, help="the engine's slot length is prompt + this")
    ap.add_argument("--chunk-steps", type=int, default=8, help="decode steps per engine chunk")
    ap.add_argument("--train-batch", type=int, default=8)
    ap.add_argument("--train-seq", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5, help="timed calls of each measurement (best reported)")
    ap.add_argument("--train-reps", type=int, default=3, help="timed learner updates (best reported)")
    ap.add_argument("--stream-mib", type=int, default=512, help="MiB per STREAM array")
    ap.add_argument("--matmul-n", type=int, default=2048, help="the peak matmul's size")
    ap.add_argument("--matmul-reps", type=int, default=10, help="timed peak matmuls per measurement (best kept)")
    ap.add_argument("--quick", action="store_true", help="smoke run: tiny only, small sizes, 2 reps")
    args = ap.parse_args()
    if args.quick:
        args.models, args.batches, args.train_batch, args.train_seq = ["tiny"], [8], 4, 128
        args.reps, args.train_reps, args.stream_mib, args.matmul_reps = 2, 2, 128, 3

    machine = measure_machine(args.stream_mib, args.matmul_n, args.reps, args.matmul_reps)

    def remeasure() -> dict[str, Any]:  # before each row and at the end: the highest rates count
        nonlocal machine
        now = measure_machine(args.stream_mib, args.matmul_n, args.reps, args.matmul_reps)
        machine = merge_machine(machine, now)
        print(f"machine: {now['peak_gflops']} GFLOP/s, {now['bandwidth_gb_s']} GB/s", file=sys.stderr, flush=True)
        return {"local_peak_gflops": now["peak_gflops"], "local_bandwidth_gb_s": now["bandwidth_gb_s"]}

    print(f"machine: {machine['peak_gflops']} GFLOP/s, {machine['bandwidth_gb_s']} GB/s", file=sys.stderr, flush=True)
    rows = []
    for name in args.models:
        cfg = preset(name)
        model = Transformer(cfg, rngs=nnx.Rngs(0))
        for b in args.batches:
            local = remeasure()
            kw = dict(prompt_len=args.prompt_len, new_tokens=args.new_tokens, chunk_steps=args.chunk_steps)
            rows.append({**decode_row(cfg, model, b, reps=args.reps, name=name, **kw), **local})
            print(f"decode {name} batch {b}: {rows[-1]['step_s'] * 1e3:.3g} ms/step", file=sys.stderr, flush=True)
        local = remeasure()
        row = train_row(cfg, model, batch=args.train_batch, seq=args.train_seq, reps=args.train_reps, name=name)
        rows.append({**row, **local})
        print(f"train {name}: {rows[-1]['step_s'] * 1e3:.4g} ms/step", file=sys.stderr, flush=True)
    remeasure()
    rows = [with_fractions(r, machine) for r in rows]
    for r in [machine, *rows]:
        print(json.dumps(r), flush=True)
    print()
    print(table(machine, rows))


if __name__ == "__main__":
    main()
