"""Host-memory reuse for XLA:CPU: stop glibc returning large freed buffers to the kernel between steps.

XLA:CPU allocates each executable's temporary buffer (gigabytes for a training step) with `posix_memalign`
from its worker threads. glibc serves requests that large from a fresh `mmap` and unmaps them on free, so
every step faults in and zeroes all of that memory again: on the 100M-parameter train step of
bench/train_step.py, 3.5 GB and 900k page faults per step, about a fifth of the step's time.

`keep_host_memory()` makes glibc keep what it frees, so later steps reuse the same pages: one arena (the
main heap, which can grow without limit; per-thread arenas cap at 64 MB and fall back to `mmap`), no `mmap`
for large blocks, no trimming of the heap top. Measured on that step: 12.4 s -> 9.7 s, no page faults
once warm. The costs, and why it is opt-in:
- resident memory never shrinks, and the single heap fragments: small allocations split freed blocks, so
  the heap settles above the working set (peak RSS 6.3 GB -> 9.1 GB on that step; with the 96 MB buffer per call of
  tests/test_hostmem.py, the first 2 to ~15 calls, and now and then a later one, still grow the heap, depending
  on thread timing);
- every thread shares one arena, which can slow a process with many allocating threads (large env pools).

Turn it on with `JGEM_KEEP_HOST_MEMORY=1` (experiments/train.py calls this first thing) or
`keep_host_memory(force=True)`, before JAX's first computation: XLA's threads pick their arena when they
first allocate. It does nothing off glibc (macOS, musl) and does not touch accelerator memory.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import logging
import os
import platform

log = logging.getLogger(__name__)

# mallopt parameters, from glibc's malloc.h
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
M_ARENA_MAX = -8

_applied = False


def keep_host_memory(force: bool = False) -> bool:
    """Tells glibc malloc to keep freed memory for reuse (see the module docstring) when `force` or
    JGEM_KEEP_HOST_MEMORY=1. Returns whether the setting is in effect."""
    global _applied
    if _applied:
        return True
    flag = os.environ.get("JGEM_KEEP_HOST_MEMORY", "0")
    if flag not in ("0", "1"):
        raise ValueError(f"JGEM_KEEP_HOST_MEMORY must be 0 or 1, got {flag!r}")
    if not (force or flag == "1"):
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    # mallopt takes an int; glibc converts the trim threshold to size_t, so -1 means "never trim".
    ok = all(libc.mallopt(p, v) == 1 for p, v in ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1)))
    if not ok:
        log.warning("glibc mallopt refused a setting; host buffers are not kept between steps")
    _applied = ok
    return ok


def add_flag(parser: argparse.ArgumentParser, default: bool = True) -> None:
    """Adds `--keep-host-memory/--no-keep-host-memory` to a script's parser (apply it with `from_flag`)."""
    parser.add_argument(
        "--keep-host-memory",
        action=argparse.BooleanOptionalAction,
        default=default,
        help="glibc keeps freed buffers for reuse (jgem.hostmem), for every framework in the process",
    )


def from_flag(args: argparse.Namespace) -> bool:
    """Applies `add_flag`'s choice (`--no-keep-host-memory` wins over JGEM_KEEP_HOST_MEMORY); call it right after
    parsing, before JAX's first computation. Returns whether the setting is in effect."""
    return keep_host_memory(force=True) if args.keep_host_memory else _applied
