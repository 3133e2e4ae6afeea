"""Buddy allocator cases worked by hand on a 16-slot pool with 8-slot top chunks."""

from __future__ import annotations

from kvsim.core.kv import make_allocator
from tests.conftest import make_request


def buddy16():
    # max_model_len 8 -> chunks up to 8 slots; 16 slots = two top chunks [0,8) and [8,16)
    return make_allocator("buddy", capacity_tokens=16, reservation="oracle", max_model_len=8)


def test_holes_too_small_although_total_free_suffices():
    alloc = buddy16()
    # 2 + 3 - 1 = 4 KV slots each (the oracle slab) -> order-2 chunks
    a, b, c, d = (make_request(2, 3) for _ in range(4))
    for r in (a, b, c, d):
        assert alloc.allocate(r, 2) is not None
    # lowest address first: a=[0,4) b=[4,8) c=[8,12) d=[12,16)
    assert [alloc.slab_of(r.req_id)[0] for r in (a, b, c, d)] == [0, 4, 8, 12]
    alloc.free(a.req_id)
    alloc.free(c.req_id)
    # 8 slots free in total, as two non-buddy holes [0,4) and [8,12): an 8-slot request fails
    e = make_request(4, 5)  # 8 KV slots
    assert alloc.num_free_tokens == 8
    assert alloc.free_chunks() == [(0, 4), (8, 4)]
    assert not alloc.can_allocate(e, 4)
    assert alloc.allocate(e, 4) is None
    assert alloc.usable_free_slots(e, 4) == 0  # all 8 free slots are external fragmentation
    alloc.check_invariants()
    # freeing b merges [0,4)+[4,8) into [0,8): now it fits at address 0
    alloc.free(b.req_id)
    assert alloc.free_chunks() == [(0, 8), (8, 4)]
    assert alloc.usable_free_slots(e, 4) == 8
    assert alloc.allocate(e, 4) is not None
    assert alloc.slab_of(e.req_id) == (0, 8)


def test_rounding_waste_is_overhead_not_held():
    alloc = buddy16()
    r = make_request(3, 3)  # oracle slab 3 + 3 - 1 = 5 slots -> chunk of 8: 3 slots rounding waste
    alloc.allocate(r, 3)
    s = alloc.stats()
    assert (s.held_slots, s.overhead_slots, s.free_slots) == (5, 3, 8)


def test_carving_of_a_non_power_of_two_pool():
    # 15,728 slots (12 GiB / 800 KiB) in chunks up to 2048: 7 x 2048 + 1024 + 256 + 64 + 32 + 16
    alloc = make_allocator("buddy", capacity_tokens=15_728, reservation="max", max_model_len=2048)
    sizes = [n for _, n in alloc.free_chunks()]
    assert sizes == [2048] * 7 + [1024, 256, 64, 32, 16]
    reqs = [make_request(10, 10) for _ in range(8)]
    placed = [alloc.allocate(r, 11) is not None for r in reqs]
    assert placed == [True] * 7 + [False]  # Orca (Max) runs 7 sequences (paper Fig. 13: 7.00)
    assert alloc.num_free_tokens == 15_728 - 7 * 2048 == 1392


def test_group_slabs_go_into_separate_holes_all_or_none():
    # first-fit, 16 slots: free holes [0,4) and [8,12) after freeing a and c (4 slots each)
    alloc = make_allocator("first_fit", capacity_tokens=16, reservation="oracle", max_model_len=8)
    a, b, c, d = (make_request(2, 3) for _ in range(4))  # 4 KV slots each
    for r in (a, b, c, d):
        alloc.allocate(r, 2)
    alloc.free(a.req_id)
    alloc.free(c.req_id)
    pair = make_request(2, 3)
    pair.n = pair.num_seqs = 2  # 2 samples: two 4-slot slabs, one per sequence
    assert alloc.can_allocate(pair, 2)
    assert alloc.allocate(pair, 2) is not None
    assert alloc.slabs_of(pair.req_id) == [(0, 4), (8, 4)]  # the two holes, not one extent
    assert alloc.held_slots(pair.req_id) == 4  # per sequence
    alloc.check_invariants()
    # a group of three 4-slot slabs cannot fit in the 0 slots left: refused, nothing changes
    trio = make_request(2, 3)
    trio.n = trio.num_seqs = 3
    alloc.free(pair.req_id)
    free_before = alloc.free_extents()
    assert alloc.allocate(trio, 2) is None  # 8 free slots, 12 needed
    assert alloc.free_extents() == free_before
    assert alloc.usable_free_slots(trio, 2) == 0
