"""Hand-worked radix-cache cases: node splits, locks protecting a path, LRU leaf eviction."""

from __future__ import annotations

import pytest

from kvsim.allocators.radix import RadixAllocator
from kvsim.request import Request

SYS = (("sys", 0), 8)


def req(req_id: int, segs, output: int = 4) -> Request:
    prompt = sum(n for _, n in segs)
    return Request(req_id, 0.0, prompt, output, output, token_segments=tuple(segs))


def finish(a: RadixAllocator, r: Request, computed: int) -> None:
    r.num_computed_tokens = computed
    a.free(r.req_id)


def test_split_lock_and_evict_only_unlocked_leaves():
    a = RadixAllocator(capacity_tokens=64)
    first = req(1, [SYS, (("user", "A"), 4)])
    a.allocate(first, 13)  # empty tree: 13 private slots
    finish(a, first, 13)  # its 13 computed tokens (12 prompt + 1 output) cached
    assert (a.cached_tokens, a.protected_tokens, a.num_free_tokens) == (13, 0, 64)
    second = req(2, [SYS, (("user", "B"), 4)])
    result = a.allocate(second, 13)  # matches the shared 8 tokens, inside A's 13-token edge
    assert result.num_reused_tokens == 8
    assert result.num_new_slots == 5
    (upper,) = a.roots[None].children.values()
    (lower,) = upper.children.values()
    assert (len(upper.key), len(lower.key)) == (8, 5)  # split at 8
    assert (upper.lock_ref, lower.lock_ref) == (1, 0)
    assert (a.protected_tokens, a.evictable_tokens) == (8, 5)
    a.check_invariants()
    # 46 truly free + 5 evictable: a 50-token prompt (51 slots) evicts A's 5-token leaf only
    third = req(3, [(("doc", 3), 50)])
    assert a.allocate(third, 51) is not None
    assert a.num_evicted_tokens == 5
    assert a.cached_tokens == 8
    assert upper.children == {}
    before = (a.num_free_tokens, a.stats(), a.cached_tokens)
    assert a.allocate(req(4, [(("doc", 4), 1)]), 2) is None  # the locked path cannot go
    assert (a.num_free_tokens, a.stats(), a.cached_tokens) == before
    a.check_invariants()


def test_free_inserts_and_unlocks():
    a = RadixAllocator(capacity_tokens=64)
    first = req(1, [SYS, (("user", "A"), 4)])
    a.allocate(first, 13)
    finish(a, first, 13)
    second = req(2, [SYS, (("user", "B"), 4)])
    a.allocate(second, 13)
    finish(a, second, 13)  # 8 already cached; its other 5 become a new leaf beside A's
    assert a.cached_tokens == 13 + 5
    assert a.protected_tokens == 0
    assert a.num_free_tokens == 64
    assert a.stats().held_slots == 0
    a.check_invariants()


def test_lru_leaf_is_evicted_first():
    a = RadixAllocator(capacity_tokens=20)
    old, new = req(1, [(("x", 1), 4)]), req(2, [(("y", 2), 4)])
    a.allocate(old, 5)
    finish(a, old, 5)
    a.allocate(new, 5)
    finish(a, new, 5)  # leaves: x (older access), y
    big = req(3, [(("z", 3), 12)])
    a.allocate(big, 13)  # 10 free, needs 13: evicts the least recently used leaf x (5 tokens)
    assert a.num_evicted_tokens == 5
    again = req(4, [(("y", 2), 4)])
    assert a.allocate(again, 5).num_reused_tokens == 3  # y still cached; last token recomputed
    a.check_invariants()


def test_groups_are_refused_with_a_clear_error():
    a = RadixAllocator(capacity_tokens=64)
    group = Request(1, 0.0, 4, 4, 4, n=2)
    with pytest.raises(ValueError, match="sequence group"):
        a.allocate(group, 5)


def test_running_prefix_is_a_hit_for_later_admissions():
    # SGLang cache_unfinished_req: A is still running with 13 computed tokens; admitting B first
    # inserts them (A's private slots become locked tree slots), so B hits the shared 8 tokens
    a = RadixAllocator(capacity_tokens=64)
    first = req(1, [SYS, (("user", "A"), 4)])
    a.allocate(first, 13)
    first.num_computed_tokens = 13
    second = req(2, [SYS, (("user", "B"), 4)])
    assert a.allocate(second, 13).num_reused_tokens == 8
    assert a.held_slots(1) == 13
    assert (a.cached_tokens, a.protected_tokens) == (13, 13)  # all locked: A's path
    assert a.stats().held_slots == 13 + 5  # shared 8 counted once
    a.check_invariants()
