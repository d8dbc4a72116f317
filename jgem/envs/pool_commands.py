"""One env's side of the pool, shared by its in-process backends (`pool.py`) and its worker processes
(`pool_workers.py`): build the env (`EnvFactory`), run one reset or step on it and check what it returned
(`run_command`, `check_result`), and turn what went wrong into a fault result (`fault_result`, `exception_fault`).
"""

from __future__ import annotations

import contextlib
import math
import traceback
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from jgem.core import Env, EnvFault
from jgem.registry import import_modules, make

# One finished command: (env_id, obs, reward, terminated, truncated, info, is_reset).
Result = tuple[int, Any, float, bool, bool, dict, bool]


@dataclass(frozen=True)
class EnvFactory:
    """Builds one env: `jgem.make(env, **env_kwargs)` (or `env(**env_kwargs)`), then the wrappers in order.

    Picklable when `env` and the wrappers are (module-level classes, functions, `functools.partial`),
    so process workers can build their own envs.
    """

    env: str | Callable[..., Env]
    env_kwargs: dict = field(default_factory=dict)
    wrappers: tuple[Callable[[Env], Env], ...] = ()
    remote_url: str | None = None
    remote_token: str | None = field(default=None, repr=False)  # never in a repr (tracebacks, logs)
    remote_timeout: float = 30.0
    remote_fallbacks: tuple[str, ...] = ()  # other servers to move to when this one is gone
    imports: tuple[str, ...] = ()  # modules that register `env`'s id, imported first (process workers need it)

    def __call__(self) -> Env:
        if self.imports:
            import_modules(self.imports)
        if self.remote_url is not None:
            from jgem.envs.remote.client import RemoteEnv

            env = RemoteEnv(
                self.remote_url,
                self.env,
                token=self.remote_token,
                env_kwargs=self.env_kwargs or None,
                timeout=self.remote_timeout,
                fallback_urls=self.remote_fallbacks,
            )
        elif isinstance(self.env, str):
            env = make(self.env, **self.env_kwargs)
        else:
            env = self.env(**self.env_kwargs)
        for wrap in self.wrappers:
            env = wrap(env)
        return env


def fault_result(env_id: int, kind: str, reason: str, is_reset: bool) -> Result:
    return (env_id, "", 0.0, False, True, {"fault": f"{kind}: {reason}"}, is_reset)


class InvalidResult(EnvFault):
    """An env returned something outside the step/reset contract (a fault of that env)."""


def exception_fault(env_id: int, exc: BaseException, is_reset: bool) -> Result:
    if isinstance(exc, InvalidResult):
        return fault_result(env_id, "invalid_result", str(exc), is_reset)
    return fault_result(env_id, "exception", describe(exc), is_reset)


# Observation type of each live env, from its last reset: a step must return the same type.
_OBS_TYPES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_FLAGS = (bool, np.bool_)


def check_result(env: Env, kind: str, obs: Any, reward: Any, terminated: Any, truncated: Any, info: Any) -> Result:
    """The values converted to plain Python types, or `InvalidResult` naming what broke the contract."""
    where = f"{env!r}.{kind}"
    if not isinstance(info, dict):
        raise InvalidResult(f"{where} returned info of type {type(info).__name__}; it must be a dict")
    if kind == "reset":
        if isinstance(obs, dict):  # a multi-agent env: per-agent dicts, packed into one row
            with contextlib.suppress(TypeError):
                _OBS_TYPES[env] = dict
            return _packed(kind, obs, reward, terminated, truncated, info, where)
        if not isinstance(obs, (str, list)):
            raise InvalidResult(
                f"{where} returned an observation of type {type(obs).__name__}; use str (or a list of messages)"
            )
        with contextlib.suppress(TypeError):  # not weak-referenceable: skip the type check
            _OBS_TYPES[env] = type(obs)
        return obs, 0.0, False, False, info
    expected = _OBS_TYPES.get(env, (str, list)) if _weakrefable(env) else (str, list)
    if not isinstance(obs, expected):
        names = expected.__name__ if isinstance(expected, type) else "str or list"
        raise InvalidResult(f"{where} returned an observation of type {type(obs).__name__}; its reset returned {names}")
    if isinstance(obs, dict):
        return _packed(kind, obs, reward, terminated, truncated, info, where)
    if isinstance(reward, _FLAGS) or not isinstance(reward, (int, float, np.integer, np.floating)):
        raise InvalidResult(
            f"{where} returned reward {reward!r:.80} of type {type(reward).__name__}; it must be a float"
        )
    reward = float(reward)
    if not math.isfinite(reward):
        raise InvalidResult(f"{where} returned reward {reward}; it must be finite")
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, _FLAGS):
            raise InvalidResult(
                f"{where} returned {name}={flag!r:.80} of type {type(flag).__name__}; it must be a bool"
            )
    return obs, reward, bool(terminated), bool(truncated), info


def _packed(kind: str, *result: Any) -> tuple:
    from jgem.envs.multiagent.base import pack

    try:
        return pack(kind, *result)
    except ValueError as e:
        raise InvalidResult(str(e)) from None


def _weakrefable(env: Env) -> bool:
    try:
        weakref.ref(env)
    except TypeError:
        return False
    return True


def run_command(env: Env, env_id: int, kind: str, arg: Any) -> Result:
    """Run one step or reset on `env` and check its result; exceptions propagate (the caller turns them into
    faults, `InvalidResult` for a malformed result)."""
    if kind == "step":
        try:
            obs, reward, terminated, truncated, info = env.step(arg)
        except (TypeError, ValueError) as e:
            if not _unpacking_error(e):
                raise
            raise InvalidResult(f"{env!r}.step must return (obs, reward, terminated, truncated, info): {e}") from e
        obs, reward, terminated, truncated, info = check_result(env, kind, obs, reward, terminated, truncated, info)
        return (env_id, obs, reward, terminated, truncated, info, False)
    try:
        obs, info = env.reset(seed=arg)
    except (TypeError, ValueError) as e:
        if not _unpacking_error(e):
            raise
        raise InvalidResult(f"{env!r}.reset must return (obs, info): {e}") from e
    obs, *_, info = check_result(env, kind, obs, None, None, None, info)
    return (env_id, obs, 0.0, False, False, info, True)


def _unpacking_error(e: BaseException) -> bool:
    """True when `e` came from unpacking the env's return value here, not from inside the env."""
    tb = e.__traceback__
    return tb is not None and tb.tb_next is None and ("unpack" in str(e))


def describe(exc: BaseException) -> str:
    """`Type: message (file:line)` of the innermost frame: enough to find the bug from an info dict."""
    tb = traceback.extract_tb(exc.__traceback__)
    where = f" ({tb[-1].filename}:{tb[-1].lineno})" if tb else ""
    return f"{type(exc).__name__}: {exc}{where}"


def close_quietly(env: Env | None) -> None:
    if env is not None:
        with contextlib.suppress(Exception):  # a broken env must not break shutdown
            env.close()
