"""The CPU tier's request-ranked LRU rules and the link's timing, hand-worked
(``kvsim.core.kv.offload``).

The rules are vLLM 0.34.0's (``vllm/v1/kv_offload/cpu/manager.py``, ``CPUOffloadingManager``,
and ``cpu/policies/lru.py``, ``LRUCachePolicy``), stated in the module docstring; every expected
list here is worked out by hand from them, and ``NaiveTier`` restates them plainly for the
random runs. ``make test-vllm`` replays random runs on vLLM's own manager as well
(``tests/vllm/test_vllm_cpu_tier.py``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from librt.vecs import vec
from mypy_extensions import i64

from kvsim.core.kv.offload import (
    CpuTier,
    HeldRun,
    TierAccess,
    TransferLink,
    rank_pair,
    rank_value,
)


def v(keys: list[int]) -> vec[i64]:
    """The tier takes keys as a packed vector (``PagedAllocator.block_keys``)."""
    return vec[i64](keys)


def stored(
    tier: CpuTier, keys: list[int], access: TierAccess, ready_s: float, now_s: float = 0.0
) -> list[int]:
    """Offer ``keys`` (block indices 0 on) and time the copy of the new ones to ``ready_s``."""
    new = tier.prepare_store(v(keys), now_s, access, 0)
    assert new is not None
    tier.complete_store(new, ready_s)
    return list(new)


def test_rank_value_orders_as_vllms_pairs() -> None:
    # (1, -2) < (1, -1) < (1, 0) < (2, -5): a request's tail before its head, a committed rank
    # after every provisional one of the same number, a later number after all of them
    pairs = [(1, 2), (1, 1), (1, 0), (2, 5)]
    values = [rank_value(r, p) for r, p in pairs]
    assert values == sorted(values)
    assert [rank_pair(x) for x in values] == [(1, -2), (1, -1), (1, 0), (2, -5)]
    with pytest.raises(ValueError, match="position"):
        rank_value(1, 1 << 24)


def test_ranks_follow_requests_as_vllm_0_34_does() -> None:
    """A 4-block tier through stores, a load, finishes and a store that finds its key still
    storing; each rank worked out by hand from ``LRUCachePolicy``'s rules."""
    tier = CpuTier(num_blocks=4)
    a, b, c, d, e = (TierAccess() for _ in range(5))
    # A offers [1, 2] (blocks 0, 1): A's first access gives it number 1; 1 -> (1, -1),
    # 2 -> (1, -2). B offers [3]: number 2; 3 -> (2, -1). All stored at t=1.
    assert stored(tier, [1, 2], a, ready_s=1.0) == [1, 2]
    assert stored(tier, [3], b, ready_s=1.0) == [3]
    assert tier.occupancy(0.5) == (0, 3, 0, 1)  # (stored, storing, loading, free)
    assert tier.eviction_order(0.5) == []  # storing blocks are not evictable
    # by rank: 2 (1, -2), 1 (1, -1), 3 (2, -1): A's tail before its head
    assert tier.eviction_order(2.0) == [2, 1, 3]
    # A finishes: its recorded blocks from the last to the first get 3 and 4:
    # 2 -> (3, 0), 1 -> (4, 0); order 3 (2, -1), 2, 1
    tier.finish(a)
    assert tier.rank_of(2) == (3, 0)
    assert tier.rank_of(1) == (4, 0)
    assert tier.eviction_order(2.0) == [3, 2, 1]
    # a lookup records nothing: asked ten times, the order stays
    for _ in range(10):
        assert tier.held_run(v([1, 2]), 2.0) == (2, False, False)
    assert tier.eviction_order(2.0) == [3, 2, 1]
    # C loads [1] (its block 0): number 5; (5, -1) > (4, 0) -> 1 raised to (5, -1), and not
    # evictable while the load reads it
    tier.prepare_load(v([1]), c, 0)
    assert tier.rank_of(1) == (5, -1)
    assert tier.eviction_order(2.0) == [3, 2]
    # C offers [1, 9, 8] (blocks 0-2): 1 held and already recorded; 9, 8 new: one block short,
    # the least rank that is not offered goes: 3 (2, -1); 9 -> (5, -2), 8 -> (5, -3)
    assert stored(tier, [1, 9, 8], c, ready_s=3.0, now_s=2.0) == [9, 8]
    assert 3 not in tier
    assert tier.num_evicted_blocks == 1
    tier.complete_load(v([1]))
    # 2 (3, 0), 8 (5, -3), 9 (5, -2), 1 (5, -1)
    assert tier.eviction_order(3.5) == [2, 8, 9, 1]
    # B finishes: its only block, 3, is gone, so no number is drawn; C finishes:
    # 8 -> (6, 0), 9 -> (7, 0), 1 -> (8, 0)
    tier.finish(b)
    tier.finish(c)
    assert [tier.rank_of(k) for k in (8, 9, 1)] == [(6, 0), (7, 0), (8, 0)]
    assert tier.eviction_order(3.5) == [2, 8, 9, 1]
    # D offers [5, 6] at t=4 (ready at 5): number 9; the tier is full: 2 and 8 go
    assert stored(tier, [5, 6], d, ready_s=5.0, now_s=4.0) == [5, 6]
    assert 2 not in tier
    assert 8 not in tier
    assert tier.rank_of(5) == (9, -1)
    # E offers [5] at t=4.5, still storing: not recorded (E draws no number), nothing new;
    # E's finish changes nothing
    assert stored(tier, [5], e, ready_s=9.0, now_s=4.5) == []
    tier.finish(e)
    assert e.rank == 0
    assert tier.rank_of(5) == (9, -1)
    # F offers [7, 10, 11] at t=4.6: 5 and 6 storing, 9 and 1 evictable -> 2 of 3 -> None,
    # nothing evicted; F's accesses stay recorded (its number drawn: 10)
    f = TierAccess()
    assert tier.prepare_store(v([7, 10, 11]), 4.6, f, 0) is None
    assert f.rank == 10
    assert sorted(tier.eviction_order(4.6)) == [1, 9]
    tier.check_invariants(4.6)


def test_a_store_keeps_the_blocks_it_offers() -> None:
    """vLLM ``test_already_stored_block_not_evicted_during_prepare_store``: a held block the
    store offers is not evicted to make room for the others, though it ranks least."""
    tier = CpuTier(num_blocks=4)
    a, b = TierAccess(), TierAccess()
    stored(tier, [1, 2], a, ready_s=0.0)  # 1 (1, -1), 2 (1, -2)
    # B offers [2, 3, 4, 5]: 2 held and stored; 3 new blocks, 2 free: one victim; 2 ranks
    # least (B's access raises it to (2, -1): still least) but is offered -> 1 goes
    new = tier.prepare_store(v([2, 3, 4, 5]), 1.0, b, 0)
    assert new is not None
    assert list(new) == [3, 4, 5]
    assert 2 in tier
    assert 1 not in tier


def test_a_finish_finds_a_block_stored_again_in_another_slot() -> None:
    """A request's block evicted and stored again by another request sits in another slot
    when the first request finishes: its finish re-ranks that block, not the key that took
    the old slot (the tier remembers where it saw each block, a hint checked against the
    slot's key)."""
    tier = CpuTier(num_blocks=2)
    a, b, c = TierAccess(), TierAccess(), TierAccess()
    stored(tier, [1], a, ready_s=0.0)  # A: number 1; 1 -> (1, -1), slot 0
    # B offers [2, 3] at t=1: one block free, one victim: 1 (the only evictable) goes; 2 takes
    # its slot 0, 3 a new slot 1; B: number 2; 2 -> (2, -1), 3 -> (2, -2)
    assert stored(tier, [2, 3], b, ready_s=1.0, now_s=1.0) == [2, 3]
    assert 1 not in tier
    # C offers [1] at t=2: one victim, the least of 2 (2, -1) and 3 (2, -2): 3; 1 takes slot 1;
    # C: number 3; 1 -> (3, -1)
    assert stored(tier, [1], c, ready_s=2.0, now_s=2.0) == [1]
    assert 3 not in tier
    # A finishes: of its recorded blocks, 1 is held (in slot 1 now): number 4, 1 -> (4, 0);
    # 2, in A's old slot, keeps (2, -1)
    tier.finish(a)
    assert tier.rank_of(1) == (4, 0)
    assert tier.rank_of(2) == (2, -1)
    assert tier.eviction_order(3.0) == [2, 1]
    tier.check_invariants(3.0)


def test_a_private_block_is_mapped_when_its_request_is_preempted() -> None:
    """Blocks past ``private_from`` are held, ranked and evicted as any other, outside the key
    map: a lookup finds them only once their request is mapped (after a preemption), and
    the request's stores are mapped from then on."""
    tier = CpuTier(num_blocks=3)
    a, b = TierAccess(), TierAccess()
    # A (number 1) stores blocks 0-2, keys 1-3; 2 and 3 its own: 1 (1, -1), 2 (1, -2), 3 (1, -3)
    new = tier.prepare_store(v([1, 2, 3]), 0.0, a, 0, private_from=1)
    assert new is not None
    assert list(new) == [1, 2, 3]
    tier.complete_store(new, 1.0)
    assert tier.held_run(v([1, 2, 3]), 2.0) == (1, False, False)  # the key map holds 1 alone
    assert 2 in tier
    assert 3 in tier
    assert len(tier) == 3
    assert tier.occupancy(2.0) == (3, 0, 0, 0)
    # B (number 2) stores key 4 at t=2: full, one victim, the least rank: 3 (1, -3)
    assert stored(tier, [4], b, ready_s=2.5, now_s=2.0) == [4]
    assert 3 not in tier
    tier.check_invariants(2.0)
    # A is preempted: 2 joins the map; a lookup of A's blocks finds 1 and 2, then misses 3
    tier.map_private(a)
    assert tier.held_run(v([1, 2, 3]), 3.0) == (2, False, False)
    # A recomputes block 2 (key 3) and offers it at t=3: full; evictable 1 (1, -1), 2 (1, -2),
    # 4 (2, -1): 2 goes; 3 is stored mapped, though past private_from
    new = tier.prepare_store(v([3]), 3.0, a, 2, private_from=1)
    assert new is not None
    assert list(new) == [3]
    tier.complete_store(new, 3.5)
    assert tier.held_run(v([3]), 4.0) == (1, False, False)
    assert sorted(tier.eviction_order(4.0)) == [1, 3, 4]
    tier.check_invariants(4.0)


def test_store_offers_held_keys_as_nothing_new() -> None:
    tier = CpuTier(num_blocks=2)
    stored(tier, [1, 2], TierAccess(), ready_s=0.0)
    new = tier.prepare_store(v([1, 2]), 1.0, TierAccess(), 0)
    assert new is not None
    assert list(new) == []  # both held: nothing to copy, no eviction
    assert tier.num_evicted_blocks == 0


def test_a_running_request_s_blocks_are_evicted_before_newer_committed_ones() -> None:
    # 3 blocks. A (number 1) stores [1, 2]: ranks (1, -1), (1, -2); A keeps running. B (number
    # 2) stores [3] and finishes: 3 -> (3, 0). C (number 4) stores [4]: one block short; the
    # least rank is A's tail (1, -2), though A never finished: key 2 goes. C's next store [5]
    # (block 1) takes A's head (1, -1): key 1. Left: 3 (3, 0), then C's tail before its head:
    # 5 (4, -2), 4 (4, -1).
    tier = CpuTier(num_blocks=3)
    a, b, c = TierAccess(), TierAccess(), TierAccess()
    stored(tier, [1, 2], a, ready_s=0.0)
    stored(tier, [3], b, ready_s=0.0)
    tier.finish(b)
    assert tier.rank_of(3) == (3, 0)
    assert tier.prepare_store(v([4]), 1.0, c, 0) is not None
    assert [k in tier for k in (1, 2, 3)] == [True, False, True]
    tier.complete_store(v([4]), 1.0)
    assert tier.prepare_store(v([5]), 2.0, c, 1) is not None
    assert [k in tier for k in (1, 3, 4)] == [False, True, True]
    tier.complete_store(v([5]), 2.0)
    assert tier.eviction_order(3.0) == [3, 5, 4]
    tier.check_invariants(3.0)


def test_a_load_in_flight_marks_the_keys_it_reads() -> None:
    # keys 1-4 stored; a load reads 2 and 3: a lookup finding either is told a load reads
    # it until the load completes (vLLM OffloadingConnector: a hit on such a block waits, not
    # loads twice)
    tier = CpuTier(num_blocks=4)
    stored(tier, [1, 2, 3, 4], TierAccess(), ready_s=0.0)
    tier.prepare_load(v([2, 3]), TierAccess(), 1)
    assert tier.held_run(v([1]), 1.0) == (1, False, False)
    assert tier.held_run(v([1, 2]), 1.0) == (2, False, True)
    keys = v([1, 2, 3, 4, 5])  # 5: not held
    assert tier.held_run(keys, 1.0, 2) == (2, False, True)  # [3, 4], 5 missed
    assert tier.held_run(keys, 1.0, 3) == (1, False, False)  # [4]
    tier.prepare_load(v([3]), TierAccess(), 2)  # a second load reads 3
    tier.complete_load(v([2, 3]))
    assert tier.held_run(v([1, 2]), 1.0) == (2, False, False)
    assert tier.held_run(v([3]), 1.0) == (1, False, True)  # still read by the second load
    tier.complete_load(v([3]))
    assert tier.held_run(keys, 1.0) == (4, False, False)
    tier.check_invariants(1.0)


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


def test_complete_store_needs_its_prepare_store() -> None:
    tier = CpuTier(num_blocks=2)
    with pytest.raises(RuntimeError, match="prepare_store"):
        tier.complete_store(v([1]), 0.0)


class NaiveTier:
    """The module docstring's rules written plainly over dicts: key -> ``[ready_s, loads,
    (rank, -position)]``; a request's number and the blocks it recorded (key -> position).
    The oracle the random runs check the tier's stores, evictions, ranks and lookups
    against."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.blocks: dict[int, list] = {}
        self.next_rank = 0
        self.number: dict[int, int] = {}
        self.recorded: dict[int, dict[int, int]] = {}

    def _number(self, req: int) -> int:
        if req not in self.number:
            self.next_rank += 1
            self.number[req] = self.next_rank
        return self.number[req]

    def _record(self, req: int, key: int, position: int) -> None:
        recorded = self.recorded.setdefault(req, {})
        if key in recorded:
            return
        recorded[key] = position
        rank = (self._number(req), -position)
        if key in self.blocks and self.blocks[key][2] < rank:
            self.blocks[key][2] = rank

    def held_run(self, keys: list[int], now_s: float) -> tuple[int, bool, bool]:
        found, storing, loading = 0, False, False
        for key in keys:
            if key not in self.blocks:
                break
            storing |= self.blocks[key][0] > now_s
            loading |= self.blocks[key][1] > 0
            found += 1
        return found, storing, loading

    def evictable(self, now_s: float) -> list[int]:
        """Keys eviction would take, first first."""
        ready = [(b[2], k) for k, b in self.blocks.items() if b[0] <= now_s and b[1] == 0]
        return [k for _, k in sorted(ready)]

    def prepare_store(
        self, keys: list[int], now_s: float, req: int, first: int = 0
    ) -> list[int] | None:
        """Offer ``keys``, block positions ``first + 1`` on."""
        for i, key in enumerate(keys):
            if key not in self.blocks or self.blocks[key][0] <= now_s:
                self._record(req, key, first + i + 1)
        new = [k for k in dict.fromkeys(keys) if k not in self.blocks]
        if not new:
            return []
        need = len(new) - (self.num_blocks - len(self.blocks))
        victims = [k for k in self.evictable(now_s) if k not in keys][: max(need, 0)]
        if len(victims) < need:
            return None
        for k in victims:
            del self.blocks[k]
        number = self._number(req)
        for k in new:
            self.blocks[k] = [math.inf, 0, (number, -(first + keys.index(k) + 1))]
        return new

    def complete_store(self, keys: list[int], ready_s: float) -> None:
        for k in keys:
            self.blocks[k][0] = ready_s

    def prepare_load(self, keys: list[int], req: int) -> None:
        for i, k in enumerate(keys):
            self.blocks[k][1] += 1
            self._record(req, k, i + 1)

    def complete_load(self, keys: list[int]) -> None:
        for k in keys:
            self.blocks[k][1] -= 1

    def finish(self, req: int) -> None:
        recorded = self.recorded.pop(req, {})
        for key in sorted(recorded, key=recorded.__getitem__, reverse=True):
            if key in self.blocks:
                self.next_rank += 1
                self.blocks[key][2] = (self.next_rank, 0)


def request_keys(req: int, num: int, life: int = 0) -> list[int]:
    """A request's block keys: a prefix shared by requests of the same ``req % 3`` (keys
    100 * family + i, ``shared_blocks(req)`` of them), then its own, private to this life of
    the id (distinct within the request, as prefix hashes are)."""
    shared = shared_blocks(req)
    return [100 * (req % 3) + i for i in range(shared)] + [
        10_000 + 1_000 * life + 50 * req + i for i in range(num - shared)
    ]


def shared_blocks(req: int) -> int:
    """How many of ``request_keys``' blocks other requests may name (``private_from``)."""
    return (req * 7) % 4


class Offers:
    """What the connector offers for each request (``OffloadConnector.store_tokens``): the
    blocks from the next not offered on, and, once its private blocks are mapped (a preempted
    request: ``CpuTier.map_private``), any of them again. A finished id starts a new life."""

    def __init__(self) -> None:
        self.life: dict[int, int] = {}
        self.next: dict[int, int] = {}
        self.mapped: set[int] = set()

    def keys(self, req: int, num: int) -> list[int]:
        return request_keys(req, num, self.life.get(req, 0))

    def start(self, req: int) -> int:
        """The first block index to offer (0 once mapped)."""
        return 0 if req in self.mapped else self.next.get(req, 0)

    def offered(self, req: int, num: int) -> None:
        self.next[req] = max(self.next.get(req, 0), num)

    def finished(self, req: int) -> None:
        self.life[req] = self.life.get(req, 0) + 1
        self.next.pop(req, None)
        self.mapped.discard(req)


class TierMachine(RuleBasedStateMachine):
    """Random requests storing, loading and finishing over time on a 6-block tier: every
    block in exactly one category (``check_invariants``), and the stores, evictions, ranks and
    lookups equal ``NaiveTier``'s."""

    def __init__(self) -> None:
        super().__init__()
        self.tier = CpuTier(num_blocks=6)
        self.naive = NaiveTier(6)
        self.now = 0.0
        self.link = TransferLink(1.0)
        self.access: dict[int, TierAccess] = {}
        self.loads: list[list[int]] = []
        self.offers = Offers()

    def _access(self, req: int) -> TierAccess:
        return self.access.setdefault(req, TierAccess())

    @rule(req=st.integers(0, 7), num=st.integers(1, 5), dt=st.floats(0, 2))
    def store(self, req: int, num: int, dt: float) -> None:
        self.now += dt
        start = self.offers.start(req)
        keys = self.offers.keys(req, num)[start:]
        new = self.tier.prepare_store(
            v(keys), self.now, self._access(req), start, shared_blocks(req)
        )
        naive = self.naive.prepare_store(keys, self.now, req, start)
        assert (new if new is None else list(new)) == naive
        if new is not None:
            self.offers.offered(req, num)
            ready_s = self.link.submit(len(new), self.now)
            self.tier.complete_store(new, ready_s)
            self.naive.complete_store(list(new), ready_s)

    @rule(req=st.integers(0, 7), num=st.integers(1, 5))
    def load(self, req: int, num: int) -> None:
        """The request was preempted and is looked up again: its own blocks are mapped."""
        self.tier.map_private(self._access(req))
        self.offers.mapped.add(req)
        keys = self.offers.keys(req, num)
        n, storing, loading = self.tier.held_run(v(keys), self.now)
        assert (n, storing, loading) == self.naive.held_run(keys, self.now)
        if n and not storing:
            self.tier.prepare_load(v(keys[:n]), self._access(req), 0)
            self.naive.prepare_load(keys[:n], req)
            self.loads.append(keys[:n])

    @precondition(lambda self: self.loads)
    @rule()
    def finish_load(self) -> None:
        keys = self.loads.pop(0)
        self.tier.complete_load(v(keys))
        self.naive.complete_load(keys)

    @rule(req=st.integers(0, 7))
    def finish(self, req: int) -> None:
        self.tier.finish(self._access(req))
        self.naive.finish(req)
        del self.access[req]
        self.naive.number.pop(req, None)  # (a request id used again is a new request)
        self.offers.finished(req)

    @invariant()
    def agrees(self) -> None:
        self.tier.check_invariants(self.now)
        assert self.tier.eviction_order(self.now) == self.naive.evictable(self.now)
        for key, block in self.naive.blocks.items():
            assert self.tier.rank_of(key) == block[2]
        assert len(self.tier) == len(self.naive.blocks)


TestTierMachine = TierMachine.TestCase
TestTierMachine.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)


@pytest.mark.parametrize("num_blocks", [8, 64])
def test_long_runs_match_the_naive_tier(rng: np.random.Generator, num_blocks: int) -> None:
    """20,000 random stores, loads, lookups and finishes of 12 request ids on an 8-block tier
    and a 64-block one (its heap rebuilt many times): stores, evictions and ranks stay
    ``NaiveTier``'s throughout. Half the lookups repeat the last one (a waiting head looked up
    again), which must change nothing. A request's own blocks are private (held outside the
    key map) until a load looks it up again, as after a preemption."""
    tier, naive = CpuTier(num_blocks=num_blocks), NaiveTier(num_blocks)
    link, now_s = TransferLink(4.0), 0.0
    access: dict[int, TierAccess] = {}
    offers = Offers()
    loads: list[list[int]] = []
    last, last_start, run = [0], 0, HeldRun()  # the last lookup, and what it found
    for step in range(20_000):
        req = int(rng.integers(0, 12))
        num = int(rng.integers(1, 7))
        keys = offers.keys(req, num)
        op = rng.integers(0, 5)
        if op == 0:  # another request's lookup: the shared prefix alone, from a GPU hit
            if rng.random() < 0.5:  # the last one again, resumed from what it found
                keys, start = last, last_start
            else:
                keys, start, run = keys[: shared_blocks(req)], int(rng.integers(0, 2)), HeldRun()
            last, last_start = keys, start
            want = naive.held_run(keys[start:], now_s)
            assert tier.held_run(v(keys), now_s, start, run) == want
            assert tier.held_run(v(keys), now_s, start) == want  # (afresh)
        elif op == 1:
            now_s += float(rng.exponential(0.5))
            start = offers.start(req)
            mine = access.setdefault(req, TierAccess())
            new = tier.prepare_store(v(keys[start:]), now_s, mine, start, shared_blocks(req))
            naive_new = naive.prepare_store(keys[start:], now_s, req, start)
            assert (new if new is None else list(new)) == naive_new
            if new is not None:
                offers.offered(req, num)
            if new is not None and len(new):
                ready_s = link.submit(len(new), now_s)
                tier.complete_store(new, ready_s)
                naive.complete_store(list(new), ready_s)
        elif op == 2:  # the request, preempted, is looked up again
            tier.map_private(access.setdefault(req, TierAccess()))
            offers.mapped.add(req)
            n, storing, _ = tier.held_run(v(keys), now_s)
            if n and not storing:
                tier.prepare_load(v(keys[:n]), access.setdefault(req, TierAccess()), 0)
                naive.prepare_load(keys[:n], req)
                loads.append(keys[:n])
        elif op == 3 and loads:
            done = loads.pop(0)
            tier.complete_load(v(done))
            naive.complete_load(done)
        elif op == 4 and req in access:
            tier.finish(access.pop(req))
            naive.finish(req)
            naive.number.pop(req, None)
            offers.finished(req)
        if step % 5 == 0:
            assert tier.eviction_order(now_s) == naive.evictable(now_s)
    assert tier.eviction_order(now_s) == naive.evictable(now_s)
    for key, block in naive.blocks.items():
        assert tier.rank_of(key) == block[2]
    tier.check_invariants(now_s)
