"""vLLM's offloading-connector test scenarios, replayed on kvsim's connector and scheduler.

Each test names the vLLM test it follows (``tests/v1/kv_connector/unit/test_offloading_connector
.py``, since moved to ``tests/v1/kv_connector/unit/offloading_connector/test_scheduler.py``;
``tests/v1/kv_offload/test_cpu_offloading.py``); the scenarios are in our own words, with GPU and
offloaded blocks of one size (kvsim's tier stores GPU blocks: vLLM's ``block_size_factor`` 1), 16
tokens a block. Every expected number is worked out in the comments.
"""

from __future__ import annotations

import pytest

from kvsim.core.kv.offload import CpuTier, TierAccess
from kvsim.core.kv.paged import PagedAllocator
from kvsim.core.scheduler import V1Scheduler
from kvsim.core.scheduler.offload import OffloadConnector
from kvsim.workload.request import Request
from tests.scheduler.conftest import engine_args, step, tokens

B = 16
BLOCK_BYTES = 1_000_000  # 1 MB a block over a 1 GB/s link: 1 ms a block


def parts(num_gpu_blocks: int = 21, num_cpu_blocks: int = 8, prompt_only: bool = True):
    pool = PagedAllocator(
        capacity_tokens=num_gpu_blocks * B,
        block_size_tokens=B,
        enable_prefix_caching=True,
        reserve_null_block=True,
    )
    conn = OffloadConnector(
        pool,
        CpuTier(num_blocks=num_cpu_blocks),
        block_bytes=BLOCK_BYTES,
        bandwidth_bytes_per_s=1e9,
        prompt_only=prompt_only,
    )
    return pool, conn


def doc(req_id: int, *segs: tuple[object, int], output: int = 4) -> Request:
    prompt = sum(n for _, n in segs)
    return Request(req_id, 0.0, prompt, output, output, token_segments=segs)


def test_store_whole_blocks_only() -> None:
    """``test_offloading_connector`` (store part): full blocks are offered once each; a block
    one token short is not; the token that fills it stores that one block (decode blocks are
    stored only with ``offload_prompt_only`` off: ``test_store_prompt_blocks_only``)."""
    _pool, conn = parts(prompt_only=False)
    r = doc(0, ("x", 48), output=20)
    # its prefill computed 48 tokens = 3 full blocks -> 3 stored, 3 MB, ends at 0 + 3 ms
    r.num_computed_tokens = 48
    conn.store([r], 0.0)
    assert conn.tier.num_stored_blocks == 3
    assert conn.gpu_to_cpu.num_bytes == 3 * BLOCK_BYTES
    assert conn.gpu_to_cpu.busy_until_s == pytest.approx(0.003)
    # 15 decode tokens later: 63 computed, block 3 one token short -> nothing new
    r.num_output_tokens = 16
    r.num_computed_tokens = 63
    conn.store([r], 1.0)
    assert conn.tier.num_stored_blocks == 3
    # one more: 64 -> block 3 stored alone, 1 MB from t=2 to 2.001
    r.num_output_tokens, r.num_computed_tokens = 17, 64
    conn.store([r], 2.0)
    assert conn.tier.num_stored_blocks == 4
    assert conn.gpu_to_cpu.busy_until_s == pytest.approx(2.001)
    assert conn.tier.occupancy(2.0005) == (3, 1, 0, 4)  # (stored, storing, loading, free)


def test_store_prompt_blocks_only() -> None:
    """vLLM 0.34.0's default ``offload_prompt_only`` (``OffloadingSpec``, ``vllm/v1/kv_offload/
    base.py``): ``_calc_num_offloadable_tokens`` caps the stored tokens at the prompt's, so the
    blocks a request's decode fills are never stored."""
    _pool, conn = parts()
    r = doc(0, ("x", 20), output=40)
    # prefill: 20 computed -> floor(20 / 16) = 1 full block of prompt -> 1 stored
    r.num_computed_tokens = 20
    conn.store([r], 0.0)
    assert conn.tier.num_stored_blocks == 1
    # 39 outputs later: 59 computed fill blocks 1 and 2, but the cap is min(59, 20) = 20
    # tokens -> still block 0 alone; 1 MB moved in all
    r.num_output_tokens, r.num_computed_tokens = 39, 59
    conn.store([r], 1.0)
    assert conn.tier.num_stored_blocks == 1
    assert conn.gpu_to_cpu.num_bytes == BLOCK_BYTES
    # the same request with the cap off stores every full block: floor(59 / 16) = 3
    _pool, conn = parts(prompt_only=False)
    conn.store([r], 1.0)
    assert conn.tier.num_stored_blocks == 3


def test_store_refused_when_no_room_is_offered_again() -> None:
    """``test_offloading_connector`` ("fail prepare_store"): a store the tier cannot take
    leaves the blocks to offer again. A 2-block tier whose blocks both load cannot evict."""
    pool, conn = parts(num_cpu_blocks=2)
    a = doc(0, ("a", 32))
    a.num_computed_tokens = 32
    conn.store([a], 0.0)  # a0, a1 stored by t=0.002; a is rank 1: a0 (1, -1), a1 (1, -2)
    # both read by another request's load (rank 2): not evictable; raised to (2, -1), (2, -2)
    conn.tier.prepare_load(pool.block_keys(a, 0, 2), TierAccess(), 0)
    b = doc(1, ("b", 16))
    b.num_computed_tokens = 16
    conn.store([b], 1.0)  # no room: b0 not stored, offered again next time (b: rank 3)
    assert conn.tier.num_stored_blocks == 2
    conn.tier.complete_load(pool.block_keys(a, 0, 2))
    # the load ended: the least rank, a1 (2, -2), is evicted (a request's tail goes before its
    # head, vLLM 0.34.0 LRUCachePolicy); b0 stored as (3, -1)
    conn.store([b], 2.0)
    assert conn.tier.num_stored_blocks == 3
    [a0, a1], [b0] = pool.block_keys(a, 0, 2), pool.block_keys(b, 0, 1)
    assert a1 not in conn.tier
    assert conn.tier.eviction_order(3.0) == [a0, b0]


def test_lookup_continues_past_the_gpu_hit() -> None:
    """``test_offloading_connector`` (load part) with a GPU hit: the tier is asked from the
    first block the GPU lacks; its hits past it are loaded, the GPU's are not."""
    _pool, conn = parts()
    old = doc(0, ("p", 80))
    old.num_computed_tokens = 80
    conn.store([old], 0.0)  # p0..p4 in the tier by t=0.005
    conn.now_s = 1.0
    new = doc(1, ("p", 80), ("q", 20))  # 100 tokens: 6 full blocks, p0..p4 + one p/q block
    # a GPU hit of 2 blocks (32 tokens): the tier is looked up from block 2: p2, p3, p4 held,
    # the 6th block (tokens 80..95, q) is not -> 3 blocks = 48 tokens
    assert conn.matched_tokens(new, 32) == 48
    # no GPU hit: all 5 -> 80 tokens
    assert conn.matched_tokens(new, 0) == 80
    # a GPU hit of 5 blocks: the tier has nothing past p4 -> 0
    assert conn.matched_tokens(new, 80) == 0


def test_a_hit_block_still_being_stored_defers_the_request() -> None:
    """vLLM 0.34.0 ``CPUOffloadingManager.lookup`` answers ``HIT_PENDING`` for a block whose
    copy is in flight; ``_maximal_prefix_lookup`` counts it and keeps walking, and a run with
    one makes ``get_num_new_matched_tokens`` return ``None`` (look again later). A miss before
    the pending block ends the walk first: no deferral."""
    _pool, conn = parts()
    old = doc(0, ("p", 64))
    old.num_computed_tokens = 64
    conn.store([old], 0.0)  # p0..p3: 4 MB, ready at t=0.004
    new = doc(1, ("p", 64), ("q", 16))
    conn.now_s = 0.002
    assert conn.matched_tokens(new, 0) is None  # p0..p3 held, all still storing
    conn.now_s = 0.004
    assert conn.matched_tokens(new, 0) == 64
    # p0..p3 + r0 offered at t=1: r0 (block 4) the only new one, storing until 1.001
    longer = doc(2, ("p", 64), ("r", 16))
    longer.num_computed_tokens = 80
    conn.store([longer], 1.0)
    conn.now_s = 1.0005
    # 4 stored + 1 storing -> deferred; a walk that misses at block 4 never reaches r0
    assert conn.matched_tokens(doc(3, ("p", 64), ("r", 32)), 0) is None
    assert conn.matched_tokens(doc(4, ("p", 64), ("s", 32)), 0) == 64
    conn.now_s = 1.001
    assert conn.matched_tokens(doc(3, ("p", 64), ("r", 32)), 0) == 80


def test_whole_prompt_hit_recomputes_its_last_token() -> None:
    """vLLM loads every full block of the prompt and then computes its last token
    (``_update_waiting_for_remote_kv``): a 64-token prompt fully in the tier loads 64 tokens
    (4 ms) and counts 63 computed."""
    pool, conn = parts()
    old = doc(0, ("p", 64))
    old.num_computed_tokens = 64
    conn.store([old], 0.0)
    new = doc(1, ("p", 64))
    conn.now_s = 1.0
    assert conn.matched_tokens(new, 0) == 64
    assert pool.allocate(new, 64) is not None
    assert conn.start_load(new, 0, 64) == pytest.approx(1.004)
    assert new.num_computed_tokens == 63
    assert new.num_cached_tokens == 64


def test_scheduler_parks_the_loading_request_and_admits_the_next() -> None:
    """``test_cpu_offloading.py`` / vLLM's ``WAITING_FOR_REMOTE_KVS``: the head with a tier hit
    takes its GPU blocks and leaves the queue while it loads; the request behind it is admitted
    in the same step, and a third with the same prefix hits the first one's GPU blocks."""
    pool, conn = parts(num_gpu_blocks=41)
    sched = V1Scheduler(pool, engine_args(enable_prefix_caching=True, reserve_null_block=True))
    sched.offload = conn
    old = doc(9, ("p", 64))
    old.num_computed_tokens = 64
    conn.store([old], 0.0)
    conn.now_s = 1.0
    a = doc(0, ("p", 64), ("a", 16))  # 80 tokens: tier hit p0..p3 = 64 tokens
    b = doc(1, ("b", 40))  # no hit anywhere
    c = doc(2, ("p", 64), ("c", 16))  # same prefix as a
    for r in (a, b, c):
        sched.add_request(r)
    plan, _ = step(sched)
    # a: 4 blocks taken for the 64 tokens it loads (vLLM allocate_slots with the external
    # tokens only; the 16 it computes get theirs when it is scheduled), parked; b: 40 tokens
    # scheduled; c: its GPU lookup now finds a's p0..p3 (cached as a took them, before the
    # load ends: see the connector's docstring), so the tier is asked from block 4, a "c"
    # block -> no tier hit: c is scheduled with 80 - 64 = 16 tokens
    assert conn.take_started() == [a]
    assert conn.loads[a].done_s == pytest.approx(1.004)
    assert a.num_computed_tokens == 64
    assert pool.held_slots(a.req_id) == 64
    assert [r.req_id for r in plan.scheduled] == [1, 2]
    assert plan.num_new_tokens == [40, 16]
    # the load ends: a back at the queue's front, scheduled next step with its last 16 tokens
    # (b and c decode one token each)
    conn.finish_load(a)
    sched.waiting.appendleft(a)
    plan, _ = step(sched)
    assert tokens(plan) == {0: 16, 1: 1, 2: 1}
    # counters (vLLM 0.34.0: a request queries the tokens its GPU hit lacks): a 80 tokens with
    # 64 hit; b 40 with none; c 80 - 64 (its GPU hit) = 16 with none -> 136 queried, 64 hit
    assert conn.external_prefix_cache_queries == 136
    assert conn.external_prefix_cache_hits == 64


def test_scheduler_skips_a_deferred_head_and_admits_the_next() -> None:
    """vLLM 0.34.0 ``Scheduler.schedule``: a request whose external lookup returns ``None`` is
    skipped (``skip_request``) and the waiting pass goes on; the skipped one is put back at the
    queue's front (``prepend_requests``) and looked up again next step."""
    pool, conn = parts(num_gpu_blocks=41)
    sched = V1Scheduler(pool, engine_args(enable_prefix_caching=True, reserve_null_block=True))
    sched.offload = conn
    old = doc(9, ("p", 64))
    old.num_computed_tokens = 64
    conn.store([old], 0.0)  # p0..p3 ready at t=0.004
    a = doc(0, ("p", 64), ("a", 16))  # tier run p0..p3, still storing at t=0.002
    b = doc(1, ("b", 40))  # no hit anywhere
    for r in (a, b):
        sched.add_request(r)
    conn.now_s = 0.002
    plan, _ = step(sched)
    # a skipped, b admitted behind it with all 40 of its tokens; a first in the queue again
    assert [r.req_id for r in plan.scheduled] == [1]
    assert plan.num_new_tokens == [40]
    assert plan.num_deferred == 1
    assert list(sched.waiting) == [a]
    assert not conn.take_started()
    # the store ended: a's lookup hits 4 blocks = 64 tokens, its load starts (4 ms)
    conn.now_s = 0.004
    plan, _ = step(sched)
    assert conn.take_started() == [a]
    assert conn.loads[a].done_s == pytest.approx(0.008)
    assert tokens(plan) == {1: 1}
    assert plan.num_deferred == 0


def test_a_load_in_flight_delays_a_request_hitting_its_blocks() -> None:
    """vLLM ``get_num_new_matched_tokens`` returns ``None`` when a hit block is being loaded
    (``_blocks_being_loaded``): the request waits rather than loading it twice."""
    pool, conn = parts()
    old = doc(9, ("p", 64))
    old.num_computed_tokens = 64
    conn.store([old], 0.0)
    conn.now_s = 1.0
    a, c = doc(0, ("p", 64), ("a", 16)), doc(2, ("p", 64), ("c", 16))
    assert conn.matched_tokens(a, 0) == 64
    assert pool.allocate(a, 80) is not None
    conn.start_load(a, 0, 64)
    # c with no GPU hit (as if a's GPU blocks were not cached): p0..p3 are being loaded
    assert conn.matched_tokens(c, 0) is None
    conn.finish_load(a)
    assert conn.matched_tokens(c, 0) == 64


def test_a_finished_request_commits_its_blocks_recency() -> None:
    """vLLM 0.34.0 ``on_request_finished`` (signalled at ``build_connector_meta`` for the step's
    finished requests): a request's blocks rank by its number until it finishes, then get fresh
    numbers from its last block to its first."""
    pool, conn = parts()
    a, b = doc(0, ("a", 48)), doc(1, ("b", 32))
    a.num_computed_tokens, b.num_computed_tokens = 48, 32
    conn.store([a, b], 0.0)  # a: number 1, a0..a2 (1, -1..-3); b: number 2, b0, b1 (2, -1..-2)
    a_keys, b_keys = list(pool.block_keys(a, 0, 3)), list(pool.block_keys(b, 0, 2))
    # least rank first: a's tail to head, then b's
    assert conn.tier.eviction_order(1.0) == a_keys[::-1] + b_keys[::-1]
    conn.forget(a)  # a2 -> (3, 0), a1 -> (4, 0), a0 -> (5, 0): after all of b's
    assert conn.tier.eviction_order(1.0) == b_keys[::-1] + a_keys[::-1]
    assert conn.tier.rank_of(a_keys[0]) == (5, 0)
