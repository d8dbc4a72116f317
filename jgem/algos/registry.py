"""A named registry: what `--algorithm`, `--learner.policy-loss`, `--learner.kl-estimator`, `--learner.aggregation`
and `--learner.schedule` choose from (docs/algorithms.md). Light: no jax here, so the config can read the names."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar, overload

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

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}: {', '.join(self._entries)})"
