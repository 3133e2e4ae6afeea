"""The allocator contract, checked on every registered allocator (tiny 44-slot pool)."""

from __future__ import annotations

import pytest

from kvsim.core.kv import ALLOCATORS, make_allocator
from tests.conftest import SMALL_CAPACITY, make_request, small_allocator


def snapshot(alloc):  # everything observable through the contract
    return (alloc.num_free_tokens, alloc.stats(), alloc.num_free_bytes)


def test_registry_unknown_name_lists_choices():
    with pytest.raises(ValueError, match=r"Unknown allocator 'nope'; choose from \['best_fit'"):
        make_allocator("nope", capacity_tokens=10)


def test_a_misspelt_argument_is_an_error_not_a_default():
    with pytest.raises(
        ValueError,
        match=r"make_allocator\('paged'\): unknown argument\(s\) "
        r"block_size_tokns; paged takes .*block_size_tokens",
    ):
        make_allocator("paged", capacity_tokens=64, block_size_tokns=4)


def test_fresh_pool_is_all_free(allocator_name):
    alloc = small_allocator(allocator_name)
    alloc.check_invariants()
    # paged: 11 blocks x 4 = 44; slabs: 44 slots. 2 bytes per slot.
    assert alloc.num_free_tokens == SMALL_CAPACITY
    assert alloc.num_free_bytes == 2 * SMALL_CAPACITY
    assert alloc.num_used_bytes == 0


def test_fill_to_capacity_then_refuse_without_change(allocator_name):
    alloc = small_allocator(allocator_name)
    # 8-token requests: slabs of 8 (buddy chunk 8), or 2 blocks of 4. 44 // 8 = 5 fit in every
    # policy (buddy: 32 + 8 + 4 top chunks -> 4 + 1 chunks of 8), the 6th does not.
    reqs = [make_request(4, 4) for _ in range(6)]
    for req in reqs[:5]:
        result = alloc.allocate(req, 8)
        assert result is not None
        assert result.bytes_allocated == 2 * result.num_new_slots
        alloc.check_invariants()
    before = snapshot(alloc)
    assert not alloc.can_allocate(reqs[5], 8)
    assert alloc.allocate(reqs[5], 8) is None
    assert snapshot(alloc) == before
    alloc.check_invariants()


def test_free_restores_free_slots(allocator_name):
    alloc = small_allocator(allocator_name)
    a, b = make_request(5, 3), make_request(2, 2)
    free0 = alloc.num_free_tokens
    alloc.allocate(a, 6)
    free_after_a = alloc.num_free_tokens
    alloc.allocate(b, 3)
    alloc.free(b.req_id)
    assert alloc.num_free_tokens == free_after_a
    alloc.free(a.req_id)
    assert alloc.num_free_tokens == free0
    alloc.check_invariants()
    assert alloc.stats().num_requests == 0


def test_double_free_is_a_key_error(allocator_name):
    alloc = small_allocator(allocator_name)
    req = make_request(3, 1)
    alloc.allocate(req, 4)
    alloc.free(req.req_id)
    with pytest.raises(KeyError, match=rf"free\(\): unknown req_id {req.req_id}"):
        alloc.free(req.req_id)


def test_growth_within_holding_takes_nothing(allocator_name):
    alloc = small_allocator(allocator_name)
    req = make_request(5, 4)  # writes 5 + 4 - 1 = 8 KV tokens (the oracle slab)
    alloc.allocate(req, 6)
    free = alloc.num_free_tokens
    held = alloc.held_slots(req.req_id)
    # slabs hold 8 already; paged holds 2 blocks (8 slots) for 6 tokens: growing to 8 is free;
    # radix pages are 1 token, so it holds exactly the 6 it was asked for
    result = alloc.allocate(req, held)
    assert result is not None
    assert result.num_new_slots == 0
    assert alloc.num_free_tokens == free
    assert alloc.held_slots(req.req_id) == held == (6 if allocator_name == "radix" else 8)


def test_all_registered_are_tested():
    assert set(ALLOCATORS) == {"first_fit", "best_fit", "buddy", "paged", "radix", "vattention"}


def test_queries_change_no_state(allocator_name):
    # can_allocate, num_slots_needed and find_cached_prefix are pure (vLLM checks, then mutates)
    alloc = small_allocator(allocator_name)
    running, head = make_request(8, 4), make_request(12, 4)
    alloc.allocate(running, 8)
    before = snapshot(alloc)
    for _ in range(3):
        hit = alloc.find_cached_prefix(head)
        alloc.can_allocate(head, 12, hit)
        alloc.num_slots_needed(head, 12, hit)
        alloc.can_admit(head, 12)
        alloc.usable_free_slots(head, 12)
    assert snapshot(alloc) == before
    alloc.check_invariants()


def test_every_policy_takes_exactly_the_arguments_the_config_declares():
    # kvsim.config.allocators declares each policy's keyword arguments (the config warns about
    # settings a policy does not read): the registered class must take exactly those
    import inspect

    from kvsim.config.allocators import LAYOUTS, accepted_arguments

    assert set(ALLOCATORS) == set(LAYOUTS)
    for name, cls in ALLOCATORS.items():
        params = set(inspect.signature(cls).parameters)
        assert params == set(accepted_arguments(name)), name
