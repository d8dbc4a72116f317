"""Env registry: ids map to lazy "module:Class" entry points plus default kwargs (GEM style). `Registry`, a generic
named registry, lives here, below jgem.envs, so that envs can use it too (the tool-call formats' `FORMATS`)."""

from __future__ import annotations

import contextlib
import difflib
import importlib
import inspect
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Generic, TypeVar, overload

from jgem.core import Env, EnvSpec

# The built-in suites register their ids from `jgem.envs`, which `jgem/__init__.py` imports: any `import jgem.*`
# runs it first, so they are here before anyone looks an id up.
_REGISTRY: dict[str, EnvSpec] = {}


def register(env_id: str, entry_point: str | Callable[..., Env], *, overwrite: bool = False, **kwargs: Any) -> None:
    """Register `env_id`; `kwargs` are the defaults passed to the entry point by `make`."""
    if not overwrite and env_id in _REGISTRY:
        raise ValueError(f"env id {env_id!r} is already registered; pass overwrite=True to replace it")
    _REGISTRY[env_id] = EnvSpec(env_id, entry_point, dict(kwargs))


def import_modules(modules: Sequence[str]) -> None:
    """Import each module (e.g. one that calls `register` for custom env ids), naming the one that fails."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ImportError(
                f"cannot import {module!r} (given to register env ids): {e}; check the name and that its "
                "package is on PYTHONPATH"
            ) from e


def spec(env_id: str) -> EnvSpec:
    try:
        return _REGISTRY[env_id]
    except KeyError:
        close = difflib.get_close_matches(env_id, list(_REGISTRY), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else "; see jgem.list_envs()"
        raise KeyError(f"unknown env id {env_id!r}{hint}") from None


def list_envs(prefix: str = "") -> list[str]:
    """All registered ids that start with `prefix`, sorted."""
    return sorted(i for i in _REGISTRY if i.startswith(prefix))


def _check_kwargs(env_id: str, cls: Callable[..., Env], kwargs: dict[str, Any]) -> None:
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    valid = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for name in kwargs:
        if name not in valid:
            close = difflib.get_close_matches(name, valid, n=2, cutoff=0.5)
            hint = f"did you mean {', '.join(map(repr, close))}? " if close else ""
            raise TypeError(
                f"{env_id!r} got an unexpected parameter {name!r}; {hint}valid parameters: {', '.join(valid)}"
            )


def make(env_id: str, **kwargs: Any) -> Env:
    """Build a registered env; `kwargs` override the registered defaults."""
    s = spec(env_id)
    cls = s.load()
    merged = {**s.kwargs, **kwargs}
    _check_kwargs(env_id, cls, merged)
    env = cls(**merged)
    with contextlib.suppress(AttributeError):  # wrappers expose spec read-only; theirs comes from the inner env
        env.spec = EnvSpec(env_id, s.entry_point, merged)
    return env


T = TypeVar("T")


class Registry(Generic[T]):
    """Entries by name, in registration order. `register(name, value)` or `@register(name)`; an unknown name gets
    an error listing the known ones."""

    def __init__(self, what: str) -> None:
        self.what = what  # e.g. "policy loss": named in errors
        self._entries: dict[str, T] = {}

    @overload
    def register(self, name: str, value: None = None, *, overwrite: bool = False) -> Callable[[T], T]: ...
    @overload
    def register(self, name: str, value: T, *, overwrite: bool = False) -> T: ...

    def register(self, name, value=None, *, overwrite=False):
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {self.what} needs a non-empty name, got {name!r}")

        def add(v: T) -> T:
            if name in self._entries and not overwrite and self._entries[name] is not v:
                raise ValueError(f"{self.what} {name!r} is registered already; pass overwrite=True to replace it")
            self._entries[name] = v
            return v

        return add if value is None else add(value)

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise ValueError(f"unknown {self.what} {name!r}; choose one of {', '.join(self._entries)}") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def name_errors(self, name: object, label: str, *, also: Sequence[str] = ()) -> list[str]:
        """A config's check of a name: [] when `name` is registered (or one of `also`, names that mean none), else
        one message, `{label} 'name' is unknown; choose one of ...` (`label` names the field)."""
        if name in also or name in self._entries:
            return []
        return [f"{label} {name!r} is unknown; choose one of {', '.join((*also, *self._entries))}"]

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}: {', '.join(self._entries)})"
