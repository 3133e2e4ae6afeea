"""Paged allocator cases from the seeds, worked by hand."""

from __future__ import annotations

from kvsim.base.units import cdiv
from kvsim.core.kv import make_allocator
from kvsim.workload.request import Request
from tests.allocators.pools import v1_pool
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


def test_v1_pool_frees_full_blocks_to_the_back_and_a_partial_one_to_the_front():
    # vLLM 0.34.0 vllm/v1/core/block_pool.py, BlockPool.free_blocks: of the blocks a free
    # releases (tail first), those with a block hash go to the back of the free queue, the
    # others to the front (prepend_n, in release order); with caching every full block has a
    # hash, a private stream's too (kvsim keys it lazily but frees it where vLLM's goes).
    alloc = v1_pool(caching=True)
    a = Request(0, 0.0, 10, 5, 5, token_segments=(("a", 10),))  # shares tokens: keyed
    b = Request(1, 0.0, 9, 5, 5)  # private: full blocks unkeyed in kvsim, hashed in vLLM
    alloc.allocate(a, 10)  # blocks 1 2 3: 1, 2 full (keyed), 3 holds 2 tokens
    alloc.allocate(b, 9)  # blocks 4 5 6: 4, 5 full, 6 holds 1 token
    assert alloc.free_block_ids() == [7, 8]
    a.num_computed_tokens, b.num_computed_tokens = 10, 9  # as after their prefill step
    alloc.free(0)  # 3 -> front; 2, 1 -> back: [3 | 7 8 | 2 1]
    assert alloc.free_block_ids() == [3, 7, 8, 2, 1]
    alloc.free(1)  # 6 -> front; 5, 4 (full, 9 // 4 = 2 blocks) -> back
    assert alloc.free_block_ids() == [6, 3, 7, 8, 2, 1, 5, 4]
    c = Request(2, 0.0, 12, 1, 1)
    alloc.allocate(c, 12)  # 3 blocks from the front: the partial ones first, then 7
    assert alloc.block_tables[2] == [6, 3, 7]
    alloc.check_invariants()


def test_v1_pool_without_caching_frees_every_block_to_the_front():
    # vLLM 0.34.0 BlockPool.free_blocks: without prefix caching no block has a hash, so a
    # freed table goes to the front, tail first (LIFO reuse)
    alloc = v1_pool(caching=False)
    a = Request(0, 0.0, 10, 5, 5)
    alloc.allocate(a, 10)  # blocks 1 2 3
    a.num_computed_tokens = 10
    alloc.free(0)  # 3 2 1 to the front: [3 2 1 | 4 5 6 7 8]
    assert alloc.free_block_ids() == [3, 2, 1, 4, 5, 6, 7, 8]
    alloc.check_invariants()


def test_v1_pool_preempted_private_stream_keeps_its_full_blocks_at_the_back():
    # A preempted request (free with its computed tokens): its full blocks keep their keys
    # (kvsim registers a private stream's now) at the back; its partial block goes to the
    # front. 6 tokens computed of a 6-token prompt: block 1 full, block 2 holds 2 tokens.
    alloc = v1_pool(caching=True)
    r = Request(0, 0.0, 6, 5, 5)
    alloc.allocate(r, 6)  # blocks 1 2
    alloc.free(0, 6)  # 2 -> front, 1 (keyed now) -> back: [2 | 3 4 5 6 7 8 | 1]
    assert alloc.free_block_ids() == [2, 3, 4, 5, 6, 7, 8, 1]
    r.num_computed_tokens, r.num_preemptions = 0, 1
    assert alloc.find_cached_prefix(r).blocks == (1,)  # (6 - 1) // 4 = 1 block looked up
    alloc.check_invariants()


def test_v0_pool_keeps_freeing_every_block_to_the_back():
    # The vllm-v0 profile's pool (no null block) keeps vLLM v0.20.0's order: all to the back
    alloc = make_allocator(
        "paged", capacity_tokens=4 * 6, block_size_tokens=4, enable_prefix_caching=True
    )
    a = Request(0, 0.0, 6, 5, 5, token_segments=(("a", 6),))
    alloc.allocate(a, 6)  # blocks 0 (full, keyed), 1
    a.num_computed_tokens = 6
    alloc.free(0)
    assert alloc.free_block_ids() == [2, 3, 4, 5, 1, 0]


def test_v1_pool_keeps_a_duplicate_cached_block_and_finds_it_once_the_first_is_evicted():
    # vLLM 0.34.0 vllm/v1/core/block_pool.py: BlockPool does not de-duplicate cached blocks
    # (_insert_block_hash adds a second block under a cached hash; BlockHashToBlockMap keeps
    # both, get_one_block finds the first, pop hands the hash to the next). Two requests
    # compute the same 8-token prompt ("p") at once, in 4-token blocks; usable blocks 1..8.
    alloc = v1_pool(caching=True)
    p = (("p", 8),)
    a = Request(0, 0.0, 8, 2, 2, token_segments=p)
    b = Request(1, 0.0, 8, 2, 2, token_segments=p)
    alloc.allocate(a, 4)  # a's first chunk: block 1, full, cached as p[0:4] (k0)
    hit = alloc.find_cached_prefix(b)  # (8 - 1) // 4 = 1 block looked up: k0 in block 1
    assert hit.blocks == (1,)
    alloc.allocate(b, 8, hit)  # b: block 1 shared, block 2 new, full: cached as p[0:8] (k1)
    alloc.allocate(a, 8)  # a's second chunk: block 3, full, p[0:8] too: a duplicate of 2
    k1 = alloc.pool.key_of(2)
    assert alloc.pool.key_of(3) == k1
    assert alloc.pool.duplicates() == {k1: [3]}
    assert alloc.pool.lookup(k1) == 2  # the first one is found
    a.num_computed_tokens = b.num_computed_tokens = 8
    alloc.free(1)  # b: 2 (keyed) -> back; 1 is still a's: [4 5 6 7 8 2]
    alloc.free(0)  # a: 3 (keyed, a duplicate) -> back, then 1: [4 5 6 7 8 2 3 1]
    assert alloc.free_block_ids() == [4, 5, 6, 7, 8, 2, 3, 1]
    c = Request(2, 0.0, 24, 1, 1)
    alloc.allocate(c, 24)  # 6 blocks: 4 5 6 7 8 2; taking 2 evicts k1 there, 3 holds it now
    assert alloc.pool.num_evictions == 1
    assert alloc.pool.lookup(k1) == 3
    assert alloc.pool.duplicates() == {}
    d = Request(3, 0.0, 9, 1, 1, token_segments=(*p, ("d", 1)))
    # (9 - 1) // 4 = 2 blocks looked up: k0 in 1, k1 in 3 (dropping duplicates found only 1)
    assert alloc.find_cached_prefix(d).blocks == (1, 3)
    alloc.check_invariants()


def test_v0_pool_caches_a_key_once():
    # The vllm-v0 profile's pool (no null block, vllm_v1_pool off) keeps its rule: the second
    # block filled with p[0:8] stays uncached. Blocks 0..5 of 4 tokens.
    alloc = make_allocator(
        "paged", capacity_tokens=4 * 6, block_size_tokens=4, enable_prefix_caching=True
    )
    p = (("p", 8),)
    a = Request(0, 0.0, 8, 2, 2, token_segments=p)
    b = Request(1, 0.0, 8, 2, 2, token_segments=p)
    alloc.allocate(a, 4)  # block 0: p[0:4]
    alloc.allocate(b, 8, alloc.find_cached_prefix(b))  # block 0 shared, block 1: p[0:8]
    alloc.allocate(a, 8)  # block 2 is full with p[0:8] too, but block 1 caches that key
    assert alloc.pool.key_of(2) is None
    assert alloc.pool.duplicates() == {}
