"""Open addressing over a packed vector: the key maps of the prefix cache (``BlockPool``) and
of the CPU and disk offload tiers (``CpuTier``, ``DiskTier``).

A map is a ``vec[i64]`` of cells, cell ``i`` holding its key at ``2 i`` and its value at
``2 i + 1`` (one cache line a probe); a value of ``EMPTY`` marks a free cell and ends a probe
sequence. Probing is linear from the key's home cell, whose index mixes the key's high bits in
(the keys of one token run differ high up, ``kvsim.workload.tokens.StreamKeys``); ``mask`` is
the number of cells less one (a power of two), and the owner keeps the map at most half full.

A value is an index into the owner's back-pointer vector ``where`` (``where[value]`` is the
value's cell). ``remove_cell`` leaves no tombstone: it moves each later entry of the removed
key's probe run that may move back into the hole (deletion with backward shift, Knuth, *The Art
of Computer Programming* vol. 3, 6.4, Algorithm R), updating ``where`` for each. Probe runs are
then exactly as long as the live keys make them, and a map under churn never needs rebuilding.
"""

from __future__ import annotations

from typing import Final

from librt.vecs import vec
from mypy_extensions import i64

EMPTY: Final = -1  # a free cell


def home_cell(key: i64, mask: i64) -> i64:
    """The cell a probe for ``key`` starts at."""
    return (key ^ (key >> 32)) & mask


def warm_homes(cells: vec[i64], mask: i64, keys: vec[i64], start: i64, stop: i64) -> i64:
    """Read the home cell of each of ``keys[start:stop]`` ahead of probing them one by one:
    the reads do not depend on each other, so the processor overlaps their cache misses, where
    a probe loop waits for each in turn (its branch depends on what it read). Returns a sum of
    what was read, which nothing uses (it keeps the reads from being dropped)."""
    total: i64 = 0
    for n in range(start, stop):
        key = keys[n]
        total += cells[2 * ((key ^ (key >> 32)) & mask) + 1]
    return total


def warm_cells(cells: vec[i64], where: vec[i64], items: vec[i64], start: i64, stop: i64) -> i64:
    """``warm_homes`` for entries about to be removed: read the cell ``where[item]`` of each of
    ``items[start:stop]`` that has one (``where[item] >= 0``). Returns a sum nothing uses."""
    total: i64 = 0
    for n in range(start, stop):
        cell = where[items[n]]
        if cell >= 0:
            total += cells[2 * cell + 1]
    return total


def find_cell(cells: vec[i64], mask: i64, key: i64) -> i64:
    """The cell holding ``key``, or -1."""
    i = home_cell(key, mask)
    while True:
        value = cells[2 * i + 1]
        if value == EMPTY:
            return -1
        if cells[2 * i] == key:
            return i
        i = (i + 1) & mask


def probe_insert(cells: vec[i64], mask: i64, key: i64) -> tuple[i64, bool]:
    """``(cell, True)`` for the cell holding ``key``; else ``(cell, False)`` for the empty cell
    ending its probe sequence, where a new ``key`` goes."""
    i = home_cell(key, mask)
    while True:
        value = cells[2 * i + 1]
        if value == EMPTY:
            return i, False
        if cells[2 * i] == key:
            return i, True
        i = (i + 1) & mask


def empty_cells(num_keys: i64) -> vec[i64]:
    """An empty map with room for ``num_keys`` keys at most half full: the smallest power of
    two of cells (16 at least) that is, so that linear probing stays short and the map small
    enough to stay in cache. Its mask is ``len(cells) // 2 - 1``."""
    num_cells: i64 = 16
    while num_cells < 2 * num_keys:
        num_cells *= 2
    return vec[i64]([EMPTY] * (2 * num_cells))  # (keys unread while empty)


def insert_new(cells: vec[i64], mask: i64, key: i64, value: i64) -> i64:
    """Map ``key``, which the map lacks, to ``value``; returns its cell.

    Raises:
        RuntimeError: the map holds ``key`` already (its owner's invariant is broken)."""
    i, found = probe_insert(cells, mask, key)
    if found:
        raise RuntimeError(f"key map invariant violated: key {key} inserted twice")
    cells[2 * i] = key
    cells[2 * i + 1] = value
    return i


def remove_cell(cells: vec[i64], mask: i64, hole: i64, where: vec[i64]) -> None:
    """Empty cell ``hole``, shifting back the later entries of its probe run that a lookup
    would otherwise no longer reach (see the module docstring); ``where[value]`` follows each
    moved entry."""
    j = hole
    while True:
        j = (j + 1) & mask
        value = cells[2 * j + 1]
        if value == EMPTY:
            break
        h = home_cell(cells[2 * j], mask)
        # the entry at j may fill the hole iff the hole lies on its probe path h .. j
        if (hole <= j and (h <= hole or h > j)) or (hole > j and h <= hole and h > j):
            cells[2 * hole] = cells[2 * j]
            cells[2 * hole + 1] = value
            where[value] = hole
            hole = j
    cells[2 * hole + 1] = EMPTY
