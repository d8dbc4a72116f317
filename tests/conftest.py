"""Test-wide setup: 8 simulated CPU devices, so mesh and sharding tests run in the same session, and JAX's
persistent compilation cache.

This must run before jax is imported anywhere; single-device tests use `jax.devices()[:1]`. The settings are
environment variables, so the processes tests start (`python -m experiments.train`, tests/multiprocess.py) inherit
them. The cache lives in the git-ignored .cache/jax: a clean clone starts empty, a rerun loads what the last run
compiled. `JAX_ENABLE_COMPILATION_CACHE=false` turns it off.
"""

import os
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("JAX_NUM_CPU_DEVICES", "8")
from tests.multiprocess import TEST_XLA_FLAGS  # noqa: E402 (no jax there)

os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=8", TEST_XLA_FLAGS]
).strip()
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(Path(__file__).resolve().parents[1] / ".cache" / "jax"))
# every program, however small or quick to compile: tests compile thousands of small ones, in many processes
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_collection_modifyitems(config, items):
    """Slow and multi-process tests first: xdist hands out tests in this order, so the long ones overlap with the
    many short ones instead of leaving one worker busy at the end while the other waits (stable: each group keeps
    its collection order, the same on every worker)."""
    items.sort(
        key=lambda item: item.get_closest_marker("slow") is None and item.get_closest_marker("multiprocess") is None
    )
