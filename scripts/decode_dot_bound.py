"""What XLA:CPU's batch-32 decode dots reach when every step streams its weights from memory.

    .venv/bin/python scripts/decode_dot_bound.py

A `lax.scan` over 30 pairs of distinct [768, 2048] / [2048, 768] f32 weights (377 MB, like the 100m model's
MLPs), applied to a [32, 768] activation: the shapes of the 100m decode at batch 32 without attention, norms or
the vocab head. The same with the activations transposed ([out, in] weights x [in, 32], HF's weight layout:
the weight is the streamed left operand). Also a jitted sum over 400 MB, for the read bandwidth. Best of 3.
"""

from __future__ import annotations

import timeit

import jax
import jax.numpy as jnp
import numpy as np


def main() -> None:
    m, d, f, layers = 32, 768, 2048, 30
    rng = np.random.default_rng(0)
    ws = jnp.asarray(rng.normal(size=(layers, d, f)).astype(np.float32) * 0.02)
    vs = jnp.asarray(rng.normal(size=(layers, f, d)).astype(np.float32) * 0.02)
    x = jnp.asarray(rng.normal(size=(m, d)).astype(np.float32))

    def chain(x, ws, vs):
        return jax.lax.scan(lambda h, wv: (jnp.tanh((h @ wv[0]) @ wv[1]), None), x, (ws, vs))[0]

    def chain_t(xt, ws_t, vs_t):  # xt[d, m]; weights [out, in]
        return jax.lax.scan(lambda h, wv: (jnp.tanh(wv[1] @ (wv[0] @ h)), None), xt, (ws_t, vs_t))[0]

    ws_t, vs_t = (jnp.asarray(np.ascontiguousarray(np.swapaxes(np.asarray(a), 1, 2))) for a in (ws, vs))
    flops, nbytes = 4 * m * d * f * layers, 2 * d * f * layers * 4
    for name, fn, args in (("x @ W", chain, (x, ws, vs)), ("W^T @ x^T", chain_t, (x.T.copy(), ws_t, vs_t))):
        g = jax.jit(fn)
        g(*args).block_until_ready()
        s = min(timeit.repeat(lambda: g(*args).block_until_ready(), number=3, repeat=3)) / 3  # noqa: B023
        print(
            f"{name}: {layers} weight pairs ({nbytes / 1e6:.0f} MB): {s * 1e3:.1f} ms, "
            f"{flops / s / 1e9:.0f} GFLOP/s, {nbytes / s / 1e9:.1f} GB/s of weights"
        )
    big = jnp.ones((100 << 20,), jnp.float32)
    total = jax.jit(jnp.sum)
    total(big).block_until_ready()
    s = min(timeit.repeat(lambda: total(big).block_until_ready(), number=3, repeat=3)) / 3
    print(f"read bandwidth (sum over {big.nbytes / 1e6:.0f} MB): {big.nbytes / s / 1e9:.1f} GB/s")


if __name__ == "__main__":
    main()
