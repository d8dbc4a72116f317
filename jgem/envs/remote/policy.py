"""Which `env_kwargs` a client may pass to the env server: the operator's allow-list, data roots and URL prefixes.

A token holder must not be able to make the server read its own files (`math:file` with `path=/etc/...`) or
send requests elsewhere (DeepSearch's `search_url=`). So a kwarg is refused unless its name is allowed, and a
string in it that looks like a data path must resolve under a data root, and one that looks like a URL must
start with an allowed prefix. The checks read no file: a refusal never says whether a path exists.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

ANY = "*"
# Kwarg names whose string values are data paths even without a separator ("rows.jsonl" is one in the cwd).
PATH_NAMES = frozenset({"path", "paths", "questions", "corpus", "file", "dir", "data", "root"})
PATH_SUFFIXES = ("_path", "_paths", "_file", "_files", "_dir", "_dirs", "_root")
URL_SUFFIXES = ("url", "urls", "uri", "endpoint")
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


class KwargRefused(ValueError):
    """A kwarg the operator does not allow; `name` is the kwarg."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == r or path.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


@dataclass(frozen=True)
class KwargPolicy:
    """`allow`: kwarg names clients may pass (`"*"`: any name); `data_roots`: directories data paths must
    resolve under (symlinks followed); `url_prefixes`: URLs must start with one of these."""

    allow: tuple[str, ...] = ()
    data_roots: tuple[str, ...] = ()
    url_prefixes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "data_roots", tuple(os.path.realpath(r) for r in self.data_roots))

    def check(self, env_kwargs: dict[str, Any] | None) -> None:
        """Raises `KwargRefused` naming the first kwarg the policy refuses."""
        for name, value in (env_kwargs or {}).items():
            if ANY not in self.allow and name not in self.allow:
                allowed = ", ".join(self.allow) or "none"
                raise KwargRefused(
                    name,
                    f"env kwarg {name!r} is not allowed by this server (allowed: {allowed}); "
                    "the operator allows kwargs with jgem-serve --allow-kwarg NAME",
                )
            lowered = name.lower()
            for s in _strings(value):
                if lowered.endswith(URL_SUFFIXES) or ("://" in s and _SCHEME.match(s)):
                    self._check_url(name, s)
                elif (
                    lowered in PATH_NAMES
                    or lowered.endswith(PATH_SUFFIXES)
                    or "/" in s
                    or "\\" in s
                    or os.sep in s
                    or s.startswith(("~", "."))
                ):
                    self._check_path(name, s)

    def _check_url(self, name: str, url: str) -> None:
        if not any(url.startswith(p) for p in self.url_prefixes):
            allowed = ", ".join(self.url_prefixes) or "none"
            raise KwargRefused(
                name,
                f"env kwarg {name!r} names a URL this server may not contact (allowed prefixes: {allowed}); "
                "the operator allows URLs with jgem-serve --allow-url PREFIX",
            )

    def _check_path(self, name: str, path: str) -> None:
        # Both the literal path (relative to the server's cwd) and its ~-expansion must stay under a root.
        candidates = {os.path.realpath(path), os.path.realpath(os.path.expanduser(path))}
        if not self.data_roots or not all(_under(c, self.data_roots) for c in candidates):
            raise KwargRefused(
                name,
                f"env kwarg {name!r} names a path outside this server's data roots "
                f"({', '.join(self.data_roots) or 'none configured'}); "
                "the operator adds roots with jgem-serve --data-root DIR",
            )
