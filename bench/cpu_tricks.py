"""A/B of each CPU trick in jgem.models.cpu: the workload it was made for, with the trick on and off, in turn.

For every trick in `--tricks`: "on" enables all of jgem.models.cpu.TRICKS, "off" all but that one
(JGEM_CPU_TUNING, read at trace time: each side is a jit of its own). Workload: "train" (value and grad of the
teacher-forced log-probs, `--batch` x `--seq`), the one the remaining trick (matmul_vjp) was made for; the decode
workload went with the out_in_decode trick, which served only the static `Sampler`'s decode (the rollout engine
never read [out, in] weight copies). Calls of both sides alternate (machine load hits both alike); the median is
reported, with off/on (> 1: the trick pays). `--attention` also
times "xla" against "blockwise" attention (forward and backward of one layer's attention, 100m shapes) at the
given row lengths. One JSON line per measurement.

    .venv/bin/python bench/cpu_tricks.py --models tiny 100m --reps 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jgem.models import attention as A
from jgem.models.config import preset
from jgem.models.cpu import ENV, TRICKS
from jgem.models.head import token_logprobs
from jgem.models.transformer import Transformer

WORKLOADS = {"matmul_vjp": "train"}


def emit(**kw) -> None:
    print(json.dumps(kw), flush=True)


def traced_with(tricks: tuple[str, ...], make):
    """`make()` -> a zero-argument call whose first run (the trace) sees JGEM_CPU_TUNING = `tricks`."""
    old = os.environ.get(ENV)
    os.environ[ENV] = ",".join(tricks) if tricks else "0"
    try:
        fn = make()
        fn()
    finally:
        if old is None:
            os.environ.pop(ENV)
        else:
            os.environ[ENV] = old
    return fn


def interleaved(fns: dict, reps: int) -> dict:
    times = {k: [] for k in fns}
    for _ in range(reps):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def train_call(model, batch: int, seq: int):
    graphdef, state = nnx.split(model)
    toks = jnp.asarray(np.random.default_rng(0).integers(0, model.cfg.vocab_size, (batch, seq)), jnp.int32)
    pos = jnp.broadcast_to(jnp.arange(seq, dtype=jnp.int32), (batch, seq))

    def loss(state):
        lp, _ = token_logprobs(nnx.merge(graphdef, state), toks, pos)
        return jnp.mean(lp)

    def make():
        f = jax.jit(jax.value_and_grad(loss))
        return lambda: jax.block_until_ready(f(state))

    return make


def attention_call(impl: str, t: int, n: int, k: int, h: int):
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(1, t, n, h)), jnp.float32)
    k_t = jnp.asarray(rng.normal(size=(1, k, h, t)), jnp.float32)
    v = jnp.asarray(rng.normal(size=(1, k, t, h)), jnp.float32)
    mask = A.Mask.causal(jnp.ones((1, t), jnp.int32))
    fn = A.xla_attention if impl == "xla" else A.blockwise_attention
    f = jax.jit(jax.value_and_grad(lambda q, k_t, v: jnp.sum(fn(q, k_t, v, mask)), argnums=(0, 1, 2)))
    f(q, k_t, v)
    return lambda: jax.block_until_ready(f(q, k_t, v))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", default=["tiny", "100m"])
    ap.add_argument("--tricks", nargs="+", default=list(TRICKS), choices=TRICKS)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--attention", nargs="*", type=int, default=[], help="row lengths for xla vs blockwise")
    args = ap.parse_args()
    emit(jax=jax.__version__, backend=jax.default_backend(), devices=len(jax.devices()))
    for name in args.models:
        model = Transformer(preset(name), rngs=nnx.Rngs(0))
        for trick in args.tricks:
            work = WORKLOADS[trick]
            rest = tuple(t for t in TRICKS if t != trick)
            make = train_call(model, args.batch, args.seq)
            on, off = traced_with(TRICKS, make), traced_with(rest, make)
            t = interleaved({"on": on, "off": off}, args.reps)
            emit(model=name, trick=trick, workload=work, on_s=round(t["on"], 4), off_s=round(t["off"], 4),
                 off_over_on=round(t["off"] / t["on"], 3))  # fmt: skip
    for t in args.attention:
        cfg = preset("100m")
        fns = {i: attention_call(i, t, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) for i in ("xla", "blockwise")}
        r = interleaved(fns, args.reps)
        emit(attention_fwd_bwd=t, xla_s=round(r["xla"], 4), blockwise_s=round(r["blockwise"], 4),
             blockwise_over_xla=round(r["blockwise"] / r["xla"], 3))  # fmt: skip


if __name__ == "__main__":
    main()
