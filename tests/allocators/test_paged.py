"""Paged allocator cases from the seeds, worked by hand."""

from __future__ import annotations

from kvsim.allocators import make_allocator
from kvsim.units import cdiv
from tests.conftest import make_request


def test_token_37_is_logical_block_2_slot_5():
    alloc = make_allocator("paged", capacity_tokens=16 * 8, block_size_tokens=16)
    a, b = make_request(16, 30), make_request(16, 1)
    alloc.allocate(a, 16)  # a: block 0
    alloc.allocate(b, 16)  # b: block 1
    alloc.allocate(a, 38)  # a grows to 38 tokens: blocks 2 and 3 -> table [0, 2, 3]
    assert alloc.block_tables[a.req_id] == [0, 2, 3]
    # 37 = 2 * 16 + 5 -> logical block 2 -> physical block 3, slot 5
    assert alloc.slot_of(a.req_id, 37) == (3, 5)


def test_1000_tokens_hold_63_blocks():
    alloc = make_allocator("paged", capacity_tokens=16 * 100, block_size_tokens=16)
    r = make_request(1000, 1)
    alloc.allocate(r, 1000)
    assert len(alloc.block_tables[r.req_id]) == 63  # 1,008 slots, 8 unused
    assert alloc.held_slots(r.req_id) - 1000 == 8


def test_free_list_order_front_taken_back_appended():
    alloc = make_allocator("paged", capacity_tokens=4 * 6, block_size_tokens=4)
    a, b = make_request(8, 1), make_request(8, 1)
    alloc.allocate(a, 8)  # blocks 0, 1
    alloc.allocate(b, 8)  # blocks 2, 3
    assert alloc.free_block_ids() == [4, 5]
    alloc.free(a.req_id)  # 0, 1 appended in table order
    assert alloc.free_block_ids() == [4, 5, 0, 1]
    c = make_request(12, 1)
    alloc.allocate(c, 12)  # takes from the front: 4, 5, 0
    assert alloc.block_tables[c.req_id] == [4, 5, 0]
    alloc.check_invariants()


def test_watermark_keeps_blocks_for_running_growth():
    # 100 blocks, watermark 1 % -> admission keeps 1 block free; growth may use it
    alloc = make_allocator("paged", capacity_tokens=1600, block_size_tokens=16, watermark=0.01)
    big = make_request(99 * 16, 20)
    assert alloc.can_allocate(big, 99 * 16)  # 99 + 1 reserved <= 100
    alloc.allocate(big, 99 * 16)
    other = make_request(1, 1)
    assert not alloc.can_allocate(other, 2)  # 1 needed + 1 reserved > 1 free
    assert alloc.allocate(big, 99 * 16 + 1) is not None  # running growth takes the last block
    assert alloc.num_free_blocks == 0


def test_cdiv():
    assert cdiv(1040, 16) == 65
    assert cdiv(40, 16) == 3
    assert cdiv(0, 16) == 0
