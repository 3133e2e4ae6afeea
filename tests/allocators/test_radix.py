"""Hand-worked radix-cache cases: node splits, locks protecting a path, LRU leaf eviction, tokens
cached inside the allocation call."""

from __future__ import annotations

import pytest

from kvsim.core.kv.base import DECODE_EXACT, DECODE_POOLED
from kvsim.core.kv.radix import RadixAllocator
from kvsim.workload.request import Request

SYS = (("sys", 0), 8)


def req(req_id: int, segs, output: int = 4) -> Request:
    prompt = sum(n for _, n in segs)
    return Request(req_id, 0.0, prompt, output, output, token_segments=tuple(segs))


def admit(a: RadixAllocator, r: Request, num_tokens: int):
    return a.allocate(r, num_tokens, a.find_cached_prefix(r))


def test_split_lock_and_evict_only_unlocked_leaves():
    a = RadixAllocator(capacity_tokens=64)
    first = req(1, [SYS, (("user", "A"), 4)])  # 12 prompt tokens
    admit(a, first, 12)  # prefill: 12 tokens inserted, locked
    a.allocate(first, 13)  # first decode: its leaf grows in place to 13 tokens
    a.free(1)
    assert (a.cached_tokens, a.protected_tokens, a.num_free_tokens) == (13, 0, 64)
    second = req(2, [SYS, (("user", "B"), 4)])
    hit = a.find_cached_prefix(second)  # the shared 8 tokens, inside A's 13-token edge
    assert hit.num_tokens == 8
    result = a.allocate(second, 12, hit)
    assert result.num_reused_tokens == 8
    assert result.num_new_slots == 4
    (upper,) = a.roots[None].children.values()
    assert len(upper.key) == 8  # split at 8
    assert sorted(len(c.key) for c in upper.children.values()) == [4, 5]
    assert (a.protected_tokens, a.evictable_tokens) == (12, 5)  # B's path; A's leftover leaf
    a.check_invariants()
    # 64 - 17 = 47 truly free + 5 evictable: 51 tokens evict A's 5-token leaf only
    third = req(3, [(("doc", 3), 51)])
    assert admit(a, third, 51) is not None
    assert a.num_evicted_tokens == 5
    assert a.cached_tokens == 8 + 4 + 51
    before = (a.num_free_tokens, a.stats(), a.cached_tokens)
    assert admit(a, req(4, [(("doc", 4), 2)]), 2) is None  # 1 slot left; locked paths stay
    assert (a.num_free_tokens, a.stats(), a.cached_tokens) == before
    a.check_invariants()


def test_free_unlocks_and_keeps_the_tokens():
    a = RadixAllocator(capacity_tokens=64)
    first = req(1, [SYS, (("user", "A"), 4)])
    admit(a, first, 12)
    a.allocate(first, 13)
    a.free(1)
    second = req(2, [SYS, (("user", "B"), 4)])
    admit(a, second, 12)
    a.allocate(second, 13)
    a.free(2)  # 8 shared; its own 5 are a leaf beside A's
    assert a.cached_tokens == 13 + 5
    assert a.protected_tokens == 0
    assert a.num_free_tokens == 64
    assert a.stats().held_slots == 0
    a.check_invariants()


def test_lru_leaf_is_evicted_first():
    a = RadixAllocator(capacity_tokens=20)
    old, new = req(1, [(("x", 1), 4)]), req(2, [(("y", 2), 4)])
    admit(a, old, 5)
    a.free(1)
    admit(a, new, 5)
    a.free(2)  # leaves: x (older access), y
    big = req(3, [(("z", 3), 13)])
    admit(a, big, 13)  # 10 free, needs 13: evicts the least recently used leaf x (5 tokens)
    assert a.num_evicted_tokens == 5
    again = req(4, [(("y", 2), 4)])
    hit = a.find_cached_prefix(again)
    assert hit.num_tokens == 3  # y still cached; the last prompt token is computed
    assert a.allocate(again, 4, hit).num_reused_tokens == 3
    a.check_invariants()


def test_a_split_stamps_the_lower_half_now_as_sglangs_match_does():
    """SGLang's ``_match_prefix_helper`` stamps the node a match reaches before splitting it,
    so the part of it the match did not use is as recent as the match. A (40 tokens "a") and B
    (40 "b") are freed in turn on a 100-slot pool; C (20 of A's tokens, 10 of its own) splits
    A's leaf at 20 and is freed: leaves A[20:40] (stamped at C's match), B (older), C's own.
    The tree caches 40 + 40 + 10 = 90 tokens, 10 slots are truly free. D (30 unshared tokens)
    needs 20 more: the least recent leaf goes, B (40 tokens), not A's lower half. E then
    finds 39 of A's 40 tokens (its last token is computed). With A's old stamp kept on the
    lower half, A[20:40] (20 tokens) went instead, and E found 20."""
    a = RadixAllocator(capacity_tokens=100)
    first, second = req(1, [(("a", 0), 40)], 0), req(2, [(("b", 0), 40)], 0)
    admit(a, first, 40)
    a.free(1)
    admit(a, second, 40)
    a.free(2)
    third = req(3, [(("a", 0), 20), (("c", 0), 10)], 0)
    assert a.find_cached_prefix(third).num_tokens == 20
    admit(a, third, 30)
    a.free(3)
    assert (a.num_free_tokens, a.cached_tokens) == (100, 90)  # (all evictable)
    fourth = req(4, [(("d", 0), 30)], 0)
    admit(a, fourth, 30)  # 10 truly free: 20 more evicted, the least recent leaf: B's 40
    assert a.num_evicted_tokens == 40
    fifth = req(5, [(("a", 0), 40)], 0)
    assert a.find_cached_prefix(fifth).num_tokens == 39
    a.check_invariants()


def test_groups_are_refused_with_a_clear_error():
    a = RadixAllocator(capacity_tokens=64)
    group = Request(1, 0.0, 4, 4, 4, n=2)
    with pytest.raises(ValueError, match="sequence group"):
        a.allocate(group, 4)


def test_running_prefix_is_a_hit_for_later_admissions():
    # tokens are inserted inside the allocation call (as vLLM caches full blocks in
    # allocate_slots): A, still running, already shares its 8-token prefix with B
    a = RadixAllocator(capacity_tokens=64)
    first = req(1, [SYS, (("user", "A"), 4)])
    admit(a, first, 12)
    a.allocate(first, 13)
    second = req(2, [SYS, (("user", "B"), 4)])
    assert admit(a, second, 12).num_reused_tokens == 8
    assert a.held_slots(1) == 13
    assert a.held_slots(2) == 12
    assert (a.cached_tokens, a.protected_tokens) == (17, 17)  # both paths locked
    assert a.stats().held_slots == 13 + 4  # shared 8 counted once
    a.check_invariants()


def test_pooled_decode_slots_equal_one_allocate_per_token():
    """Five decode tokens taken in bulk (``take_pooled``) and written into the leaf later
    (``attach_pooled``) leave the tree, counters and evictions of five one-token allocations:
    32 slots; request 0's 20 tokens cached and unlocked; request 1 holds 8 + 1 and takes 5 more
    with 3 free, so the LRU leaf (all 20 of request 0's) is evicted: 3 + 20 - 5 = 18 free."""
    done = Request(0, 0.0, 20, 1, 1)
    decoder = Request(1, 0.0, 8, 10, 10)
    bulk, stepwise = RadixAllocator(capacity_tokens=32), RadixAllocator(capacity_tokens=32)
    granted = RadixAllocator(capacity_tokens=32)  # grow_blocks: take and write at once
    for a in (bulk, stepwise, granted):
        admit(a, done, 20)
        a.free(0)
        admit(a, decoder, 8)
        a.allocate(decoder, 9)  # its first output token: the leaf gains the output's run
        assert a.decode_mode(decoder) == DECODE_POOLED
    bulk.take_pooled(5)
    assert (bulk.num_free_tokens, bulk.num_evicted_tokens, bulk.cached_tokens) == (18, 20, 14)
    bulk.attach_pooled(1, 5)
    for n in range(10, 15):
        stepwise.allocate(decoder, n)
    granted.grow_blocks([(1, 5)])
    for a in (bulk, stepwise, granted):
        (leaf,) = a.roots[None].children.values()
        assert leaf.runs == [(("prompt", 1), 0, 8), (("gen", 1), 0, 6)]
        assert (a.held_slots(1), a.num_free_tokens, a.protected_tokens) == (14, 18, 14)
        a.check_invariants()
    assert bulk._clock == stepwise._clock == granted._clock  # the same clock for later stamps


def test_an_output_a_later_prompt_repeats_never_decodes_in_bulk():
    a = RadixAllocator(capacity_tokens=64)
    first = req(1, [SYS, (("user", "A"), 4)])
    second = req(2, [SYS, (("user", "A"), 4), (("gen", 1), 4), (("user", "A2"), 2)])
    a.see_workload([first, second])
    admit(a, first, 12)
    a.allocate(first, 13)
    assert a.decode_mode(first) == DECODE_EXACT  # request 2's lookup may walk into its leaf
