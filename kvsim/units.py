"""Units used across kvsim: token, block and byte counts as NewTypes, and ceiling division.

Simulated time is always seconds (a float). KV memory is counted in token *slots*: one slot holds
one token's keys and values across all layers (``ModelSpec.bytes_per_token`` bytes).
"""

from __future__ import annotations

from typing import NewType

Tokens = NewType("Tokens", int)
Blocks = NewType("Blocks", int)
Bytes = NewType("Bytes", int)

KiB = 1024
MiB = 1024**2
GiB = 1024**3
GB = 1000**3


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers: ``cdiv(37, 16) == 3``."""
    return -(a // -b)


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= ``n`` (``n >= 1``): ``next_power_of_2(25) == 32``."""
    if n < 1:
        raise ValueError(f"next_power_of_2: n must be >= 1, got {n}")
    return 1 << (n - 1).bit_length()
