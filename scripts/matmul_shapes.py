"""GFLOP/s of the 100m train step's matmul shapes, jax (XLA:CPU) vs torch, in one process.

    .venv/bin/python scripts/matmul_shapes.py                       # 2 threads each
    NT=1 XLA_FLAGS=--xla_cpu_multi_thread_eigen=false taskset -c 1 .venv/bin/python scripts/matmul_shapes.py

The forward product, the input gradient (a transposed weight) and the weight gradient (a transposed input),
best of 5 after a warm-up.
"""

from __future__ import annotations

import os
import timeit

import jax
import jax.numpy as jnp
import numpy as np
import torch


def best(fn, reps: int = 5) -> float:
    fn()  # warm-up (compilation)
    return min(timeit.repeat(fn, number=1, repeat=reps))


def compare(sa, sb, prod, rng) -> tuple[float, float]:
    """Best seconds of prod(a, b) in jax and in torch on the same random operands."""
    a, b = rng.normal(size=sa).astype(np.float32), rng.normal(size=sb).astype(np.float32)
    ja, jb, jf = jnp.asarray(a), jnp.asarray(b), jax.jit(prod)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    return best(lambda: jf(ja, jb).block_until_ready()), best(lambda: prod(ta, tb))


def main() -> None:
    torch.set_num_threads(int(os.environ.get("NT", "2")))
    t, d, f = 2048, 768, 2048
    cases = {  # name: (a shape, b shape, product, FLOPs)
        "forward x @ W": ((t, d), (d, f), lambda x, y: x @ y, 2 * t * d * f),
        "input grad dy @ W^T": ((t, f), (d, f), lambda x, y: x @ y.T, 2 * t * f * d),
        "weight grad x^T @ dy": ((t, d), (t, f), lambda x, y: x.T @ y, 2 * t * d * f),
    }
    rng = np.random.default_rng(0)
    for name, (sa, sb, prod, flops) in cases.items():
        tj, tt = compare(sa, sb, prod, rng)
        print(f"{name:22s} jax {flops / tj / 1e9:6.0f}  torch {flops / tt / 1e9:6.0f} GFLOP/s", flush=True)


if __name__ == "__main__":
    main()
