"""The platform the model is traced for: what chooses the attention kernel and turns on CPU-only code.

`platform()` is `jax.default_backend()` ("cpu", "gpu", "tpu") unless a `target_platform(...)` block says otherwise.
Ahead-of-time compilation for a TPU topology runs in a CPU process (`JAX_PLATFORMS=cpu`): there the default backend
is "cpu" but the program is compiled for TPU, so experiments/tpu_pod wraps its tracing in `target_platform("tpu")`.

The choice is made at trace time. jit's trace cache does not see it: trace a function under a different target
with different argument shardings (another mesh's devices), or through a fresh `jax.jit`.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

import jax

PLATFORMS = ("cpu", "gpu", "tpu")
_TARGET: contextvars.ContextVar[str | None] = contextvars.ContextVar("jgem_target_platform", default=None)


def platform() -> str:
    """The platform being traced for: the innermost `target_platform`, else JAX's default backend."""
    target = _TARGET.get()
    if target is not None:
        return target
    backend = jax.default_backend()
    return "gpu" if backend in ("cuda", "rocm") else backend


@contextlib.contextmanager
def target_platform(name: str) -> Iterator[None]:
    """Trace for `name` ("cpu", "gpu" or "tpu") inside this block, whatever the default backend is."""
    if name not in PLATFORMS:
        raise ValueError(f"target_platform: {name!r} is not one of {PLATFORMS}")
    token = _TARGET.set(name)
    try:
        yield
    finally:
        _TARGET.reset(token)
