"""Memory-map frames (``kvsim.engine.frames``) reduced to a grid of cells for the HTML report's
canvas.

A cell covers ``slots_per_cell`` consecutive slots of the pool (a paged pool: whole blocks). Per
frame and cell the report keeps the owner (the request holding most of the cell's slots), and the
cell's slots that hold token states (live), are held by a request (allocated), or are
unusable free memory (holes), each as a 0-255 share of ``slots_per_cell``:

    slots:  |<------------------------- slots_per_cell -------------------------->|
            | live (owner's colour) | allocated, empty | hole (hatched) | free     |

A hole is free memory that cannot serve the request at the head of the queue, as the recorder
counts external fragmentation: a contiguous extent shorter than ``head_need_slots`` (buddy: a free
power-of-two chunk), every free block of a paged pool whose free total is short of the head's need,
and slots no request can hold (a paged pool's null block and remainder, buddy rounding).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kvsim.base.units import cdiv, next_power_of_2
from kvsim.config.allocators import PAGED_ALLOCATORS, POWER_OF_TWO_SLABS

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class PoolShape:
    """What the map needs to know about a run's pool.

    Attributes:
        capacity_slots: pool size in token slots.
        allocator: ``cache.allocator`` of the run (``paged`` or a slab policy).
        block_size_slots: a paged pool's block size in slots, ``None`` for slabs.
        reserved: ``(start_slot, num_slots)`` ranges no request can hold (a paged pool's null
            block and remainder).
        max_chunk_slots: a buddy pool's largest chunk in slots, ``None`` otherwise.
    """

    capacity_slots: int
    allocator: str
    block_size_slots: int | None = None
    reserved: tuple[tuple[int, int], ...] = ()
    max_chunk_slots: int | None = None

    @classmethod
    def of_run(cls, config: dict[str, Any], summary: dict[str, Any]) -> PoolShape:
        """The pool of a run from its ``config.json`` (as a dict) and ``summary.json``."""
        cache = config["cache"]
        capacity = int(summary["capacity_tokens"])
        usable = int(summary.get("usable_capacity_tokens", capacity))
        allocator = str(cache["allocator"])
        if allocator in PAGED_ALLOCATORS:
            # a hybrid run's blocks (raised for a state group's page), else the configured
            b = int(summary.get("kv_cache_block_size_tokens", cache["block_size_tokens"]))
            num_blocks = capacity // b
            reserved = [(0, b)] if usable < num_blocks * b else []  # vLLM v1's null block 0
            if num_blocks * b < capacity:
                reserved.append((num_blocks * b, capacity - num_blocks * b))
            return cls(capacity, allocator, b, tuple(reserved))
        if allocator in POWER_OF_TWO_SLABS:
            max_len = int(summary["max_model_len"])
            return cls(capacity, allocator, max_chunk_slots=next_power_of_2(max_len))
        return cls(capacity, allocator)


@dataclass(frozen=True)
class CellGrid:
    """How the pool is cut into cells.

    Attributes:
        slots_per_cell: slots per cell (a multiple of the block size for a paged pool).
        num_cells: ``cdiv(capacity_slots, slots_per_cell)``; the last cell may be partial.
    """

    slots_per_cell: int
    num_cells: int

    @classmethod
    def for_pool(cls, pool: PoolShape, max_cells: int) -> CellGrid:
        """The finest grid of at most ``max_cells`` cells (whole blocks for a paged pool)."""
        unit = pool.block_size_slots or 1
        per_cell = unit * cdiv(cdiv(pool.capacity_slots, max_cells), unit)
        return cls(per_cell, cdiv(pool.capacity_slots, per_cell))


@dataclass(frozen=True)
class FrameCells:
    """One frame on the grid: each array has ``num_cells`` entries.

    Attributes:
        owner: int32 req_id holding most of the cell's slots, -1 for none.
        live, held, hole: uint8 shares (0-255) of ``slots_per_cell`` holding token states, held
            by requests (live included), and unusable free memory.
        totals: slots over the whole pool: ``live``, ``held``, ``hole``, ``free``.
    """

    owner: npt.NDArray[np.int32]
    live: npt.NDArray[np.uint8]
    held: npt.NDArray[np.uint8]
    hole: npt.NDArray[np.uint8]
    totals: dict[str, int]


def interval_cells(
    starts: IntArray, ends: IntArray, slots_per_cell: int
) -> tuple[IntArray, IntArray, IntArray]:
    """Split slot ranges ``[starts, ends)`` at cell boundaries.

    Returns:
        ``(row, cell, num_slots)``, int64[m] each: range ``row`` covers ``num_slots`` slots of
        ``cell`` (empty ranges give no entry).
    """
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    rows = np.flatnonzero(keep)
    first = starts // slots_per_cell
    counts = (ends - 1) // slots_per_cell - first + 1
    idx = np.repeat(np.arange(len(starts)), counts)
    offsets = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)
    cell = first[idx] + offsets
    lo = np.maximum(starts[idx], cell * slots_per_cell)
    hi = np.minimum(ends[idx], (cell + 1) * slots_per_cell)
    return rows[idx], cell, hi - lo


def free_extents(starts: IntArray, ends: IntArray, capacity_slots: int) -> list[tuple[int, int]]:
    """``(start_slot, num_slots)`` gaps of ``[0, capacity_slots)`` not covered by the sorted,
    non-overlapping ranges ``[starts, ends)``."""
    bounds_lo = np.concatenate([[0], ends])
    bounds_hi = np.concatenate([starts, [capacity_slots]])
    return [(int(a), int(b - a)) for a, b in zip(bounds_lo, bounds_hi, strict=True) if b > a]


def buddy_chunks(start: int, num_slots: int, max_chunk_slots: int) -> list[tuple[int, int]]:
    """A free gap as the buddy allocator holds it: the largest aligned power-of-two chunks (at
    most ``max_chunk_slots``), lowest address first (``BuddyAllocator`` merges free buddies)."""
    chunks: list[tuple[int, int]] = []
    addr, end = start, start + num_slots
    while addr < end:
        size = min(max_chunk_slots, addr & -addr if addr else max_chunk_slots)
        while size > end - addr:
            size //= 2
        chunks.append((addr, size))
        addr += size
    return chunks


def hole_ranges(
    pool: PoolShape,
    starts: IntArray,
    num_slots: IntArray,
    head_need_slots: int,
) -> list[tuple[int, int]]:
    """Unusable free memory of one frame (see the module docstring), ``(start_slot, num_slots)``.

    Args:
        pool: the run's pool.
        starts, num_slots: int64[n] held slabs or blocks, sorted by ``starts``.
        head_need_slots: free slots the head of the queue needs to be admitted (0: none waits).
    """
    ends = starts + num_slots
    holes = list(pool.reserved)
    if pool.max_chunk_slots is not None:  # a slab of s slots takes a chunk of next_pow2(s)
        chunk_ends = starts + np.array([next_power_of_2(int(n)) for n in num_slots], np.int64)
        holes += [(int(e), int(c - e)) for e, c in zip(ends, chunk_ends, strict=True) if c > e]
        ends = chunk_ends
    taken = sorted(
        [(int(s), int(e)) for s, e in zip(starts, ends, strict=True)]
        + [(s, s + n) for s, n in pool.reserved]
    )
    taken_starts = np.array([s for s, _ in taken], np.int64)
    taken_ends = np.array([e for _, e in taken], np.int64)
    gaps = free_extents(taken_starts, taken_ends, pool.capacity_slots)
    if pool.max_chunk_slots is not None:
        gaps = [c for s, n in gaps for c in buddy_chunks(s, n, pool.max_chunk_slots)]
    if pool.block_size_slots is not None:  # paged: any free block serves; only the total counts
        if sum(n for _, n in gaps) < head_need_slots:
            holes += gaps
    else:
        holes += [(s, n) for s, n in gaps if n < head_need_slots]
    return holes


def frame_cells(
    pool: PoolShape,
    grid: CellGrid,
    rows: dict[str, IntArray],
    head_need_slots: int,
) -> FrameCells:
    """One frame's cells.

    Args:
        pool: the run's pool.
        grid: the cells.
        rows: the frame's ``mapframes`` columns ``req_id``, ``start_slot``, ``num_slots``,
            ``num_tokens`` (int64[n] each, sorted by ``start_slot``).
        head_need_slots: free slots the head of the queue needs (0: none waits).
    """
    per = grid.slots_per_cell
    starts, sizes = rows["start_slot"], rows["num_slots"]
    holes = hole_ranges(pool, starts, sizes, head_need_slots)
    hole_starts = np.array([s for s, _ in holes], np.int64)
    hole_ends = hole_starts + np.array([n for _, n in holes], np.int64)

    def slots_per_cell(lo: IntArray, hi: IntArray) -> IntArray:
        _, cell, n = interval_cells(lo, hi, per)
        return np.bincount(cell, weights=n, minlength=grid.num_cells).astype(np.int64)

    row, cell, overlap = interval_cells(starts, starts + sizes, per)
    held = np.bincount(cell, weights=overlap, minlength=grid.num_cells).astype(np.int64)
    live = slots_per_cell(starts, starts + np.minimum(rows["num_tokens"], sizes))
    hole = slots_per_cell(hole_starts, hole_ends)
    owner = np.full(grid.num_cells, -1, np.int32)
    order = np.lexsort((overlap, cell))  # per cell, the largest overlap last
    last = order[np.r_[cell[order][1:] != cell[order][:-1], True]] if len(order) else order
    owner[cell[last]] = rows["req_id"][row[last]]

    def share(x: IntArray) -> npt.NDArray[np.uint8]:
        return np.rint(255 * x / per).astype(np.uint8)

    totals = {"live": int(live.sum()), "held": int(held.sum()), "hole": int(hole.sum())}
    totals["free"] = pool.capacity_slots - totals["held"] - totals["hole"]
    return FrameCells(owner, share(live), share(held), share(hole), totals)
