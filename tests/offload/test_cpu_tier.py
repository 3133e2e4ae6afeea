"""The CPU tier's LRU rules and the link's timing, hand-worked (``kvsim.core.kv.offload``).

Mirrors vLLM's ``tests/v1/kv_offload/test_cpu_manager.py`` (``test_cpu_manager``: store, lookup,
touch, eviction of the least recently used block that is neither loading nor being stored) in our
own words, every expected list worked out by hand from the rules in the module docstring.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvsim.core.kv.offload import CpuTier, TransferLink


def stored(tier: CpuTier, keys: list[int], ready_s: float, now_s: float = 0.0) -> list[int]:
    new = tier.prepare_store(keys, now_s)
    assert new is not None
    tier.complete_store(new, ready_s)
    return new


def test_lru_eviction_order_follows_test_cpu_manager() -> None:
    """vLLM ``test_cpu_manager``'s sequence on a 4-block tier, in kvsim's terms."""
    tier = CpuTier(num_blocks=4)
    # store [1, 2] (copies end at t=1): both new, LRU order 1, 2; storing until t=1
    assert stored(tier, [1, 2], ready_s=1.0) == [1, 2]
    assert tier.occupancy(0.5) == (0, 2, 0, 2)  # (stored, storing, loading, free)
    assert tier.lookup([1, 2], 0.5) == 0  # not ready: a lookup stops at block 1
    assert tier.lookup([1, 2], 1.0) == 2
    # store [2, 3, 4, 5] at t=2: 2 is held; 3, 4, 5 are new, 1 slot short; the LRU block that
    # is not among the keys is 1 -> evicted; order 2, 3, 4, 5
    assert stored(tier, [2, 3, 4, 5], ready_s=3.0, now_s=2.0) == [3, 4, 5]
    assert tier.lru_order() == [2, 3, 4, 5]
    assert tier.num_evicted_blocks == 1
    # touch [4, 5, 2] (walked from the last): 2, 5, 4 moved to the back in that order ->
    # 3, 2, 5, 4; 4 (the first of the touched) is the most recent
    tier.touch([4, 5, 2])
    assert tier.lru_order() == [3, 2, 5, 4]
    # a load reads 3 (t=3.5): it cannot be evicted while it loads
    tier.prepare_load([3])
    assert tier.occupancy(3.5) == (3, 0, 1, 0)
    # store [6, 7] at t=4: two victims from the front, skipping 3 (loading): 2 and 5
    assert stored(tier, [6, 7], ready_s=5.0, now_s=4.0) == [6, 7]
    assert tier.lru_order() == [3, 4, 6, 7]
    tier.complete_load([3])
    # store [8] at t=4.5 while 6 and 7 are still being stored (until t=5): the front, 3, can
    # go again now that its load ended -> 3 goes
    assert stored(tier, [8], ready_s=6.0, now_s=4.5) == [8]
    assert tier.lru_order() == [4, 6, 7, 8]
    # store [9, 10] at t=4.6: only 4 can go (6, 7, 8 storing) -> no room, nothing changes
    assert tier.prepare_store([9, 10], 4.6) is None
    assert tier.lru_order() == [4, 6, 7, 8]
    tier.check_invariants(4.6)


def test_store_offers_held_keys_as_nothing_new() -> None:
    tier = CpuTier(num_blocks=2)
    stored(tier, [1, 2], ready_s=0.0)
    assert tier.prepare_store([1, 2], 1.0) == []  # both held: nothing to copy, no eviction
    assert tier.num_evicted_blocks == 0


def test_link_serves_copies_in_order() -> None:
    """A 1 GB/s link: 0.5 GB at t=0 ends at 0.5 s; 0.25 GB queued at t=0.1 starts at 0.5 and
    ends at 0.75 s; 0.1 GB at t=2 (link idle) ends at 2.1 s."""
    link = TransferLink(1e9)
    assert link.submit(500_000_000, 0.0) == pytest.approx(0.5)
    assert link.submit(250_000_000, 0.1) == pytest.approx(0.75)
    assert link.submit(100_000_000, 2.0) == pytest.approx(2.1)
    assert link.num_bytes == 850_000_000
    assert link.busy_s == pytest.approx(0.85)


def test_tier_needs_a_block() -> None:
    with pytest.raises(ValueError, match="num_blocks"):
        CpuTier(num_blocks=0)


class TierMachine(RuleBasedStateMachine):
    """Random stores, touches and loads over time: every block is in exactly one category
    (``check_invariants``), and no block leaks: the tier's keys are exactly those stored and
    not evicted, checked against a naive set kept beside it."""

    def __init__(self) -> None:
        super().__init__()
        self.tier = CpuTier(num_blocks=6)
        self.now = 0.0
        self.link = TransferLink(1.0)
        self.loads: list[list[int]] = []
        self.held: set[int] = set()

    @rule(keys=st.lists(st.integers(0, 12), min_size=1, max_size=5), dt=st.floats(0, 2))
    def store(self, keys: list[int], dt: float) -> None:
        self.now += dt
        before = set(self.tier.lru_order())
        new = self.tier.prepare_store(keys, self.now)
        if new is None:
            assert set(self.tier.lru_order()) == before
            return
        evicted = before - set(self.tier.lru_order())
        assert not evicted & set(keys)
        assert all(k not in before for k in new)
        self.tier.complete_store(new, self.link.submit(len(new), self.now))
        self.held = (self.held - evicted) | set(new)

    @rule(keys=st.lists(st.integers(0, 12), max_size=5))
    def touch(self, keys: list[int]) -> None:
        self.tier.touch(keys)

    @rule(keys=st.lists(st.integers(0, 12), min_size=1, max_size=4))
    def load(self, keys: list[int]) -> None:
        n = self.tier.lookup(keys, self.now)
        if n:
            self.tier.prepare_load(keys[:n])
            self.loads.append(keys[:n])

    @precondition(lambda self: self.loads)
    @rule()
    def finish_load(self) -> None:
        self.tier.complete_load(self.loads.pop(0))

    @invariant()
    def conserved(self) -> None:
        self.tier.check_invariants(self.now)
        assert set(self.tier.lru_order()) == self.held
        assert len(self.tier) <= self.tier.num_blocks


TestTierMachine = TierMachine.TestCase
TestTierMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
