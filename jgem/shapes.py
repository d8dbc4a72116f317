"""Padded sizes: jitted programs see a few shapes (powers of two, or a few steps per doubling), so they compile a
bounded number of times."""

from __future__ import annotations


def next_pow2(n: int) -> int:
    """The smallest power of two >= n, for n >= 1."""
    return 1 << max(0, (n - 1).bit_length())


def bucket(n: int, per_doubling: int = 1) -> int:
    """The smallest of `per_doubling` evenly spaced sizes between each power of two and the next that is >= n
    (n >= 1): the multiples of `next_pow2(n) / (2 * per_doubling)`. 1 gives `next_pow2(n)` (up to half a bucket
    is padding); 4 gives 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, ... (at most a fifth)."""
    p = next_pow2(n)
    step = max(1, p // (2 * per_doubling))
    return -(-n // step) * step
