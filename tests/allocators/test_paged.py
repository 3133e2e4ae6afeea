"""Paged allocator cases from the seeds, worked by hand."""

from __future__ import annotations

from kvsim.base.units import cdiv
from kvsim.core.kv import make_allocator
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


def test_free_list_order_front_taken_tail_first_to_the_back():
    # vLLM v1 KVCacheManager.free: a request's blocks go back in reverse table order
    alloc = make_allocator("paged", capacity_tokens=4 * 6, block_size_tokens=4)
    a, b = make_request(8, 1), make_request(8, 1)
    alloc.allocate(a, 8)  # blocks 0, 1
    alloc.allocate(b, 8)  # blocks 2, 3
    assert alloc.free_block_ids() == [4, 5]
    alloc.free(a.req_id)  # 1 then 0 appended: tail first
    assert alloc.free_block_ids() == [4, 5, 1, 0]
    c = make_request(12, 1)
    alloc.allocate(c, 12)  # takes from the front: 4, 5, 1
    assert alloc.block_tables[c.req_id] == [4, 5, 1]
    alloc.check_invariants()


def test_null_block_is_never_handed_out():
    # vLLM v1 reserves block 0: 6 blocks of 4 give 5 usable ones, ids 1..5
    alloc = make_allocator(
        "paged", capacity_tokens=4 * 6, block_size_tokens=4, reserve_null_block=True
    )
    assert alloc.num_free_blocks == 5
    assert alloc.usable_capacity_tokens == 20
    assert alloc.stats().overhead_slots == 4
    r = make_request(20, 1)
    alloc.allocate(r, 20)
    assert alloc.block_tables[r.req_id] == [1, 2, 3, 4, 5]
    alloc.check_invariants()


def test_v0_watermark_keeps_blocks_for_running_growth():
    # 100 blocks, watermark 1 % -> v0's admission keeps 1 block free; growth may use it
    alloc = make_allocator("paged", capacity_tokens=1600, block_size_tokens=16, watermark=0.01)
    big = make_request(99 * 16, 20)
    assert alloc.can_admit(big, 99 * 16)  # 99 + 1 reserved <= 100
    alloc.allocate(big, 99 * 16)
    other = make_request(1, 1)
    assert not alloc.can_admit(other, 1)  # 1 needed + 1 reserved > 1 free
    assert alloc.can_allocate(other, 1)  # v1's check knows no watermark
    assert alloc.allocate(big, 99 * 16 + 1) is not None  # running growth takes the last block
    assert alloc.num_free_blocks == 0


def test_v0_append_check_wants_a_free_block_per_sequence():
    # vLLM v0 can_append_slot: num_seqs <= free blocks, whether or not a block is needed
    alloc = make_allocator("paged", capacity_tokens=4 * 2, block_size_tokens=4)
    a, b = make_request(3, 4), make_request(4, 4)
    alloc.allocate(a, 3)  # block 0, one slot of room left
    alloc.allocate(b, 4)  # block 1: the pool is full
    assert alloc.num_free_blocks == 0
    assert not alloc.can_append_v0(a)  # a's next token fits its block, but v0 wants one free
    assert alloc.allocate(a, 4) is not None


def test_cdiv():
    assert cdiv(1040, 16) == 65
    assert cdiv(40, 16) == 3
    assert cdiv(0, 16) == 0
