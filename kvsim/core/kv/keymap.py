"""Open addressing over a packed vector: the key maps of the prefix cache (``BlockPool``) and
of the CPU offload tier (``CpuTier``).

A map is a ``vec[i64]`` of cells, cell ``i`` holding its key at ``2 i`` and its value at
``2 i + 1`` (one cache line a probe); a value of ``EMPTY`` ends a probe sequence, one of
``GONE`` (an evicted key) does not. Probing is linear from the key's home cell, whose index
mixes the key's high bits in (the keys of one token run differ high up,
``kvsim.workload.tokens.StreamKeys``); ``mask`` is the number of cells less one (a power of
two). The owner keeps the map at most half full, evicted cells included, and rebuilds it.
"""

from __future__ import annotations

from typing import Final

from librt.vecs import vec
from mypy_extensions import i64

EMPTY: Final = -1  # a cell never used
GONE: Final = -2  # a cell whose key was evicted (probes go on past it)


def find_cell(cells: vec[i64], mask: i64, key: i64) -> i64:
    """The cell holding ``key``, or -1."""
    i = (key ^ (key >> 32)) & mask
    while True:
        value = cells[2 * i + 1]
        if value == EMPTY:
            return -1
        if value >= 0 and cells[2 * i] == key:
            return i
        i = (i + 1) & mask


def probe_insert(cells: vec[i64], mask: i64, key: i64) -> tuple[i64, bool]:
    """``(cell, True)`` for the cell holding ``key``; else ``(cell, False)`` for the cell a new
    ``key`` goes in: the first evicted one on its probe sequence, or the empty one ending it."""
    i = (key ^ (key >> 32)) & mask
    reuse: i64 = -1
    while True:
        value = cells[2 * i + 1]
        if value == EMPTY:
            return (reuse if reuse >= 0 else i), False
        if value == GONE:
            if reuse < 0:
                reuse = i
        elif cells[2 * i] == key:
            return i, True
        i = (i + 1) & mask
