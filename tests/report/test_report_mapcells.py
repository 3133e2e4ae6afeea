"""Memory-map cells: hand-computed tiny pools, and holes cross-checked against real allocators."""

from __future__ import annotations

import numpy as np
import pytest

from kvsim.engine.frames import ownership_rows
from kvsim.engine.recorder import categorize, queue_head
from kvsim.view.report.mapcells import (
    CellGrid,
    PoolShape,
    buddy_chunks,
    frame_cells,
    hole_ranges,
    interval_cells,
)
from tests.conftest import make_request, small_allocator


def rows_of(table: list[tuple[int, int, int, int]]) -> dict[str, np.ndarray]:
    """``(req_id, start_slot, num_slots, num_tokens)`` tuples as mapframes columns."""
    cols = np.array(sorted(table, key=lambda r: r[1]), np.int64).reshape(-1, 4).T
    return dict(zip(("req_id", "start_slot", "num_slots", "num_tokens"), cols, strict=True))


def test_interval_cells_splits_at_cell_boundaries() -> None:
    # cells of 4 slots: [2, 9) covers 2 slots of cell 0, 4 of cell 1, 1 of cell 2; [9, 9) none
    row, cell, n = interval_cells(np.array([2, 9]), np.array([9, 9]), 4)
    assert row.tolist() == [0, 0, 0]
    assert cell.tolist() == [0, 1, 2]
    assert n.tolist() == [2, 4, 1]


def test_grid_is_whole_blocks_and_at_most_max_cells() -> None:
    # 100 slots, at most 8 cells: cdiv(100, 8) = 13 slots a cell -> 8 cells (last: 9 slots)
    assert CellGrid.for_pool(PoolShape(100, "first_fit"), 8) == CellGrid(13, 8)
    # paged, blocks of 4: 13 rounds up to 16 slots (4 blocks) -> 7 cells
    assert CellGrid.for_pool(PoolShape(100, "paged", 4), 8) == CellGrid(16, 7)
    # a pool smaller than max_cells: one block a cell
    assert CellGrid.for_pool(PoolShape(100, "paged", 4), 4096) == CellGrid(4, 25)


def test_frame_cells_by_hand() -> None:
    # 10 slots, cells of 4 (the last covers 2): req 7 holds [0, 6) with 3 tokens, req 9 holds
    # [8, 10) with 2; the free gap [6, 8) (2 slots) is shorter than the head's need (3): a hole.
    pool = PoolShape(10, "first_fit")
    rows = rows_of([(7, 0, 6, 3), (9, 8, 2, 2)])
    cells = frame_cells(pool, CellGrid(4, 3), rows, head_need_slots=3)
    assert cells.owner.tolist() == [7, 7, 9]
    # shares of 4 slots, 0-255: 3/4 -> 191, 4/4 -> 255, 2/4 -> 128 (rint of 127.5)
    assert cells.live.tolist() == [191, 0, 128]
    assert cells.held.tolist() == [255, 128, 128]
    assert cells.hole.tolist() == [0, 128, 0]
    assert cells.totals == {"live": 5, "held": 8, "hole": 2, "free": 0}
    # a head needing 2 slots fits the gap: no hole, 2 free
    cells = frame_cells(pool, CellGrid(4, 3), rows, head_need_slots=2)
    assert cells.hole.tolist() == [0, 0, 0]
    assert cells.totals == {"live": 5, "held": 8, "hole": 0, "free": 2}


def test_owner_is_the_request_holding_most_of_the_cell() -> None:
    # one 4-slot cell: req 1 holds slot 0, req 2 slots 1-3 (3 > 1), nobody waits
    rows = rows_of([(1, 0, 1, 1), (2, 1, 3, 0)])
    cells = frame_cells(PoolShape(4, "best_fit"), CellGrid(4, 1), rows, head_need_slots=0)
    assert cells.owner.tolist() == [2]
    assert cells.live.tolist() == [64]  # 1 of 4 slots holds a token: rint(63.75)


def test_an_empty_pool_has_no_owner() -> None:
    empty = rows_of([])
    cells = frame_cells(PoolShape(8, "first_fit"), CellGrid(4, 2), empty, head_need_slots=0)
    assert cells.owner.tolist() == [-1, -1]
    assert cells.totals == {"live": 0, "held": 0, "hole": 0, "free": 8}


def test_buddy_chunks_follow_the_allocator_docstring() -> None:
    # BuddyAllocator: 15,728 slots with 2,048-slot chunks = 7 x 2048 + 1024 + 256 + 64 + 32 + 16
    sizes = [n for _, n in buddy_chunks(0, 15728, 2048)]
    assert sizes == [2048] * 7 + [1024, 256, 64, 32, 16]
    # a gap [12, 32) splits at alignment: 4 at 12, 16 at 16
    assert buddy_chunks(12, 20, 16) == [(12, 4), (16, 16)]


def test_paged_pool_reserves_null_block_and_remainder() -> None:
    # 46 slots in blocks of 4: 11 blocks + 2 remainder slots; vLLM v1 keeps block 0 back
    config = {"cache": {"allocator": "paged", "block_size_tokens": 4}}
    pool = PoolShape.of_run(config, {"capacity_tokens": 46, "usable_capacity_tokens": 40})
    assert pool.reserved == ((0, 4), (44, 2))
    # blocks 1 and 3 held: free [8, 12) and [16, 44), 32 slots. Paged free blocks are holes
    # only when all of them together are short of the head's need.
    starts, sizes = np.array([4, 12]), np.array([4, 4])
    assert hole_ranges(pool, starts, sizes, head_need_slots=32) == [(0, 4), (44, 2)]
    assert hole_ranges(pool, starts, sizes, head_need_slots=33) == [
        (0, 4),
        (44, 2),
        (8, 4),
        (16, 28),
    ]


def test_hybrid_pool_cells_follow_its_raised_block_size() -> None:
    # a hybrid run's summary gives its blocks' size (a state group's page: 544 tokens here, not
    # the configured 16): 87,381 slots = 160 blocks of 544 (87,040) + 341; block 0 is null
    config = {"cache": {"allocator": "paged", "block_size_tokens": 16}}
    summary = {
        "capacity_tokens": 87_381,
        "usable_capacity_tokens": 159 * 544,
        "kv_cache_block_size_tokens": 544,
    }
    pool = PoolShape.of_run(config, summary)
    assert pool.block_size_slots == 544
    assert pool.reserved == ((0, 544), (87_040, 341))


def usable_by_recorder(alloc, head, num_tokens: int) -> int:
    """Free slots that can serve the head, as the recorder counts them (``categorize``)."""
    s = alloc.stats()
    cats = categorize(
        s.capacity_slots,
        s.overhead_slots,
        s.held_slots,
        0,
        0,
        queue_head(alloc, (head, num_tokens)),
    )
    return cats[4]  # free


@pytest.mark.parametrize("name", ["first_fit", "best_fit", "buddy", "paged"])
def test_map_free_and_holes_equal_the_recorders_count(name, rng) -> None:
    # Random allocate/free on a 46-slot pool (paged: 4-slot blocks, null block 0, 2 remainder
    # slots); after each operation the map's free slots must equal what the recorder counts as
    # usable by a waiting head, and its holes the rest of the free memory.
    extra = {"reserve_null_block": True} if name == "paged" else {}
    alloc = small_allocator(name, capacity_tokens=46, **extra)
    config = {"cache": {"allocator": name, "block_size_tokens": 4}}
    summary = {
        "capacity_tokens": 46,
        "usable_capacity_tokens": alloc.usable_capacity_tokens,
        "max_model_len": 16,
    }
    pool = PoolShape.of_run(config, summary)
    grid = CellGrid.for_pool(pool, 8)
    tokens: dict[int, int] = {}
    live: dict[int, object] = {}
    for _ in range(60):
        if live and rng.random() < 0.4:
            rid = int(rng.choice(sorted(live)))
            alloc.free(rid)
            del live[rid]
            del tokens[rid]
        else:
            req = make_request(int(rng.integers(1, 8)), int(rng.integers(1, 8)))
            n = req.prompt_tokens
            if alloc.allocate(req, n) is not None:
                live[req.req_id], tokens[req.req_id] = req, n
        head = make_request(int(rng.integers(1, 9)), int(rng.integers(1, 8)))
        need = alloc.admission_slots_needed(head, head.prompt_tokens)
        rows = rows_of(ownership_rows(alloc, tokens))
        cells = frame_cells(pool, grid, rows, need)
        usable = usable_by_recorder(alloc, head, head.prompt_tokens)
        held = alloc.stats().held_slots
        assert cells.totals["held"] == held
        assert cells.totals["free"] == usable, (name, need, rows)
        assert cells.totals["hole"] == 46 - held - usable
