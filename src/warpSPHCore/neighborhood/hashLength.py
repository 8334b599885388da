"""Hash-table lengths (`HashMapLengthMode`): host arithmetic from shapes, never a sync."""

from __future__ import annotations

import functools
import numbers

__all__ = ["getNextPrime"]


def _isPrime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


@functools.lru_cache(maxsize=256)
def _nextPrime(n: int) -> int:
    candidate = max(n + 1, 2)
    while not _isPrime(candidate):
        candidate += 1
    return candidate


def getNextPrime(n: int) -> int:
    """Smallest prime strictly greater than ``n`` (host trial division, cached).

    Args:
        n: a Python int (negative values give 2).

    Returns:
        int: e.g. ``getNextPrime(0) == 2``, ``getNextPrime(7) == 11``, ``getNextPrime(4096) == 4099``.
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral):
        raise TypeError(f"getNextPrime: n must be a Python int, found {type(n).__name__}")
    return _nextPrime(int(n))
