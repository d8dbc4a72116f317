"""XLA:CPU tuning, all in one place: what the model does differently when traced for the CPU.

One switch, `cpu_tuning(trick)`: true when the trace targets the CPU (`platform()`) and the trick is enabled by
JGEM_CPU_TUNING: "1" (the default: all of TRICKS), "0" (none), or a comma-separated list of TRICKS. Off the CPU
none of this code runs; each trick stays here only while its A/B in bench/cpu_tricks.py shows it pays
(docs/benchmarks.md, "CPU tricks"). The switch is read at trace time.

- "matmul_vjp": `matmul`, a 2-D matmul whose backward computes the weight gradient from a materialised x^T, a
  plain row-major GEMM (autodiff's x^T g contracts x's leading axis, which XLA:CPU runs as a slow Eigen dot).

Removed with the static `Sampler` they served (docs/benchmarks.md, "CPU tricks"): "out_in_decode" (the decode
reading [out, in] copies of the projections) and `cpu_decode_mesh` (per-device decode loops over CPU devices).
"""

from __future__ import annotations

import os

import jax

from jgem.models.platform import platform

Array = jax.Array
TRICKS = ("matmul_vjp",)
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
