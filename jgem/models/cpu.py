"""XLA:CPU tuning, all in one place: what the model and the sampler do differently when traced for the CPU.

One switch, `cpu_tuning(trick)`: true when the trace targets the CPU (`platform()`) and the trick is enabled by
JGEM_CPU_TUNING: "1" (the default: all of TRICKS), "0" (none), or a comma-separated list of TRICKS. Off the CPU
none of this code runs; each trick stays here only while its A/B in bench/cpu_tricks.py shows it pays
(docs/benchmarks.md, "CPU tricks"). The switch is read at trace time.

- "matmul_vjp": `matmul`, a 2-D matmul whose backward computes the weight gradient from a materialised x^T, a
  plain row-major GEMM (autodiff's x^T g contracts x's leading axis, which XLA:CPU runs as a slow Eigen dot).
- "out_in_decode": the sampler's decode reads every projection from a transposed [out, in] copy
  (`out_in_weights`, `to_out_in`, `dense_out_in`): at a few rows per step the weight is the streamed operand,
  and XLA:CPU runs [out, in] @ x^T faster than x @ [in, out] when the weights do not fit in cache.
Not a trick of the switch, as it needs the caller's devices: `cpu_decode_mesh`, the data mesh over CPU devices on
which the sampler's per-device decode loops pay.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from jgem.models.config import ModelConfig
from jgem.models.platform import platform
from jgem.sharding.mesh import MeshConfig, make_mesh

Array = jax.Array
TRICKS = ("matmul_vjp", "out_in_decode")
ENV = "JGEM_CPU_TUNING"


def enabled_tricks() -> tuple[str, ...]:
    """The tricks JGEM_CPU_TUNING enables ("1" or unset: all, "0": none, else a comma-separated list)."""
    flag = os.environ.get(ENV, "1").strip()
    if flag in ("1", ""):
        return TRICKS
    if flag == "0":
        return ()
    names = tuple(n.strip() for n in flag.split(",") if n.strip())
    bad = [n for n in names if n not in TRICKS]
    if bad:
        raise ValueError(f"{ENV}={flag!r}: unknown CPU tricks {bad}; use 0, 1 or a comma-separated list of {TRICKS}")
    return names


def cpu_tuning(trick: str) -> bool:
    """Whether the current trace targets the CPU and `trick` (one of TRICKS) is enabled."""
    if trick not in TRICKS:
        raise ValueError(f"unknown CPU trick {trick!r}; one of {TRICKS}")
    return platform() == "cpu" and trick in enabled_tricks()


# ---------------------------------------------------------------------- matmul_vjp


@jax.custom_vjp
def matmul(x: Array, w: Array) -> Array:
    """x[M,K] @ w[K,N], with a backward pass whose weight gradient is a row-major GEMM on XLA:CPU."""
    return x @ w


def _matmul_fwd(x: Array, w: Array):
    return x @ w, (x, w)


def _matmul_bwd(res, g: Array):
    x, w = res
    xt = jax.lax.optimization_barrier(x.T)  # the barrier stops XLA folding the transpose back into the dot
    return g @ w.T, (xt @ g).astype(w.dtype)


matmul.defvjp(_matmul_fwd, _matmul_bwd)


# ---------------------------------------------------------------------- out_in_decode

OUT_IN_MIN_BYTES = 8 << 20  # `Sampler(out_in_decode=None)`: one layer's projections at least this big ...
OUT_IN_MAX_BATCH = 128  # ... and at most this many rows per decode step
# Projection weights, by name, and how many of their leading axes are inputs ([in..., out...] as stored).
PROJECTIONS = {"q": 1, "k": 1, "v": 1, "o": 2, "gate": 1, "up": 1, "down": 1}
_OUT_IN = contextvars.ContextVar("jgem_out_in_weights", default=False)


@contextlib.contextmanager
def out_in_weights() -> Iterator[None]:
    """While tracing inside this, every projection weight is read as 2-D [out, in] (`to_out_in`), not as stored."""
    token = _OUT_IN.set(True)
    try:
        yield
    finally:
        _OUT_IN.reset(token)


def out_in_active() -> bool:
    """Whether the current trace reads weights as [out, in] (inside `out_in_weights`)."""
    return _OUT_IN.get()


def to_out_in(w: Array, n_in: int) -> Array:
    """A stored projection [in..., out...] (`n_in` input axes) as a 2-D [out, in] array (a transposed copy)."""
    k = math.prod(w.shape[:n_in])
    return w.reshape(k, -1).T


def dense_out_in(x: Array, wt: Array, preferred_element_type=None, *, out_major: bool = False) -> Array:
    """x[..., K] @ wt[N, K]^T -> [..., N], computed as wt @ x^T with both transposes materialised (the barriers
    stop XLA folding them into the dot, where they would give a slow transposed-operand dot on CPU).
    `out_major`: return the product as computed, [N, rows] (x's leading axes flattened), with no transpose."""
    lead = x.shape[:-1]
    xt = jax.lax.optimization_barrier(x.reshape(-1, x.shape[-1]).T)
    yt = jax.lax.optimization_barrier(jnp.matmul(wt, xt, preferred_element_type=preferred_element_type))
    return yt if out_major else yt.T.reshape(*lead, wt.shape[0])


# ---------------------------------------------------------------------- several CPU devices (sampler)

CPU_MESH_MIN_ROWS = 4  # `cpu_decode_mesh`: the fewest rows per device for which a data mesh pays on CPU


def layer_projection_bytes(cfg: ModelConfig) -> int:
    d, h = cfg.hidden_size, cfg.head_dim
    n = d * (cfg.num_heads + 2 * cfg.num_kv_heads) * h + cfg.num_heads * h * d + 3 * d * cfg.intermediate_size
    return n * jnp.dtype(cfg.param_dtype).itemsize


def cpu_decode_mesh(cfg: ModelConfig, batch: int, devices: Sequence[Any] | None = None) -> Mesh | None:
    """A data mesh over the local CPU devices (default: all of them) on which `Sampler` decodes `batch` rows of
    `cfg` faster than on one device, or None: off the CPU backend, with one device, with fewer than
    CPU_MESH_MIN_ROWS rows per device, or for a model whose layer projections take OUT_IN_MIN_BYTES or more.

    XLA:CPU runs a small model's decode dots one at a time on one thread; over a data mesh each device decodes its
    rows on a thread of its own. Measured on two cores, against one device: the tiny preset (0.75 MiB per layer) at
    0.71-0.87x / 0.92x / 1.03x / 1.1-1.45x / 1.4-1.8x for batch 1 / 2 / 4 / 8 / 32; the 100m preset (24 MiB per
    layer), whose dots already use both cores, at 0.73-0.95x (docs/benchmarks.md, "Session 14"). Give the
    process one device per core (`JAX_NUM_CPU_DEVICES` or the `jax_num_cpu_devices` config, before JAX starts),
    and place the params replicated on the mesh."""
    devices = list(jax.local_devices(backend="cpu") if devices is None else devices)
    if (
        platform() != "cpu"
        or len(devices) < 2
        or batch < CPU_MESH_MIN_ROWS * len(devices)
        or layer_projection_bytes(cfg) >= OUT_IN_MIN_BYTES
    ):
        return None
    return make_mesh(MeshConfig(data=-1), devices=devices)
