"""The CPU tier's LRU rules and the link's timing, hand-worked (``kvsim.core.kv.offload``).

Mirrors vLLM's ``tests/v1/kv_offload/test_cpu_manager.py`` (``test_cpu_manager``: store, lookup,
touch, eviction of the least recently used block that is neither loading nor being stored) in our
own words, every expected list worked out by hand from the rules in the module docstring.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from librt.vecs import vec
from mypy_extensions import i64

from kvsim.core.kv.offload import CpuTier, TransferLink


def v(keys: list[int]) -> vec[i64]:
    """The tier takes keys as a packed vector (``PagedAllocator.block_keys``)."""
    return vec[i64](keys)


def stored(tier: CpuTier, keys: list[int], ready_s: float, now_s: float = 0.0) -> list[int]:
    new = tier.prepare_store(v(keys), now_s)
    assert new is not None
    tier.complete_store(new, ready_s)
    return list(new)


def test_lru_eviction_order_follows_test_cpu_manager() -> None:
    """vLLM ``test_cpu_manager``'s sequence on a 4-block tier, in kvsim's terms."""
    tier = CpuTier(num_blocks=4)
    # store [1, 2] (copies end at t=1): both new, LRU order 1, 2; storing until t=1
    assert stored(tier, [1, 2], ready_s=1.0) == [1, 2]
    assert tier.occupancy(0.5) == (0, 2, 0, 2)  # (stored, storing, loading, free)
    assert tier.lookup(v([1, 2]), 0.5) == 0  # not ready: a lookup stops at block 1
    assert tier.lookup(v([1, 2]), 1.0) == 2
    # store [2, 3, 4, 5] at t=2: 2 is held; 3, 4, 5 are new, 1 slot short; the LRU block that
    # is not among the keys is 1 -> evicted; order 2, 3, 4, 5
    assert stored(tier, [2, 3, 4, 5], ready_s=3.0, now_s=2.0) == [3, 4, 5]
    assert tier.lru_order() == [2, 3, 4, 5]
    assert tier.num_evicted_blocks == 1
    # touch [4, 5, 2] (walked from the last): 2, 5, 4 moved to the back in that order ->
    # 3, 2, 5, 4; 4 (the first of the touched) is the most recent
    tier.touch(v([4, 5, 2]))
    assert tier.lru_order() == [3, 2, 5, 4]
    # a load reads 3 (t=3.5): it cannot be evicted while it loads
    tier.prepare_load(v([3]))
    assert tier.occupancy(3.5) == (3, 0, 1, 0)
    # store [6, 7] at t=4: two victims from the front, skipping 3 (loading): 2 and 5
    assert stored(tier, [6, 7], ready_s=5.0, now_s=4.0) == [6, 7]
    assert tier.lru_order() == [3, 4, 6, 7]
    tier.complete_load(v([3]))
    # store [8] at t=4.5 while 6 and 7 are still being stored (until t=5): the front, 3, can
    # go again now that its load ended -> 3 goes
    assert stored(tier, [8], ready_s=6.0, now_s=4.5) == [8]
    assert tier.lru_order() == [4, 6, 7, 8]
    # store [9, 10] at t=4.6: only 4 can go (6, 7, 8 storing) -> no room, nothing changes
    assert tier.prepare_store(v([9, 10]), 4.6) is None
    assert tier.lru_order() == [4, 6, 7, 8]
    tier.check_invariants(4.6)


def test_store_offers_held_keys_as_nothing_new() -> None:
    tier = CpuTier(num_blocks=2)
    stored(tier, [1, 2], ready_s=0.0)
    new = tier.prepare_store(v([1, 2]), 1.0)
    assert new is not None
    assert list(new) == []  # both held: nothing to copy, no eviction
    assert tier.num_evicted_blocks == 0


def test_a_load_in_flight_marks_the_keys_it_reads() -> None:
    # keys 1-4 stored; a load reads 2 and 3: a range with either is being loaded until the
    # load completes (vLLM OffloadingConnector: a hit on such a block waits, not loads twice)
    tier = CpuTier(num_blocks=4)
    stored(tier, [1, 2, 3, 4], ready_s=0.0)
    keys = v([1, 2, 3, 4, 5])  # 5: not held
    tier.prepare_load(v([2, 3]))
    assert not tier.any_loading(keys, 0, 1)  # [1]
    assert tier.any_loading(keys, 0, 2)  # [1, 2]
    assert tier.any_loading(keys, 2, 5)  # [3, 4, 5]
    assert not tier.any_loading(keys, 3, 5)  # [4, 5]
    tier.prepare_load(v([3]))  # a second load reads 3
    tier.complete_load(v([2, 3]))
    assert not tier.any_loading(keys, 0, 2)
    assert tier.any_loading(keys, 2, 3)  # still read by the second load
    tier.complete_load(v([3]))
    assert not tier.any_loading(keys, 0, 5)


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


class NaiveTier:
    """vLLM ``LRUOffloadingManager``'s rules written plainly over an ``OrderedDict`` (key ->
    [ready_s, ref_cnt], least recent first): the oracle ``TierMachine`` checks the tier's
    order and every store against."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.blocks: OrderedDict[int, list[float]] = OrderedDict()

    def touch(self, keys: list[int]) -> None:
        for key in reversed(keys):
            if key in self.blocks:
                self.blocks.move_to_end(key)

    def lookup(self, keys: list[int], now_s: float) -> int:
        found = 0
        for key in keys:
            if key not in self.blocks or self.blocks[key][0] > now_s:
                break
            found += 1
        return found

    def prepare_store(self, keys: list[int], now_s: float) -> list[int] | None:
        new = [k for k in dict.fromkeys(keys) if k not in self.blocks]
        need = len(new) - (self.num_blocks - len(self.blocks))
        victims = [
            k
            for k, (ready_s, ref_cnt) in self.blocks.items()
            if ref_cnt == 0 and ready_s <= now_s and k not in keys
        ][: max(need, 0)]
        if len(victims) < need:
            return None
        for k in victims:
            del self.blocks[k]
        return new

    def complete_store(self, keys: list[int], ready_s: float) -> None:
        for k in keys:
            self.blocks[k] = [ready_s, 0]

    def add_loads(self, keys: list[int], delta: int) -> None:
        for k in keys:
            self.blocks[k][1] += delta


class TierMachine(RuleBasedStateMachine):
    """Random stores, touches and loads over time: every block is in exactly one category
    (``check_invariants``), no block leaks (the tier's keys are exactly those stored and not
    evicted, a naive set kept beside it), and the LRU order, every store and every lookup
    equal ``NaiveTier``'s."""

    def __init__(self) -> None:
        super().__init__()
        self.tier = CpuTier(num_blocks=6)
        self.naive = NaiveTier(6)
        self.now = 0.0
        self.link = TransferLink(1.0)
        self.loads: list[list[int]] = []
        self.held: set[int] = set()

    @rule(keys=st.lists(st.integers(0, 12), min_size=1, max_size=5), dt=st.floats(0, 2))
    def store(self, keys: list[int], dt: float) -> None:
        self.now += dt
        before = set(self.tier.lru_order())
        new = self.tier.prepare_store(v(keys), self.now)
        naive = self.naive.prepare_store(keys, self.now)
        assert (new if new is None else list(new)) == naive
        if new is None:
            assert set(self.tier.lru_order()) == before
            return
        evicted = before - set(self.tier.lru_order())
        assert not evicted & set(keys)
        assert all(k not in before for k in new)
        ready_s = self.link.submit(len(new), self.now)
        self.tier.complete_store(new, ready_s)
        self.naive.complete_store(list(new), ready_s)
        self.held = (self.held - evicted) | set(new)

    @rule(keys=st.lists(st.integers(0, 12), max_size=5))
    def touch(self, keys: list[int]) -> None:
        self.tier.touch(v(keys))
        self.naive.touch(keys)

    @rule(keys=st.lists(st.integers(0, 12), min_size=1, max_size=4))
    def load(self, keys: list[int]) -> None:
        n = self.tier.lookup(v(keys), self.now)
        assert n == self.naive.lookup(keys, self.now)
        if n:
            self.tier.prepare_load(v(keys[:n]))
            self.naive.add_loads(keys[:n], 1)
            self.loads.append(keys[:n])

    @precondition(lambda self: self.loads)
    @rule()
    def finish_load(self) -> None:
        keys = self.loads.pop(0)
        self.tier.complete_load(v(keys))
        self.naive.add_loads(keys, -1)

    @invariant()
    def conserved(self) -> None:
        self.tier.check_invariants(self.now)
        assert set(self.tier.lru_order()) == self.held
        assert self.tier.lru_order() == list(self.naive.blocks)
        assert len(self.tier) <= self.tier.num_blocks


TestTierMachine = TierMachine.TestCase
TestTierMachine.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)


@pytest.mark.parametrize("num_blocks", [8, 40])
def test_long_runs_match_the_naive_tier(rng: np.random.Generator, num_blocks: int) -> None:
    """20,000 random touches, stores and loads on an 8-block tier (the log compacted about
    every 4,000 entries) and a 40-block one (30 keys: stores never evict): the order, stores
    and lookups stay ``NaiveTier``'s throughout. Half the touches repeat the last touched keys
    (a waiting head looked up again), and the order is read after one operation in five only
    (an implementation may defer what no eviction has read yet)."""
    tier, naive = CpuTier(num_blocks=num_blocks), NaiveTier(num_blocks)
    link, now_s = TransferLink(4.0), 0.0
    loads: list[list[int]] = []
    touched: list[int] = [0]
    for _ in range(20_000):
        keys = [int(k) for k in rng.integers(0, 30, size=int(rng.integers(1, 6)))]
        op = rng.integers(0, 4)
        if op == 0:
            if rng.random() < 0.5:
                keys = touched
            touched = keys
            tier.touch(v(keys))
            naive.touch(keys)
        elif op == 1:
            now_s += float(rng.exponential(0.5))
            new = tier.prepare_store(v(keys), now_s)
            assert (new if new is None else list(new)) == naive.prepare_store(keys, now_s)
            if new is not None and len(new):
                ready_s = link.submit(len(new), now_s)
                tier.complete_store(new, ready_s)
                naive.complete_store(list(new), ready_s)
        elif op == 2:
            n = tier.lookup(v(keys), now_s)
            assert n == naive.lookup(keys, now_s)
            if n:
                tier.prepare_load(v(keys[:n]))
                naive.add_loads(keys[:n], 1)
                loads.append(keys[:n])
        elif loads:
            done = loads.pop(0)
            tier.complete_load(v(done))
            naive.add_loads(done, -1)
        if rng.random() < 0.2:
            assert tier.lru_order() == list(naive.blocks)
    assert tier.lru_order() == list(naive.blocks)
    tier.check_invariants(now_s)


def test_a_touch_repeated_after_stores_moves_its_keys_past_them() -> None:
    """A waiting head's keys touched again after stores end up after those stores; a touch of
    other keys, and an eviction, see the order the touches made (worked by hand; vLLM
    ``LRUOffloadingManager``: a touch moves each held key to the most recent end)."""
    tier = CpuTier(num_blocks=6)
    tier.complete_store(tier.prepare_store(v([1, 2, 3]), 0.0) or v([]), 0.0)  # 1 2 3
    tier.touch(v([1]))  # 2 3 1
    tier.complete_store(tier.prepare_store(v([4]), 0.0) or v([]), 0.0)  # 2 3 1 4
    tier.touch(v([1]))  # 2 3 4 1
    tier.complete_store(tier.prepare_store(v([5]), 0.0) or v([]), 0.0)  # 2 3 4 1 5
    tier.touch(v([2]))  # 3 4 1 5 2
    # 6 and 7 need one block past the free one: the least recent, 3, goes -> 4 1 5 2 6 7
    new = tier.prepare_store(v([6, 7]), 1.0)
    assert new is not None
    tier.complete_store(new, 1.0)
    assert tier.lru_order() == [4, 1, 5, 2, 6, 7]
    assert tier.num_evicted_blocks == 1
    tier.check_invariants(1.0)


def test_log_compaction_keeps_the_order() -> None:
    """Touches far past the compaction threshold (twice the held keys plus the slack) leave
    the order what the touches make it: 3 keys touched in turn, the last touch [2, 0, 1]."""
    tier = CpuTier(num_blocks=3)
    stored(tier, [0, 1, 2], ready_s=0.0)
    for i in range(10_000):
        tier.touch(v([i % 3]))
    tier.touch(v([2, 0, 1]))  # walked from the last: 1, 0, 2 moved to the back -> 1, 0, 2
    assert tier.lru_order() == [1, 0, 2]
    tier.check_invariants(0.0)


def test_a_touch_repeated_after_evictions_keeps_the_stores_between() -> None:
    """Keys touched again after evictions have consumed everything older than them, the stores
    between included: the order keeps those stores (worked by hand on a 4-block tier)."""
    tier = CpuTier(num_blocks=4)
    tier.complete_store(v([1, 2]), 0.0)  # 1 2
    tier.touch(v([1, 2, 9]))  # 9 is not held: 2 then 1 move to the end -> 2 1
    tier.complete_store(v([3, 4]), 0.0)  # 2 1 3 4 (the tier is full)
    new = tier.prepare_store(v([5]), 1.0)  # evicts the least recent, 2 -> 1 3 4 5
    assert new is not None
    tier.complete_store(new, 1.0)
    assert tier.lru_order() == [1, 3, 4, 5]
    tier.touch(v([1, 2, 9]))  # only 1 is held: it moves to the end -> 3 4 5 1
    assert tier.lru_order() == [3, 4, 5, 1]
    tier.check_invariants(1.0)
