"""vLLM's own v1 scheduler and prefix-caching test scenarios, replayed on kvsim one by one.

Mirrors vLLM **v0.20.0**, files ``tests/v1/core/test_prefix_caching.py`` (``KVCacheManager``
driven directly) and ``tests/v1/core/test_scheduler.py`` (``Scheduler`` built by
``tests/v1/core/utils.py``), plus one v0.33.0 test for the prefix-cache stats rule, with the rules
that vLLM 0.34.0 (the release kvsim's ``vllm-v1`` profile follows, checked step by step by
``make test-vllm``) changed since worked in. Each test names the vLLM test it follows; the
scenarios are described in our own words and every expected number is vLLM's, worked out by
hand in the comments from vLLM's rules:

- block 0 is the null block, so ``num_blocks=11`` gives 10 usable blocks with ids 1..10;
- new blocks come from the front of the free queue; a freed request's blocks are released tail
  first, its full blocks (cached, keeping their keys) to the back and a partial last block to
  the front, every block to the front without caching (0.34.0 ``BlockPool.free_blocks``; in
  v0.20.0 all went to the back, and its ``test_prefill`` expects that order);
- a hit is whole blocks from the start, at most ``(num_tokens - 1) // 16`` of them; a hit on a
  free block counts against the free blocks; full blocks are cached inside the allocation.

Token ids become segment runs (``kvsim.workload.tokens``): vLLM's ``[i] * n`` prompt is ``(("tok",
i), n)``. vLLM's ``make_request`` sets ``max_tokens=17``, ``create_requests`` 16; ``doc`` and
``sreq`` do too.
"""

from __future__ import annotations

import pytest

from kvsim.core.kv.base import PrefixHit
from kvsim.core.kv.paged import PagedAllocator
from kvsim.core.scheduler import V1Scheduler
from kvsim.workload.request import Request
from tests.scheduler.conftest import engine_args, step, tokens

B = 16  # block size of every scenario except test_basic_prefix_caching_disabled


def pool(num_blocks: int, *, block: int = B, caching: bool = True) -> PagedAllocator:
    """vLLM v1's pool of ``num_blocks`` blocks (the first is the null block)."""
    return PagedAllocator(
        capacity_tokens=num_blocks * block,
        block_size_tokens=block,
        enable_prefix_caching=caching,
        reserve_null_block=True,
    )


def doc(req_id: int, *segs: tuple[object, int], output: int = 17, salt: str | None = None):
    """A request whose prompt is the runs ``segs`` (``make_request``'s ``max_tokens=17``)."""
    prompt = sum(n for _, n in segs)
    return Request(req_id, 0.0, prompt, output, output, token_segments=segs, cache_salt=salt)


def admit(a: PagedAllocator, r: Request, num_tokens: int | None = None):
    """``get_computed_blocks`` then ``allocate_slots`` for ``num_tokens`` slots in all."""
    hit = a.find_cached_prefix(r)
    return hit, a.allocate(r, r.num_tokens if num_tokens is None else num_tokens, hit)


def keys(a: PagedAllocator, blocks) -> list:
    return [a.pool.key_of(b) for b in blocks]


def refs(a: PagedAllocator, blocks) -> list[int]:
    return [a.pool.ref_cnt[b] for b in blocks]


def stats(a: PagedAllocator) -> tuple:
    """(queries, hits, preempted queries, preempted hits), all in tokens."""
    s = a.prefix_cache_summary()
    return tuple(
        s[f"prefix_cache_{k}"] for k in ("queries", "hits", "preempted_queries", "preempted_hits")
    )


def v1(num_blocks: int = 10000, *, caching: bool = False, **kw) -> V1Scheduler:
    """``create_scheduler``'s defaults: 16 seqs, 8192 tokens, 10000 blocks of 16, caching off."""
    kw = {"max_num_seqs": 16, "max_num_batched_tokens": 8192, **kw}
    args = engine_args(enable_prefix_caching=caching, reserve_null_block=True, **kw)
    return V1Scheduler(pool(num_blocks, caching=caching), args)


def sreq(req_id: int, prompt: int, output: int = 16, tok: object = None) -> Request:
    """``create_requests``: prompt ``[i] * prompt`` (``tok`` picks another value)."""
    seg = (("tok", req_id if tok is None else tok), prompt)
    return Request(req_id, 0.0, prompt, output, output, token_segments=(seg,))


COMMON = (("common",), 48)  # vLLM's common_token_ids: 3 full blocks (values 0, 1, 2)


# -- tests/v1/core/test_prefix_caching.py (v0.20.0) ---------------------------------------------
def test_prefill():
    # test_prefix_caching.py::test_prefill
    a = pool(11)
    r0 = doc(0, COMMON, (("three",), 7))  # 55 tokens, no hit: cdiv(55, 16) = 4 blocks
    assert admit(a, r0)[0].num_tokens == 0
    assert a.block_tables[0] == [1, 2, 3, 4]
    assert keys(a, [1, 2, 3]) == a.key_chain.block_keys([COMMON], 3, B)  # chained keys
    assert a.pool.key_of(4) is None  # 7 tokens: partial, not cached
    assert refs(a, [1, 2, 3, 4]) == [1, 1, 1, 1]
    # req1 = common + 5 (53 tokens) hits blocks 1-3 while req0 still holds them; 1 new block
    assert admit(a, doc(1, COMMON, (("three",), 5)))[0] == PrefixHit(48, (1, 2, 3))
    assert a.block_tables[1] == [1, 2, 3, 5]
    assert refs(a, [1, 2, 3]) == [2, 2, 2]
    assert a.num_free_blocks == 5  # 10 - 5
    # free req0 tail first: 4 (no key) -> front (3, 2, 1 drop to ref 1); then req1: 5 (no
    # key) -> front, before 4; 3, 2, 1 (keyed) -> back
    a.free(0)
    a.free(1)
    assert a.free_block_ids() == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    # req2 = common + 6 hits the free blocks 1-3 (taken out of the queue), new block from the
    # front: 5, the partial block just freed (vLLM reserves 48 + 5 = 53 slots, we its 54: both
    # cdiv(., 16) = 4 blocks)
    assert admit(a, doc(2, COMMON, (("three",), 6)))[0].blocks == (1, 2, 3)
    assert a.block_tables[2] == [1, 2, 3, 5]
    assert a.num_free_blocks == len(a.free_block_ids()) == 6  # the 3 hits left the queue
    assert all(a.pool.ref_cnt[b] == 0 for b in a.free_block_ids())
    a.free(2)  # 5 -> front, 3 2 1 -> back: 5 | 4 6 7 8 9 10 | 3 2 1
    # req3: 160 fresh tokens, no hit, 10 blocks: the whole queue in eviction order
    assert admit(a, doc(3, (("ninety-nine",), 160)))[0].num_tokens == 0
    assert a.block_tables[3] == [5, 4, 6, 7, 8, 9, 10, 3, 2, 1]
    assert a.free_block_ids() == []
    # one lookup per request: queries 55 + 53 + 54 + 160 = 322 tokens, hits 48 + 48 = 96
    assert stats(a) == (322, 96, 0, 0)
    a.check_invariants()


def test_decode():
    # test_prefix_caching.py::test_decode (vLLM appends 23 outputs past max_tokens=17; so do we)
    a = pool(11)
    r0 = doc(0, COMMON, (("three",), 7), output=23)
    admit(a, r0)
    assert a.block_tables[0] == [1, 2, 3, 4]
    r0.num_output_tokens = 4  # 59 tokens still fit in 4 blocks: nothing new, last block partial
    assert (res := a.allocate(r0, 59)) is not None
    assert res.num_new_blocks == 0
    assert a.pool.key_of(a.block_tables[0][-1]) is None
    r0.num_output_tokens = 23  # 78 tokens -> 5 blocks: 1 new; block 4 (tokens 48-63) now full
    assert (res := a.allocate(r0, 78)) is not None
    assert res.num_new_blocks == 1
    assert a.pool.key_of(a.block_tables[0][-2]) is not None
    assert a.pool.key_of(a.block_tables[0][-1]) is None
    a.check_invariants()


def test_evict():
    # test_prefix_caching.py::test_evict
    a = pool(11)
    admit(a, doc(0, (("r0",), 87)))  # 5 full + 7 tokens: blocks 1-6
    admit(a, doc(1, (("r1",), 48)))  # 3 full blocks: 7-9
    assert a.block_tables == {0: [1, 2, 3, 4, 5, 6], 1: [7, 8, 9]}
    assert a.num_free_blocks == 1  # 10 - (6 + 3)
    a.free(0)  # 6 (partial, no key) -> front; 5 4 3 2 1 -> back: 6 | 10 | 5 4 3 2 1
    a.free(1)  # ... | 9 8 7
    assert a.free_block_ids() == [6, 10, 5, 4, 3, 2, 1, 9, 8, 7]
    # req2 = req0's first 35 tokens: hits 1, 2 (cap (35-1)//16 = 2); 1 new block from the front
    assert admit(a, doc(2, (("r0",), 35)))[0].blocks == (1, 2)
    assert a.block_tables[2] == [1, 2, 6]
    assert a.num_free_blocks == 7  # 10 - 2 hits - 1 new
    a.check_invariants()


def test_hash_block_correct_reuse():
    # test_prefix_caching.py::test_hash_block_correct_reuse: 2 blocks, only block 1 usable
    a = pool(2)
    admit(a, doc(0, (("r",), 16)))  # one full block, cached
    assert (a.block_tables[0], a.pool.key_of(1) is not None) == ([1], True)
    a.free(0)
    # a 15-token prefix can hit nothing ((15-1)//16 = 0 blocks); it reuses block 1, key dropped
    assert admit(a, doc(1, (("r",), 15)))[0].num_tokens == 0
    assert a.block_tables[1] == [1]
    assert a.pool.key_of(1) is None
    assert a.pool.num_evictions == 1
    a.check_invariants()


def test_computed_blocks_not_evicted():
    # test_prefix_caching.py::test_computed_blocks_not_evicted: 3 blocks, 2 usable
    a = pool(3)
    admit(a, doc(0, (("a",), 16)))  # tokens 0-15 -> block 1
    admit(a, doc(1, (("b",), 16)))  # tokens 16-31 -> block 2
    assert a.block_tables == {0: [1], 1: [2]}
    a.free(0)
    a.free(1)
    # tokens 0-31: hit block 1 (touched first, so out of the queue); the new block evicts 2
    assert admit(a, doc(2, (("a",), 16), (("b",), 16)))[0] == PrefixHit(16, (1,))
    assert a.block_tables[2] == [1, 2]
    a.check_invariants()


def test_basic_prefix_caching_disabled():
    # test_prefix_caching.py::test_basic_prefix_caching_disabled: block size 4, 4 usable blocks
    a = pool(5, block=4, caching=False)
    admit(a, doc(1, (("r",), 10)))  # cdiv(10, 4) = 3 blocks
    assert a.block_tables[1] == [1, 2, 3]
    a.free(1)  # no block has a key: all to the front, tail first: 3 2 1 | 4
    assert admit(a, doc(2, (("r",), 16)))[0].num_tokens == 0  # same prefix; no caching
    assert a.block_tables[2] == [3, 2, 1, 4]
    assert admit(a, doc(3, (("r",), 4)))[1] is None  # nothing free
    assert a.prefix_cache_summary() == {}
    a.check_invariants()


def test_cache_key_salting():
    # test_prefix_caching.py::test_cache_key_salting: the salt enters the first block's key
    a = pool(11)
    r0 = doc(0, COMMON, (("three",), 11), salt="salt1")  # 59 tokens -> 4 blocks
    admit(a, r0)
    assert a.block_tables[0] == [1, 2, 3, 4]
    assert keys(a, [1, 2, 3]) == a.key_chain.block_keys([COMMON], 3, B, "salt1")
    assert keys(a, [1, 2, 3]) != a.key_chain.block_keys([COMMON], 3, B)
    same = a.find_cached_prefix(doc(1, COMMON, (("four",), 11), salt="salt1"))
    assert same == PrefixHit(48, (1, 2, 3))
    other = a.find_cached_prefix(doc(2, COMMON, (("four",), 11), salt="salt2"))
    assert other.num_tokens == 0


def test_prefill_not_enough_free_blocks_with_computed_blocks():
    # test_prefix_caching.py::test_prefill_not_enough_free_blocks_with_computed_blocks
    a = pool(11)
    admit(a, doc(0, COMMON))  # 48 tokens -> blocks 1-3
    # req1 = common twice (96): hits 1-3 ((96-1)//16 = 5 looked up; block 3's parent differs)
    assert admit(a, doc(1, COMMON, COMMON))[0].blocks == (1, 2, 3)
    part1 = a.block_tables[1]
    assert part1 == [1, 2, 3, 4, 5, 6]
    a.free(1)  # 1-3 back to ref 1 (req0), 4-6 to ref 0 at the back: 7 8 9 10 6 5 4
    assert refs(a, part1) == [1, 1, 1, 0, 0, 0]
    admit(a, doc(2, (("seven",), 32)))  # 2 blocks from the front: 7, 8
    assert a.block_tables[2] == [7, 8]
    assert a.num_free_blocks == 5  # 9 10 6 5 4
    # req3 = common x3 (144): hits all 6 of req1's blocks (96 tokens); needs cdiv(144,16) = 9
    # - 6 = 3 new + 3 hits on free blocks = 6 > 5 free -> None, nothing touched
    r3 = doc(3, COMMON, COMMON, COMMON)
    hit = a.find_cached_prefix(r3)
    assert hit == PrefixHit(96, tuple(part1))
    assert a.allocate(r3, 144, hit) is None
    assert refs(a, part1) == [1, 1, 1, 0, 0, 0]
    assert a.free_block_ids() == [9, 10, 6, 5, 4]
    a.check_invariants()


# -- tests/v1/core/test_scheduler.py (v0.20.0) ---------------------------------------------------
@pytest.mark.parametrize("caching", [False, True])
def test_schedule(caching):
    # test_scheduler.py::test_schedule: 10 requests of 10 tokens all fit one step (8192 tokens,
    # 16 seqs) and move to running in arrival order; each takes 1 block, ids 1..10 in order
    sched = v1(caching=caching)
    reqs = [sreq(i, 10) for i in range(10)]
    for r in reqs:
        sched.add_request(r)
    plan, _ = step(sched)
    assert tokens(plan) == dict.fromkeys(range(10), 10)
    assert not sched.waiting
    assert list(sched.running) == reqs
    assert [sched.allocator.block_tables[i] for i in range(10)] == [[i + 1] for i in range(10)]
    if caching:  # 10 lookups of 10 tokens, no full block to hit
        assert stats(sched.allocator) == (100, 0, 0, 0)


@pytest.mark.parametrize("caching", [False, True])
def test_schedule_concurrent_partial_requests(caching):
    # test_scheduler.py::test_schedule_concurrent_partial_requests: budget 1024, chunks capped
    # at 400, three distinct 800-token prompts
    sched = v1(caching=caching, max_num_batched_tokens=1024, long_prefill_token_threshold=400)
    reqs = [sreq(i, 800) for i in range(3)]
    for r in reqs:
        sched.add_request(r)
    # step 1 (waiting loop): 400, 400, then min(400, 1024 - 800) = 224
    plan, _ = step(sched)
    assert tokens(plan) == {0: 400, 1: 400, 2: 224}
    assert [len(sched.allocator.block_tables[i]) for i in range(3)] == [25, 25, 14]
    # step 2 (running loop): 400 left each for 0, 1; request 2 has 576, capped to 400 then 224
    plan, _ = step(sched)
    assert tokens(plan) == {0: 400, 1: 400, 2: 224}
    assert [r.num_output_tokens for r in reqs] == [1, 1, 0]  # 0 and 1 finished their prompts
    # step 3: 0 and 1 decode, 2 gets its last 800 - 224 - 224 = 352
    plan, _ = step(sched)
    assert tokens(plan) == {0: 1, 1: 1, 2: 352}
    assert len(sched.running) == 3


@pytest.mark.parametrize(("chunked", "expected"), [(True, {1: 800, 2: 224}), (False, {1: 800})])
def test_schedule_order(chunked, expected):
    # test_scheduler.py::test_schedule_order: budget 1024, 3 seqs, prompts 800, 800, 10, 10.
    # Chunked: 800, then 224 of the second, budget spent -> 2 new requests. Unchunked: the second
    # 800 > 224 left stops the waiting loop (PR #28911, break): the 10-token ones do not jump it.
    sched = v1(max_num_batched_tokens=1024, max_num_seqs=3, enable_chunked_prefill=chunked)
    for i, n in ((1, 800), (2, 800), (3, 10), (4, 10)):
        sched.add_request(sreq(i, n))
    plan, _ = step(sched)
    assert tokens(plan) == expected


# test_schedule_concurrent_batches is left out: it needs a step whose output arrives after the
# next schedule() (pipeline parallelism); kvsim completes every step before planning the next.


def test_preempt_during_execution():
    # test_scheduler.py::test_preempt_during_execution, made synchronous: 11 blocks (10 usable),
    # caching off, two 80-token prompts. vLLM admits req1 (budget 100) while req0's step is in
    # flight; here a 160-token budget admits both in one step, which leaves the same pool state.
    sched = v1(11, max_num_batched_tokens=160)
    r0, r1 = sreq(0, 80), sreq(1, 80)
    sched.add_request(r0)
    sched.add_request(r1)
    step(sched)
    a = sched.allocator
    assert a.block_tables == {0: [1, 2, 3, 4, 5], 1: [6, 7, 8, 9, 10]}
    r2 = sreq(2, 16)
    sched.add_request(r2)
    # step 2: req0 decodes token 81 -> needs a 6th block, none free -> the last running request
    # (req1) is preempted: freed tail first (10 9 8 7 6 to the back) and req0 takes block 10
    plan, _ = step(sched)
    assert plan.num_preempted == 1
    assert tokens(plan) == {0: 1}
    assert list(sched.running) == [r0]
    assert list(sched.waiting) == [r1, r2]  # the victim goes in front of the waiting queue
    assert (r1.num_computed_tokens, r1.num_preemptions) == (0, 1)
    assert r1.num_output_tokens == 1  # the token it sampled stays (vLLM's late token 42)
    assert a.block_tables == {0: [1, 2, 3, 4, 5, 10]}
    assert a.free_block_ids() == [9, 8, 7, 6]
    assert plan.head_blocked == "preempted"  # no admission in a step that preempted


def test_preemption_step_admits_no_waiting_request():
    # Scheduler.schedule (v0.20.0): the waiting loop runs only `if not preempted_reqs`. Own
    # scenario (no vLLM test isolates it), FCFS, caching off: 11 blocks, budget 64, threshold 48;
    # A = 144-token prompt (1 output), B = 16-token prompt.
    sched = v1(11, max_num_batched_tokens=64, long_prefill_token_threshold=48)
    ra, rb = sreq(0, 144, output=1), sreq(1, 16, output=10)
    sched.add_request(ra)
    sched.add_request(rb)
    a = sched.allocator
    # step 1: A 48 (blocks 1-3), B min(16, 64 - 48) = 16 (block 4), B samples
    plan, _ = step(sched)
    assert tokens(plan) == {0: 48, 1: 16}
    # step 2: A 48 more (96 -> 6 blocks: 5-7), B decodes token 17 (block 8); free: 9, 10
    plan, _ = step(sched)
    assert tokens(plan) == {0: 48, 1: 1}
    assert a.block_tables == {0: [1, 2, 3, 5, 6, 7], 1: [4, 8]}
    # step 3: A's last 48 need 9 blocks, 3 more > 2 free -> B (last running) is preempted:
    # no caching, so its 8, 4 go to the front, tail first (8 4 9 10); A takes 8 4 9. 16
    # budget and block 10 are left, and B's first chunk (16 of its 18 tokens) would fit in 1
    # block, but the waiting loop is skipped
    plan = sched.schedule()
    assert plan.num_preempted == 1
    assert tokens(plan, sched) == {0: 48}
    assert a.block_tables[0] == [1, 2, 3, 5, 6, 7, 8, 4, 9]
    assert a.free_block_ids() == [10]
    assert (list(sched.waiting), rb.num_computed_tokens) == ([rb], 0)
    assert rb.num_tokens == 18  # 16 prompt + 2 outputs, all recomputed on resumption
    sched.complete(plan, 3.0, 3.0)  # A samples its only token; 9 4 8 7 6 5 3 2 1 to the front
    # step 4: B resumes with all 18 tokens: 2 blocks from the front (9, 4)
    plan, _ = step(sched)
    assert tokens(plan) == {1: 18}
    assert a.block_tables[1] == [9, 4]


def test_preemption_when_out_of_kv_fcfs_and_preempted_stats():
    # test_scheduler.py::test_priority_scheduling_preemption_and_resumption_when_out_of_kv's
    # block arithmetic under FCFS, caching on: 5 blocks (4 usable), budget 200, 2 seqs.
    # The FCFS victim is the last running request, here the one asking for the block itself.
    # Stats: a preempted request's re-admission counts apart (PR #25787, in v0.20.0).
    sched = v1(5, caching=True, max_num_seqs=2, max_num_batched_tokens=200)
    a = sched.allocator
    low, high = sreq(0, 30, output=3), sreq(1, 32, output=5)
    sched.add_request(low)
    step(sched)  # low: 30 tokens -> blocks 1, 2; samples -> 31 tokens
    sched.add_request(high)
    plan, _ = step(sched)  # low decodes (31 slots: 2 blocks); high: 32 tokens -> blocks 3, 4
    assert tokens(plan) == {0: 1, 1: 32}
    assert a.block_tables == {0: [1, 2], 1: [3, 4]}
    assert a.num_free_blocks == 0
    assert stats(a) == (62, 0, 0, 0)  # two first admissions, 30 + 32 tokens, no hit
    # step 3: low needs 32 slots (2 blocks, fits), high 33 (a 3rd block, none free): high is
    # the last running request, so it preempts itself (4, 3 to the back) and the loop stops
    plan = sched.schedule()
    assert plan.num_preempted == 1
    assert tokens(plan, sched) == {0: 1}
    assert list(sched.running) == [low]
    assert (list(sched.waiting), high.num_computed_tokens) == ([high], 0)
    assert a.free_block_ids() == [4, 3]
    sched.complete(plan, 3.0, 3.0)  # low samples its 3rd and last token: 2, 1 to the back
    assert a.free_block_ids() == [4, 3, 2, 1]
    # step 4: high resumes with 32 prompt + 1 output = 33 tokens; its cached blocks 3, 4 hit
    # ((33-1)//16 = 2 blocks, 32 tokens); 1 token left to compute; the new block is 2
    plan, _ = step(sched)
    assert tokens(plan) == {1: 1}
    assert a.block_tables[1] == [3, 4, 2]
    assert stats(a) == (62, 0, 33, 32)  # preempted pair: 33 looked up, 32 hit


def test_prefix_cache_stats_counted_once_for_retried_then_scheduled_request():
    # v0.33.0 test_scheduler.py::test_prefix_cache_stats_counted_once_for_retried_then_
    # scheduled_request (kvsim counts at admission, as v0.33.0; v0.20.0 counts every lookup).
    # vLLM forces one allocation failure with a spy; here the pool is really full. Caching on,
    # chunking off, 7 blocks (6 usable); prompts of token 0 ("zero").
    sched = v1(7, caching=True, enable_chunked_prefill=False)
    a = sched.allocator
    seed = sreq(100, 32, output=2, tok="zero")
    sched.add_request(seed)
    step(sched)  # seed: 32 tokens -> blocks 1, 2 (both full, cached)
    # seed decodes token 33 (block 3) and finishes, 33 tokens computed: block 3 holds one
    # (no key) -> front; 2, 1 (keyed) -> back
    step(sched)
    assert a.free_block_ids() == [3, 4, 5, 6, 2, 1]
    assert stats(a) == (32, 0, 0, 0)
    blocker = sreq(101, 64, output=1)
    retried = sreq(102, 48, output=1, tok="zero")
    sched.add_request(blocker)
    sched.add_request(retried)
    # step 3: blocker takes 4 blocks (3 4 5 6). retried hits 1, 2 (32 tokens) but needs 3 - 2
    # new + 2 free hits = 3 > 2 free: not admitted, and its lookup is not counted
    plan, _ = step(sched)
    assert tokens(plan) == {101: 64}
    assert list(sched.waiting) == [retried]
    assert stats(a) == (32 + 64, 0, 0, 0)
    # blocker finished (its one token), 4 full keyed blocks: 6 5 4 3 to the back. step 4:
    # retried admitted, 16 new tokens, new block 6 (2, 1 are its hits); counted once: 48
    # queried, 32 hit (v0.20.0: twice, 96 and 64)
    plan = sched.schedule()  # (it then samples its only token and finishes)
    assert tokens(plan, sched) == {102: 16}
    assert a.block_tables[102] == [1, 2, 6]
    assert stats(a) == (32 + 64 + 48, 32, 0, 0)


@pytest.mark.parametrize("gate", [True, False])
def test_full_sequence_gate_holds_a_head_whose_first_chunk_fits(gate):
    # SchedulerConfig.scheduler_reserve_full_isl (True in v0.20.0, vLLM PR #37307): a waiting
    # request is admitted only if KVCacheManager.can_fit_full_sequence, i.e. the blocks of its
    # num_tokens (less hits) are free. Own scenario, caching off: 11 blocks (10 usable), budget
    # 64; A = 96-token prompt + 40 outputs, B = 96-token prompt + 8 outputs.
    sched = v1(11, max_num_batched_tokens=64, scheduler_reserve_full_isl=gate)
    ra, rb = sreq(0, 96, output=40), sreq(1, 96, output=8)
    sched.add_request(ra)
    sched.add_request(rb)
    a = sched.allocator
    clock = [0.0]
    # step 1: A's first 64 tokens (its whole 96 need 6 blocks <= 10 free): blocks 1-4
    plan, _ = step(sched, clock)
    assert tokens(plan) == {0: 64}
    # step 2: A's last 32 (blocks 5, 6; 4 free), 32 of the budget left for B. Its first chunk of
    # 32 needs 2 blocks, its whole prompt 6 > 4: the gate holds it; without it B starts
    plan, _ = step(sched, clock)
    if not gate:
        assert tokens(plan) == {0: 32, 1: 32}
        assert a.block_tables == {0: [1, 2, 3, 4, 5, 6], 1: [7, 8]}
        # step 3: A decodes token 97 (block 9); B's next 63 tokens (95 in all) need 6 blocks,
        # 4 more, 1 free: B, the last running request, preempts itself
        plan, _ = step(sched, clock)
        assert plan.num_preempted == 1
        assert (rb.num_preemptions, rb.num_computed_tokens) == (1, 0)
        return
    assert tokens(plan) == {0: 32}
    assert list(sched.waiting) == [rb]
    assert a.num_free_blocks == 4
    # A samples 40 tokens, the first after step 2 and one per step after: it finishes in step
    # 41, holding cdiv(96 + 39, 16) = 9 blocks by then; B waits all along (6 blocks > free)
    while ra.finish_time_s is None:
        plan, _ = step(sched, clock)
        assert tokens(plan) == {0: 1}
    assert ra.finish_time_s == 41.0
    assert a.num_free_blocks == 10
    # step 42: B is admitted with its first 64 tokens, never preempted
    plan, _ = step(sched, clock)
    assert tokens(plan) == {1: 64}
    assert rb.first_scheduled_time_s == 41.0
    assert (ra.num_preemptions, rb.num_preemptions) == (0, 0)
