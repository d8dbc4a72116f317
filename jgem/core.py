"""Env and Wrapper: the GEM-compatible contract every jgem environment keeps.

`reset(seed=None) -> (obs, info)` and `step(action) -> (obs, reward, terminated, truncated, info)`.
Observations and actions are strings (the chat wrapper's observations are message lists).
An action that is not a `str` is a caller bug, not a move: every env's `step` raises `TypeError` for it
(checked here, once for all subclasses), so no env turns it into a format error or an AttributeError.
Each env owns a `numpy.random.Generator` (`self.np_random`); nothing touches global RNG state.
"""

from __future__ import annotations

import abc
import copy
import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

StepResult = tuple[Any, float, bool, bool, dict[str, Any]]


class JgemError(Exception):
    """Base class of jgem's own errors."""


class EnvFault(JgemError):
    """An environment failed (raised, hung past its timeout, or its worker died)."""


@dataclass(frozen=True)
class EnvSpec:
    """How to build one env id: an entry point ("module:Class" or a callable) and default kwargs. `jgem.make` sets
    it on the env it builds (`Env.spec`, with the kwargs it was built with)."""

    id: str
    entry_point: str | Callable[..., Env]
    kwargs: dict[str, Any] = field(default_factory=dict)

    def load(self) -> Callable[..., Env]:
        if callable(self.entry_point):
            return self.entry_point
        module_name, _, attr = self.entry_point.partition(":")
        if not attr:
            raise ValueError(f"entry point {self.entry_point!r} of {self.id!r} is not 'module:Class'")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            raise ImportError(
                f"env {self.id!r} needs module {module_name!r}, which failed to import ({e}); "
                "install the extra that provides it (see docs/environments.md)"
            ) from e
        return getattr(module, attr)


class Env(abc.ABC):
    """A multi-turn text environment.

    Subclasses call `super().__init__(seed=seed)` and, in `reset`, `super().reset(seed)` first:
    a given seed reseeds `self.np_random`; `None` continues the env's own stream.
    """

    spec: EnvSpec | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        step = cls.__dict__.get("step")
        if step is not None and not getattr(step, "__isabstractmethod__", False):
            cls.step = _checks_action(step)

    def __init__(self, seed: int | None = None) -> None:
        self.np_random: np.random.Generator = np.random.default_rng(seed)

    @abc.abstractmethod
    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is not None:
            self.np_random = np.random.default_rng(seed)
        return "", {}

    @abc.abstractmethod
    def step(self, action: str) -> StepResult: ...

    def sample_random_action(self) -> str:
        """A random, well-formed action for the current state (used by random agents)."""
        raise NotImplementedError(f"{type(self).__name__} has no random action sampler")

    def get_state(self) -> Any:
        """A deep copy of everything that determines future behaviour (RNG included)."""
        return copy.deepcopy({k: v for k, v in vars(self).items() if k != "spec"})

    def set_state(self, state: Any) -> None:
        """Restore a state from `get_state`; the env then behaves exactly as the one it came from."""
        vars(self).update(copy.deepcopy(state))

    def spawn(self, same_state: bool = False) -> Env:
        """A new env with the same configuration (GEM API); with `same_state`, a clone of this one."""
        clone = copy.deepcopy(self)
        if not same_state:
            clone.np_random = np.random.default_rng(self.np_random.integers(2**63))
        return clone

    def close(self) -> None:  # noqa: B027 - optional hook, not abstract
        """Release external resources (processes, sockets). Idempotent."""

    @property
    def unwrapped(self) -> Env:
        return self

    def __repr__(self) -> str:
        name = self.spec.id if self.spec is not None else type(self).__name__
        return f"<{name}>"


def check_action(action: Any) -> str:
    """`action` if it is a str, else `TypeError` saying what arrived."""
    if not isinstance(action, str):
        raise TypeError(f"an action must be a str, got {type(action).__name__} {action!r:.60}")
    return action


def _checks_action(step: Any) -> Any:
    if getattr(step, "_jgem_checks_action", False):
        return step

    @functools.wraps(step)
    def checked(self: Env, action: Any) -> StepResult:
        if not isinstance(action, str):
            check_action(action)
        return step(self, action)

    checked._jgem_checks_action = True  # type: ignore[attr-defined]
    return checked


class Wrapper(Env):
    """Wraps an env; attributes it does not define are looked up on the wrapped env."""

    def __init__(self, env: Env) -> None:
        self.env = env

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)

    @property
    def np_random(self) -> np.random.Generator:  # type: ignore[override]
        return self.env.np_random

    @property
    def spec(self) -> EnvSpec | None:  # type: ignore[override]
        return self.env.spec

    def reset(self, seed: int | None = None) -> tuple[Any, dict[str, Any]]:
        return self.env.reset(seed=seed)

    def step(self, action: str) -> StepResult:
        return self.env.step(action)

    def sample_random_action(self) -> str:
        return self.env.sample_random_action()

    def get_state(self) -> Any:
        own = copy.deepcopy({k: v for k, v in vars(self).items() if k != "env"})
        return {"env": self.env.get_state(), "wrapper": own}

    def set_state(self, state: Any) -> None:
        self.env.set_state(state["env"])
        vars(self).update(copy.deepcopy(state["wrapper"]))

    def spawn(self, same_state: bool = False) -> Env:
        clone = copy.copy(self)
        vars(clone).update(copy.deepcopy({k: v for k, v in vars(self).items() if k != "env"}))
        clone.env = self.env.spawn(same_state=same_state)
        return clone

    def close(self) -> None:
        self.env.close()

    @property
    def unwrapped(self) -> Env:
        return self.env.unwrapped

    def __repr__(self) -> str:
        return f"<{type(self).__name__}{self.env!r}>"
