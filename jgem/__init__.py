"""jgem: a JAX-native gym and trainer for agentic LLMs.

`import jgem` is light: it registers the built-in env ids (`jgem.envs`: ids only); environments, models and
learners are imported when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jgem import envs as _builtin_envs  # noqa: F401  registers the built-in ids (no suite is imported)
from jgem.core import Env, EnvFault, EnvSpec, JgemError, Wrapper
from jgem.registry import list_envs, make, register

__version__ = "0.1.0"

__all__ = [
    "Env",
    "EnvFault",
    "EnvPool",
    "EnvSpec",
    "JgemError",
    "Wrapper",
    "__version__",
    "list_envs",
    "make",
    "register",
]

if TYPE_CHECKING:
    from jgem.envs.pool import EnvPool


def __getattr__(name: str) -> Any:
    if name == "EnvPool":
        from jgem.envs.pool import EnvPool

        return EnvPool
    raise AttributeError(f"module 'jgem' has no attribute {name!r}")
