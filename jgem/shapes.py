"""Padded sizes: jitted programs see a few shapes (powers of two), so they compile a bounded number of times."""

from __future__ import annotations


def next_pow2(n: int) -> int:
    """The smallest power of two >= n, for n >= 1."""
    return 1 << max(0, (n - 1).bit_length())
