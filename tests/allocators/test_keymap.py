"""The open-addressing key map (``kvsim.core.kv.keymap``) against a dict, under random inserts
and removals in a map of 16 cells kept at most half full, with keys chosen to share home cells
and to wrap around the end: every live key is found in its cell, every removed key is missed,
and the back-pointers follow the entries that a removal shifts back."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from librt.vecs import vec
from mypy_extensions import i64

from kvsim.core.kv.keymap import (
    EMPTY,
    find_cell,
    home_cell,
    probe_insert,
    remove_cell,
    warm_cells,
    warm_homes,
)

MASK = 15  # 16 cells
# keys whose home cells crowd the map's last cells (13, 14, 15), so probe runs wrap around to
# cells 0, 1, 2, where other keys have their homes; the high word mixes into the home cell too
# (home_cell: 2**32 starts at cell 1)
SMALL_KEYS = [13, 14, 15, 29, 30, 31, 45, 46, 47, 61, 62, 63, 0, 1, 2, 16, 17]
KEYS = st.sampled_from([*SMALL_KEYS, 1 << 32, -1, -(2**63)])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.booleans(), KEYS), max_size=60))
def test_inserts_and_removals_agree_with_a_dict(ops: list[tuple[bool, int]]) -> None:
    cells = vec[i64]([EMPTY] * 2 * (MASK + 1))
    where = vec[i64]([-1] * 8)  # value -> its cell: values are 0..7, a free list of them
    free_values = list(range(8))
    expected: dict[int, int] = {}  # key -> value
    for insert, key in ops:
        if insert and key not in expected and free_values:  # at most 8 keys: half full
            cell, found = probe_insert(cells, MASK, key)
            assert not found
            value = free_values.pop()
            cells[2 * cell], cells[2 * cell + 1] = key, value
            where[value] = cell
            expected[key] = value
        elif not insert and key in expected:
            value = expected.pop(key)
            remove_cell(cells, MASK, where[value], where)
            free_values.append(value)
        for k in SMALL_KEYS:  # present or not
            assert (find_cell(cells, MASK, k) >= 0) == (k in expected)
        for k, value in expected.items():
            cell = find_cell(cells, MASK, k)
            assert cell == where[value], (k, cell, where[value])
            assert cells[2 * cell] == k
            assert cells[2 * cell + 1] == value
        live = [i for i in range(MASK + 1) if cells[2 * i + 1] != EMPTY]
        assert len(live) == len(expected)  # no tombstone, no stray entry


def _map_of(keys: tuple[int, ...]) -> tuple[vec[i64], vec[i64]]:
    """A 16-cell map of ``keys`` inserted in order, key ``i``'s value ``i``; its back-pointers."""
    cells = vec[i64]([EMPTY] * 2 * (MASK + 1))
    where = vec[i64]([-1] * len(keys))
    for value, key in enumerate(keys):
        cell, _ = probe_insert(cells, MASK, key)
        cells[2 * cell], cells[2 * cell + 1] = key, value
        where[value] = cell
    return cells, where


def test_a_removal_shifts_back_an_entry_whose_run_passed_the_hole() -> None:
    # Worked by hand in 16 cells: keys 14, 30 and 46 all start at cell 14 (key & 15, high word
    # 0), so they sit at 14, 15 and (wrapping) 0; key 1 sits at its home, cell 1. Removing 14
    # leaves a hole at 14: 30 (home 14) moves back to 14, then 46 (home 14) from cell 0 to 15;
    # key 1 stays (its home, 1, is past the hole's run), so cell 0 ends empty.
    assert [home_cell(k, MASK) for k in (14, 30, 46, 1)] == [14, 14, 14, 1]
    cells, where = _map_of((14, 30, 46, 1))
    assert list(where) == [14, 15, 0, 1]
    remove_cell(cells, MASK, where[0], where)
    assert (where[1], where[2], where[3]) == (14, 15, 1)
    assert cells[2 * 0 + 1] == EMPTY
    assert [find_cell(cells, MASK, k) for k in (14, 30, 46, 1)] == [-1, 14, 15, 1]


def test_a_removal_after_the_wrap_shifts_back_an_entry_whose_home_is_before_it() -> None:
    # Keys 14, 30, 46 and 62 all start at cell 14: they sit at 14, 15, 0 and 1. Removing 46
    # (cell 0) leaves a hole at 0 before 62 (cell 1), whose probe path 14, 15, 0, 1 passes the
    # hole: 62 moves back to 0, and a probe for it from 14 still reaches it.
    cells, where = _map_of((14, 30, 46, 62))
    assert list(where) == [14, 15, 0, 1]
    remove_cell(cells, MASK, where[2], where)
    assert where[3] == 0
    assert cells[2 * 1 + 1] == EMPTY
    assert [find_cell(cells, MASK, k) for k in (14, 30, 46, 62)] == [14, 15, -1, 0]


def test_warm_homes_reads_each_keys_home_cell() -> None:
    """The read-ahead reads the value at each key's home cell (``(key ^ (key >> 32)) & mask``)
    of ``keys[start:stop]`` and nothing else: keys 13 and 29 both start at cell 13 (29 & 15),
    which holds value 5; key 1 << 32 starts at cell 1 (its high word, 1), which holds 7; key 2
    starts at empty cell 2 (EMPTY, -1). Keys outside the range (14 at index 0) are not read."""
    cells = vec[i64]([EMPTY] * 2 * (MASK + 1))
    cells[2 * 13], cells[2 * 13 + 1] = 13, 5
    cells[2 * 1], cells[2 * 1 + 1] = 1 << 32, 7
    cells[2 * 14], cells[2 * 14 + 1] = 14, 1000
    keys = vec[i64]([14, 13, 29, 1 << 32, 2])
    assert warm_homes(cells, MASK, keys, 1, 5) == 5 + 5 + 7 - 1
    assert warm_homes(cells, MASK, keys, 0, 0) == 0


def test_warm_cells_reads_the_cells_its_items_name() -> None:
    """Items 2 and 0 name cells 13 and 1 (``where``), whose values are 5 and 7; item 1 names
    no cell (-1: FREE) and is not read; item 3 lies outside the range. 5 + 7 = 12."""
    cells = vec[i64]([EMPTY] * 2 * (MASK + 1))
    cells[2 * 13 + 1] = 5
    cells[2 * 1 + 1] = 7
    where = vec[i64]([1, -1, 13, 0])
    items = vec[i64]([2, 1, 0, 3])
    assert warm_cells(cells, where, items, 0, 3) == 5 + 7
