"""Per-op time breakdown of a jitted jgem computation on XLA:CPU, from a `jax.profiler` trace.

Times one call of either the model's forward+backward (`--what grad`, the learner's `token_logprobs` loss or
the plain hidden states' sum of squares) or the rollout engine's decode (`--what generate`: one greedy chunk of
`--new-tokens` steps over `--batch` slots holding 64-token prompts), and prints the compiled ops grouped by (output
shape, source op), most expensive first, with their share of the summed op time. Useful to find copies /
transposes around dots and to tell dot time from everything else.

    .venv/bin/python scripts/profile_ops.py --what grad --layers 2
    .venv/bin/python scripts/profile_ops.py --what generate --batch 32 --new-tokens 32
    # single-threaded (op times are then additive; multi-threaded runs overlap independent ops):
    XLA_FLAGS=--xla_cpu_multi_thread_eigen=false taskset -c 0 .venv/bin/python scripts/profile_ops.py

Caveats: with several threads, independent ops run concurrently and asynchronous Eigen dots report only
their dispatch, so the shares are indicative; on a shared machine, compare runs made back to back.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jgem.models.config import preset
from jgem.models.head import token_logprobs
from jgem.models.transformer import Transformer
from jgem.rollout.config import Sampling
from jgem.rollout.slots import SlotEngine
from jgem.shapes import next_pow2


def _trace_ops(fn, hlo_text: str) -> list[tuple[str, float, int]]:
    """Runs fn() under the profiler; returns (group, total ms, count) for the ops named in hlo_text."""
    lines = {m.group(1): m.group(2) for m in re.finditer(r"%([\w.-]+) = ([^\n]*)", hlo_text)}
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d, create_perfetto_trace=True):
            fn()
        path = glob.glob(os.path.join(d, "**", "*perfetto_trace.json.gz"), recursive=True)[0]
        with gzip.open(path) as f:
            trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    total, count = collections.defaultdict(float), collections.Counter()
    for e in events:
        if e.get("ph") != "X" or e["name"] not in lines:
            continue
        line = lines[e["name"]]
        shape = line.split("(")[0].split(" ")[0]
        m = re.search(r'op_name="([^"]*)"', line)
        src = re.sub(r"^jit\([^)]*\)/", "", m.group(1)) if m else "?"
        if " dot(" in line:
            kind = "dot (eigen)"
        elif "ynn_fusion" in e["name"]:
            kind = "dot (ynn)" if "dot_general" in src else "ynn (eltwise/reduce)"
        else:
            kind = e["name"].rsplit(".", 1)[0]
        key = f"{kind:28s} {shape:34s} {src[:90]}"
        total[key] += e.get("dur", 0) / 1e3
        count[key] += 1
    return sorted(((k, v, count[k]) for k, v in total.items()), key=lambda x: -x[1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--what", choices=["grad", "generate"], default="grad")
    ap.add_argument("--size", default="100m")
    ap.add_argument("--layers", type=int, default=None, help="override num_layers (faster compiles)")
    ap.add_argument("--loss", choices=["logprobs", "hidden"], default="logprobs")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--top", type=int, default=40)
    args = ap.parse_args()
    over = {} if args.layers is None else {"num_layers": args.layers}
    cfg = preset(args.size, **over)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    rng = np.random.default_rng(0)
    if args.what == "grad":
        b, t = args.batch, args.seq
        graphdef, params = nnx.split(model)
        tok = jnp.asarray(rng.integers(0, cfg.vocab_size, (b, t), dtype=np.int32))
        pos = jnp.asarray(np.broadcast_to(np.arange(t, dtype=np.int32), (b, t)).copy())
        seg = jnp.ones((b, t), jnp.int32)

        def loss(p):
            m = nnx.merge(graphdef, p)
            if args.loss == "hidden":
                h, _ = m.hidden(tok, pos, segment_ids=seg)
                return jnp.sum(h * h)
            return jnp.sum(token_logprobs(m, tok, pos, seg)[0])

        compiled = jax.jit(jax.grad(loss)).lower(params).compile()
        hlo = compiled.as_text()
        fn = lambda: jax.block_until_ready(compiled(params))  # noqa: E731
    else:
        b, new = args.batch, args.new_tokens
        # a slot of a power of two >= 64 + new: the chunk attends the whole slot (its window), as lowered below
        max_len = max(128, next_pow2(63 + new))
        engine = SlotEngine(cfg, num_slots=b, max_len=max_len, eos_ids=[], chunk_steps=new)
        split = nnx.split(model)
        prompts = rng.integers(0, cfg.vocab_size, (b, 64)).tolist()
        engine.extend(split, [(i, p[:-1], 0) for i, p in enumerate(prompts)])
        slots, last = list(range(b)), [p[-1] for p in prompts]
        # every call decodes the same chunk again: the same state, from the prompts' last tokens
        chunk = (slots, last, [63] * b, [0] * b, [new] * b, slots, [0] * b, jax.random.key(0), Sampling(greedy=True))
        fn = lambda: engine.fetch(engine.decode(split, *chunk)[0])  # noqa: E731
        hlo = engine.lower_decode(split, b, max_len).compile().as_text()
    fn()  # warm
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    rows = _trace_ops(fn, hlo)
    summed = sum(v for _, v, _ in rows)
    print(
        json.dumps(
            {"what": args.what, "wall_s": round(wall, 3), "op_ms_summed": round(summed, 1), "load": os.getloadavg()}
        )
    )
    dots = sum(v for k, v, _ in rows if k.startswith("dot ("))
    print(f"dots: {dots:.1f} ms ({dots / max(summed, 1e-9):.0%} of summed op time)")
    for k, v, n in rows[: args.top]:
        print(f"{v:9.1f} ms {v / summed:6.1%} {n:5d}x  {k}")


if __name__ == "__main__":
    main()
