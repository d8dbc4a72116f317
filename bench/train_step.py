"""Training step throughput: jgem `learner.update` vs the same PPO loss on transformers' PyTorch Qwen3 + torch AdamW.

Same config, same weights (written by jgem's save_pretrained, read by transformers), same batch shape, one
process; jgem and torch steps are interleaved so machine load hits both alike. MFU is against this machine's
matmul peak measured in the same run, before every step pair (best of jax and torch on a 2048^3 matmul, 8192^3
on a GPU): model FLOPs over the median step time over the highest peak measured. Rounds: `--steps`, or more
when those would take under `--min-seconds` (the tiny model's 0.2 s steps get ~50 rounds).

    .venv/bin/python bench/train_step.py --sizes tiny 100m --batch 8 --seq 256 --steps 5
    python bench/train_step.py --dtype bfloat16 --sizes 100m qwen3-0.6b --seq 1024   # on a GPU: both on the GPU

`--dtype bfloat16` keeps float32 parameters and optimizer state and computes in bfloat16: jgem's compute
dtype, `torch.autocast` for PyTorch; the peak is then the bfloat16 matmul's (8192^3 on a GPU).
Prints one JSON line per measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch
from flax import nnx

from jgem import hostmem
from jgem.algos.config import LearnerConfig
from jgem.algos.learner import init_train_state, update
from jgem.algos.types import TrainBatch
from jgem.models.config import ModelConfig, preset
from jgem.models.hf import save_pretrained
from jgem.models.transformer import Transformer

CLIP = 0.2


def emit(**kw) -> None:
    print(json.dumps(kw), flush=True)


def on_gpu() -> bool:
    return jax.default_backend() == "gpu" and torch.cuda.is_available()


def torch_device() -> str:
    return "cuda" if on_gpu() else "cpu"


def torch_sync() -> None:
    if on_gpu():
        torch.cuda.synchronize()


def matmul_peak(dtype: str = "float32", reps: int = 5) -> dict[str, float]:
    """Sustained GFLOP/s of an n^3 matmul in `dtype` in jax and in torch (best of reps; n 8192 on a GPU, else 2048)."""
    n = 8192 if on_gpu() else 2048
    a = jnp.asarray(np.random.default_rng(0).normal(size=(n, n)), dtype)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    tj = min(_timed(lambda: f(a).block_until_ready()) for _ in range(reps))
    ta_ = torch.randn(n, n, device=torch_device(), dtype=getattr(torch, dtype))

    def tmm():
        ta_ @ ta_
        torch_sync()

    tmm()
    tt = min(_timed(tmm) for _ in range(reps))
    return {"jax": 2 * n**3 / tj / 1e9, "torch": 2 * n**3 / tt / 1e9}


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def train_flops_per_token(cfg: ModelConfig, seq: int) -> float:
    """6 * matmul params (the lm head included, the embedding lookup not) + causal attention (PaLM appendix B)."""
    n = cfg.num_params - cfg.vocab_size * cfg.hidden_size * (0 if cfg.tie_word_embeddings else 1)
    attn = 6 * cfg.num_layers * cfg.num_heads * cfg.head_dim * seq  # QK^T and AV, fwd+bwd, causal half
    return 6 * n + attn


def make_batch(cfg: ModelConfig, b: int, t: int, seed: int = 0) -> dict[str, np.ndarray]:
    """One segment per row: a 32-token prompt then action tokens; old logprobs near the uniform policy."""
    rng = np.random.default_rng(seed)
    mask = np.broadcast_to(np.arange(t) >= 32, (b, t))
    return {
        "tokens": rng.integers(0, cfg.vocab_size, (b, t), dtype=np.int32),
        "positions": np.broadcast_to(np.arange(t, dtype=np.int32), (b, t)).copy(),
        "loss_mask": mask.copy(),
        "advantages": np.where(mask, rng.normal(size=(b, t)), 0.0).astype(np.float32),
        "old_logprobs": np.where(mask, -np.log(cfg.vocab_size) + 0.05 * rng.normal(size=(b, t)), 0.0).astype(
            np.float32
        ),
    }


def jgem_step(model: Transformer, data: dict, lcfg: LearnerConfig):
    state = init_train_state(model, lcfg)
    batch = TrainBatch(
        tokens=jnp.asarray(data["tokens"]),
        positions=jnp.asarray(data["positions"]),
        segment_ids=jnp.ones(data["tokens"].shape, jnp.int32),
        loss_mask=jnp.asarray(data["loss_mask"]),
        advantages=jnp.asarray(data["advantages"]),
        old_logprobs=jnp.asarray(data["old_logprobs"]),
    )
    box = {"state": state}

    def step():
        box["state"], m = update(box["state"], batch)
        jax.block_until_ready((box["state"], m))
        return m

    return step


def torch_step(model_dir: str, data: dict, lcfg: LearnerConfig, dtype: str, *, remat: bool = False):
    from transformers import AutoModelForCausalLM

    dev = torch_device()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="sdpa").to(dev)
    model.train()
    if remat:  # recompute each decoder layer in the backward pass, as jgem's remat does
        model.gradient_checkpointing_enable()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": lcfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lcfg.lr,
        betas=(lcfg.b1, lcfg.b2),
        eps=lcfg.adam_eps,
    )
    tokens = torch.from_numpy(data["tokens"]).long().to(dev)
    positions = torch.from_numpy(data["positions"]).long().to(dev)
    mask = torch.from_numpy(data["loss_mask"]).float().to(dev)
    adv = torch.from_numpy(data["advantages"]).to(dev)
    old = torch.from_numpy(data["old_logprobs"]).to(dev)
    autocast = dtype != "float32"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev, dtype=getattr(torch, dtype), enabled=autocast):
            out = model(input_ids=tokens, position_ids=positions)
        logits = out.logits[:, :-1].float()
        logp = torch.log_softmax(logits, -1)
        lp = torch.gather(logp, -1, tokens[:, 1:, None])[..., 0]
        ratio = torch.exp(lp - old[:, 1:])
        a = adv[:, 1:]
        loss_tok = torch.maximum(-a * ratio, -a * torch.clamp(ratio, 1 - CLIP, 1 + CLIP))
        m = mask[:, 1:]
        loss = (loss_tok * m).sum() / m.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), lcfg.max_grad_norm)
        opt.step()
        torch_sync()
        return float(loss.detach())

    return step


def bench_size(
    name: str,
    b: int,
    t: int,
    steps: int,
    dtype: str,
    warmup: int,
    min_seconds: float,
    keep_logits_mb: float,
    remat: str = "none",
) -> None:
    cfg = preset(name, dtype=dtype, remat=remat)  # parameters stay float32
    data = make_batch(cfg, b, t)
    # default logprob chunks (1024 tokens); logits kept for the backward pass when they fit in keep_logits_mb
    lcfg = LearnerConfig(lr=1e-5, weight_decay=0.01, max_grad_norm=1.0, keep_logits_mb=keep_logits_mb)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    with tempfile.TemporaryDirectory() as d:
        save_pretrained(model, cfg, d)
        t_step = torch_step(d, data, lcfg, dtype, remat=remat != "none")
    j_step = jgem_step(model, data, lcfg)
    tc = _timed(j_step)  # compile + first step
    t_step()
    pair = 0.0
    for _ in range(warmup):  # untimed: the first steps fault in the host buffers they will reuse
        pair = _timed(j_step) + _timed(t_step)
    # small models: more rounds (at least min_seconds of steps), so the medians are not a few noisy samples
    rounds = max(steps, int(min_seconds / pair)) if pair else steps  # no warm-up pair timed: no estimate
    times = {"jgem": [], "torch": []}
    peaks = []
    for i in range(rounds):  # interleaved, with the peak re-measured each round: load on a shared box drifts
        if i < steps:  # the peak takes ~0.5 s: measured in the first rounds only
            peaks.append(max(matmul_peak(dtype, reps=3).values()))
        times["jgem"].append(_timed(j_step))
        times["torch"].append(_timed(t_step))
    flops = train_flops_per_token(cfg, t) * b * t
    res = {}
    for impl, ts in times.items():
        med = statistics.median(ts)
        res[impl] = b * t / med
        mfu = flops / med / 1e9 / max(peaks)
        extra = {"compile_s": round(tc, 1)} if impl == "jgem" else {}
        emit(
            bench="train_step",
            size=name,
            impl=impl,
            params=cfg.num_params,
            batch=b,
            seq=t,
            dtype=dtype,
            step_s=round(med, 4),
            tokens_per_s=round(b * t / med, 1),
            gflops=round(flops / med / 1e9, 1),
            mfu=round(mfu, 3),
            peak_gflops=round(max(peaks), 1),
            steps=rounds,
            remat=remat,
            **extra,
        )
    emit(bench="train_step", size=name, ratio_jgem_over_torch=round(res["jgem"] / res["torch"], 3))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", nargs="+", default=["tiny", "100m"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps of each after the first")
    ap.add_argument("--min-seconds", type=float, default=20.0, help="time at least this long (more rounds)")
    ap.add_argument(
        "--keep-logits-mb", type=float, default=LearnerConfig.keep_logits_mb, help="jgem's LearnerConfig field"
    )
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="compute dtype")
    ap.add_argument(
        "--remat", default="none", help="jgem's ModelConfig.remat policy (e.g. full); torch then checkpoints layers"
    )
    hostmem.add_flag(ap)
    args = ap.parse_args()
    hostmem.from_flag(args)  # both frameworks run in this process and both get it
    torch.manual_seed(0)
    peaks = matmul_peak(args.dtype)
    emit(
        bench="matmul_peak",
        dtype=args.dtype,
        jax_gflops=round(peaks["jax"], 1),
        torch_gflops=round(peaks["torch"], 1),
        cpu_count=os.cpu_count(),
        torch_threads=torch.get_num_threads(),
        device=str(jax.devices()[0]),
    )
    for name in args.sizes:
        bench_size(
            name,
            args.batch,
            args.seq,
            args.steps,
            args.dtype,
            args.warmup,
            args.min_seconds,
            args.keep_logits_mb,
            args.remat,
        )


if __name__ == "__main__":
    main()
