"""Units used across kvsim: token, block and byte counts as NewTypes, ceiling division, and how
GiB and counts read in messages (``format_gib``, ``plural``).

Simulated time is always seconds (a float). KV memory is counted in token *slots*: one slot holds
one token's keys and values across all layers (``ModelSpec.bytes_per_token`` bytes).
"""

from __future__ import annotations

import math
from typing import NewType

Tokens = NewType("Tokens", int)
Blocks = NewType("Blocks", int)
Bytes = NewType("Bytes", int)

SimTime = int | float
"""A simulated time in seconds as SimPy keeps it: an int until a float duration is added (a run
whose rows all lie at time 0 keeps int times). A union, not ``float``, so that the compiled
engine (``kvsim.native``: mypyc turns a ``float`` into a C double) keeps the int."""

KiB = 1024
MiB = 1024**2
GiB = 1024**3
GB = 1000**3
# bits of one MXFP4 value with its share of the scale (OCP Microscaling Formats v1.0: a block
# of 32 4-bit E2M1 values shares one 8-bit E8M0 scale): 4 + 8 / 32
MXFP4_BITS = 4.25


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative integers: ``cdiv(37, 16) == 3``."""
    return -(a // -b)


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= ``n`` (``n >= 1``): ``next_power_of_2(25) == 32``."""
    if n < 1:
        raise ValueError(f"next_power_of_2: n must be >= 1, got {n}")
    return 1 << (n - 1).bit_length()


def prev_power_of_2(n: int) -> int:
    """Largest power of two <= ``n`` (``n >= 1``): ``prev_power_of_2(25) == 16``."""
    if n < 1:
        raise ValueError(f"prev_power_of_2: n must be >= 1, got {n}")
    return 1 << (n.bit_length() - 1)


def format_gib(num_bytes: float, round_up: bool = False) -> str:
    """``num_bytes`` in GiB to three significant digits, one decimal at least: ``"0.25 GiB"``
    (not ``"0.2"``), ``"1.56 GiB"``, ``"16.0 GiB"``, ``"131.4 GiB"``; ``round_up`` for an amount
    that is a minimum (a budget given as the text is then enough: 3.0132 -> ``"3.02 GiB"``)."""
    value = num_bytes / GiB
    if round_up and value > 0:
        digits = 1 if abs(value) >= 100 else 2 - math.floor(math.log10(abs(value)))
        value = math.ceil(round(value * 10**digits, 6)) / 10**digits
    text = f"{value:,.1f}" if abs(value) >= 100 else f"{value:#.3g}"
    if "e" not in text:  # "0.250" -> "0.25", "2.00" -> "2.0"
        text = text.rstrip("0")
        text += "0" if text.endswith(".") else ""
    return f"{text} GiB"


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` and ``noun``, plural unless the count is 1: ``"1 request"``, ``"1,000 requests"``
    (``nouns``: the plural when it is not ``noun + "s"``)."""
    return f"{count:,} {noun if count == 1 else nouns or noun + 's'}"
