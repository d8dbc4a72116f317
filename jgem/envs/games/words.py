"""English word lists shipped with jgem (built by scripts/build_word_lists.py from `wordfreq`).

`load_words()` gives ~30k frequent lowercase a-z words of length 2..12 (valid guesses);
`load_words(common=True)` the ~5k most frequent dictionary words (secret words). Both are ordered
by frequency, most frequent first, and every common word is also in the full list.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

_DATA = Path(__file__).resolve().parent / "data"


@cache
def _read(name: str) -> tuple[str, ...]:
    path = _DATA / name
    if not path.exists():
        raise FileNotFoundError(f"word list {path} is missing; rebuild it with scripts/build_word_lists.py")
    return tuple(w for w in path.read_text().split() if w)


@cache
def load_words(length: int | None = None, *, common: bool = False) -> tuple[str, ...]:
    """Lowercase English words, most frequent first; only words of `length` letters if given."""
    words = _read("common.txt" if common else "words.txt")
    if length is None:
        return words
    if length < 1:
        raise ValueError(f"word length must be positive, got {length}")
    return tuple(w for w in words if len(w) == length)


@cache
def word_set(length: int | None = None) -> frozenset[str]:
    """The full (valid-guess) list as a set, for membership tests."""
    return frozenset(load_words(length))
