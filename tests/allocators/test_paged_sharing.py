"""Hand-worked cases of sharing on the paged pool: fork, copy-on-write, free-queue and eviction
order, failed allocations, salts, the last-token rule, beam paths and the seed's arithmetic.

Pool: 11 blocks x 4 tokens unless said otherwise; blocks are taken from the front of the free
queue, which starts as 0, 1, ..., 10 (no null block: these pools are built directly).
"""

from __future__ import annotations

import numpy as np
import pytest

from kvsim.core.kv import make_allocator
from kvsim.core.kv.block_pool import BlockPool
from kvsim.core.kv.groups import SequenceGroup
from kvsim.core.kv.paged import PagedAllocator
from kvsim.workload.beams import BeamModel
from kvsim.workload.request import Request


def alloc(blocks: int = 11, block: int = 4, **kw: object) -> PagedAllocator:
    return PagedAllocator(
        capacity_tokens=blocks * block,
        block_size_tokens=block,
        enable_prefix_caching=True,
        **kw,  # type: ignore[arg-type]
    )


def doc(req_id: int, prompt: int, output: int = 4, *, segs=None, salt=None, **kw) -> Request:
    return Request(req_id, 0.0, prompt, output, output, token_segments=segs, cache_salt=salt, **kw)


def admit(a: PagedAllocator, req: Request, num_tokens: int):
    """Admit ``req`` for ``num_tokens`` tokens through its prefix hit (the scheduler's call)."""
    return a.allocate(req, num_tokens, a.find_cached_prefix(req))


def test_fork_copies_only_the_partial_last_block_at_the_first_decode():
    a = alloc()
    req = doc(1, 10, n=3)  # 10 tokens = blocks 0, 1 full + block 2 holding 2 tokens
    a.allocate(req, 10)  # the prefill step: one root, forked x3, nothing copied yet
    assert [a.block_table(1, s) for s in range(3)] == [[0, 1, 2]] * 3
    assert a.held_slots(1) == 10  # the next write copies: the scheduler must call allocate
    a.allocate(req, 11)  # the first decode writes position 10 in every sample
    # seq 0 and seq 1 find block 2 shared (ref 3, then 2) and copy it to blocks 3 and 4;
    # seq 2 then sees ref 1 and writes in place
    assert [a.block_table(1, s) for s in range(3)] == [[0, 1, 3], [0, 1, 4], [0, 1, 2]]
    assert a.pool.ref_counts()[:5] == [3, 3, 1, 1, 1]
    assert a.num_cow_copies == 2
    assert a.prefix_cache_summary()["cow_copy_bytes"] == 2 * 4  # 2 blocks x 4 slots x 1 byte
    assert a.held_slots(1) == 12  # now a plain holding: 3 blocks of 4 per sample
    a.check_invariants()


def test_unshared_groups_hold_every_block_once_per_sequence():
    a = alloc(share_sequence_groups=False)
    req = doc(1, 10, n=3)
    a.allocate(req, 11)
    assert a.groups[1].num_distinct_blocks == 9  # 3 samples x 3 blocks, no copy-on-write
    assert a.num_cow_copies == 0
    a.check_invariants()


def test_full_shared_last_block_is_never_copied():
    a = alloc()
    req = doc(1, 8, n=2)  # two full blocks: the first new token opens a fresh block per sample
    a.allocate(req, 8)
    a.allocate(req, 9)
    assert [a.block_table(1, s) for s in range(2)] == [[0, 1, 2], [0, 1, 3]]
    assert a.num_cow_copies == 0
    a.check_invariants()


def test_seed_four_samples_of_a_1100_token_prompt():
    # seed 001: 4 samples of 1,100 tokens cost 4 x 1,100 = 4,400 prompt tokens in slabs;
    # with 16-token blocks 68 full blocks are shared and the 12-token partial block is held
    # 4 times after the first decode: 68 + 4 = 72 blocks, 68 x 16 + 4 x 12 = 1,136 prompt states.
    req = doc(1, 1100, output=10, n=4)
    a = alloc(blocks=200, block=16)
    a.allocate(req, 1100)
    a.allocate(req, 1101)
    assert a.groups[1].num_distinct_blocks == 72
    assert a.stats().held_slots == 72 * 16
    # 1,101 tokens per sample, each will end with 1,100 + 10 - 1 = 1,109 KV tokens
    req.num_held_slots = a.held_slots(1)
    held, token_states, internal, unshared = a.request_slots(req, 1101)
    assert token_states - 4 == 68 * 16 + 4 * 12  # minus 1 generated per sample
    assert held == 72 * 16  # 68 shared full blocks + 4 partial blocks, one per sample
    assert unshared == 4 * 69 * 16  # without sharing: every sample its own 69 blocks
    assert internal == 0  # 1,109 final tokens reach into each sample's 70th block, not yet held
    slab = make_allocator("first_fit", capacity_tokens=8000, reservation="oracle")
    slab.allocate(req, 1101)
    assert slab.stats().held_slots == 4 * 1109  # every sample its own slab of its KV


def test_free_queue_order_tail_first_and_eviction_from_the_front():
    a = alloc()
    segs = ((("doc", 1), 12),)
    first = doc(1, 12, segs=segs)
    admit(a, first, 12)  # prefill: blocks 0, 1, 2, all full, cached inside the call
    a.allocate(first, 13)  # first decode: block 3 for token 12
    a.free(1)  # released tail first to the back: 3, 2, 1, 0
    assert a.pool.free_order() == [4, 5, 6, 7, 8, 9, 10, 3, 2, 1, 0]
    other = doc(2, 29)  # 29 tokens -> 8 blocks: 4..10 and 3 (uncached), nothing evicted
    admit(a, other, 29)
    assert a.block_table(2) == [4, 5, 6, 7, 8, 9, 10, 3]
    assert a.pool.num_evictions == 0
    third = doc(3, 5)  # 2 blocks from the front: 2 then 1, whose keys are dropped
    admit(a, third, 5)
    assert a.block_table(3) == [2, 1]
    assert a.pool.num_evictions == 2
    a.free(2)  # tail first behind cached block 0: 3, 10, 9, ..., 4
    assert a.pool.free_order() == [0, 3, 10, 9, 8, 7, 6, 5, 4]
    again = doc(4, 12, segs=segs)  # block 0 still cached; the chain breaks at block 1
    hit = a.find_cached_prefix(again)
    assert (hit.num_tokens, hit.blocks) == (4, (0,))
    result = a.allocate(again, 12, hit)
    assert result is not None
    assert result.num_reused_tokens == 4
    assert a.block_table(4) == [0, 3, 10]
    a.check_invariants()


def test_failed_allocation_changes_nothing():
    a = alloc()
    segs = ((("doc", 1), 12),)
    first = doc(1, 12, segs=segs)
    admit(a, first, 12)
    a.allocate(first, 13)
    a.free(1)  # queue: 4..10, then 3, 2, 1, 0 (0-2 cached)
    admit(a, doc(2, 28), 28)  # 7 blocks: 4..10; left: 3, 2, 1, 0
    before = (
        a.pool.ref_counts(),
        a.pool.free_order(),
        a.pool.cached_map(),
        a.prefix_cache_queries,
        a.prefix_cache_hits,
    )
    # 12 prompt + 9 of output computed: hits blocks 0, 1, 2 (all free: each counts against the
    # 4 free blocks) and needs cdiv(21, 4) - 3 = 3 fresh: 6 > 4 free
    big = doc(3, 21, output=10, segs=(*segs, (("more", 3), 9)))
    hit = a.find_cached_prefix(big)
    assert hit.num_tokens == 12
    assert not a.can_allocate(big, 21, hit)
    assert a.allocate(big, 21, hit) is None
    after = (
        a.pool.ref_counts(),
        a.pool.free_order(),
        a.pool.cached_map(),
        a.prefix_cache_queries,
        a.prefix_cache_hits,
    )
    assert after == before
    a.check_invariants()


def test_salted_prefixes_never_share():
    a = alloc()
    segs = ((("sys", 0), 9),)
    first = doc(1, 9, segs=segs, salt="tenant-a")
    admit(a, first, 9)
    a.free(1)
    other_tenant = doc(2, 9, segs=segs, salt="tenant-b")
    assert admit(a, other_tenant, 9).num_reused_tokens == 0
    same_tenant = doc(3, 9, segs=segs, salt="tenant-a")
    assert admit(a, same_tenant, 9).num_reused_tokens == 8  # blocks 0 and 1


def test_last_prompt_token_is_always_recomputed():
    a = alloc()
    segs = ((("sys", 0), 8),)
    first = doc(1, 8, segs=segs)  # exactly two full blocks
    admit(a, first, 8)
    a.free(1)
    second = doc(2, 8, segs=segs)
    # both blocks are cached, but at most (8 - 1) // 4 = 1 block may hit
    assert admit(a, second, 8).num_reused_tokens == 4
    summary = a.prefix_cache_summary()
    assert (summary["prefix_cache_queries"], summary["prefix_cache_hits"]) == (16, 4)
    assert summary["prefix_cache_hit_rate"] == 0.25


def test_identical_request_admitted_later_in_the_same_step_hits():
    # blocks are cached inside the allocation call, before the step computes them (vLLM
    # allocate_slots): the second of two identical 9-token prompts hits (9 - 1) // 4 = 2 blocks
    a = alloc()
    segs = ((("doc", 7), 9),)
    one, two = doc(1, 9, segs=segs), doc(2, 9, segs=segs)
    assert admit(a, one, 9).num_reused_tokens == 0
    assert admit(a, two, 9).num_reused_tokens == 8
    assert a.block_table(1)[:2] == a.block_table(2)[:2] == [0, 1]
    assert a.pool.ref_counts()[:2] == [2, 2]
    a.check_invariants()


def test_a_preempted_request_re_hitting_its_own_blocks_is_not_a_hit():
    a = alloc()
    req = doc(1, 12)  # a private prompt: nobody else can share it
    admit(a, req, 12)
    a.allocate(req, 13)
    a.free(1, 13)  # preempted after computing 13 tokens: 3 full blocks stay findable
    req.num_preemptions = 1
    req.num_output_tokens = 2  # it had sampled two tokens; it re-prefills 14 tokens
    result = admit(a, req, 14)
    assert result.num_reused_tokens == 12  # its KV is reused: those tokens are not computed
    summary = a.prefix_cache_summary()
    assert summary["prefix_cache_queries"] == 12  # its first admission
    assert summary["prefix_cache_hits"] == 0  # re-hitting its own blocks does not count
    assert summary["prefix_cache_preempted_queries"] == 14
    assert summary["prefix_cache_preempted_hits"] == 12


def test_dropped_beam_releases_its_path():
    pool = BlockPool(8)
    group = SequenceGroup(4, 2)
    group.start([pool.take_one()], 4, pool)  # prompt of 4 tokens: block 0, shared by both
    group.parents = np.array([[0, 0]])  # after step 0 candidate 1 drops; 0 is forked into its slot
    group.advance(5, pool)  # step 0 writes position 4: a fresh block each -> 1, 2
    assert group.seqs == [[0, 1], [0, 2]]
    group.advance(6, pool)
    # branch: slot 1 becomes a fork of [0, 1]; the old [0, 2] is released and block 2 goes to
    # the back of the free queue. Writing position 5: seq 0 finds block 1 shared and partly
    # full, copies it into block 3 (the front); seq 1 then sees ref 1 and writes in place.
    assert group.seqs == [[0, 3], [0, 1]]
    assert pool.ref_counts()[:4] == [2, 1, 0, 1]
    assert pool.free_order()[-1] == 2
    assert group.num_copies == 1


def _naive_beam_parents(
    model: BeamModel, req_id: int, width: int, steps: int, prompt: int
) -> np.ndarray:
    """The documented rule, one step at a time: the same two draws per step (branch, order),
    a candidate branching with probability min(0.5, branch_tokens / n) when the sequences hold
    n = prompt + j + 1 tokens at row j; the non-branchers in ascending order of their draw are
    displaced by the branchers in ascending index order, as many as both sides have."""
    rng = np.random.default_rng((model.seed, req_id))
    draws = rng.random((steps, width))
    order = rng.random((steps, width))
    out = []
    for j in range(steps):
        prob = min(0.5, model.branch_tokens / (prompt + j + 1))
        row = list(range(width))
        branchers = [i for i in range(width) if draws[j, i] < prob]
        stayers = sorted(
            (i for i in range(width) if not draws[j, i] < prob), key=lambda i: order[j, i]
        )
        for victim, source in zip(stayers, branchers, strict=False):  # as many as both sides have
            row[victim] = source
        out.append(row)
    return np.array(out, dtype=np.int64).reshape(steps, width)


def test_beam_model_extremes_and_seeding():
    assert (BeamModel(branch_tokens=0.0).parents(7, 4, 5, 10) == np.arange(4)).all()
    a = BeamModel(5.0, seed=3).parents(7, 4, 20, 3)
    assert (a == BeamModel(5.0, seed=3).parents(7, 4, 20, 3)).all()
    for c in (2.0, 7.19, 40.0):
        for width in (1, 2, 3, 6):
            model = BeamModel(c, seed=11)
            for req_id in range(20):
                got = model.parents(req_id, width, 40, 10 + req_id)
                assert (got == _naive_beam_parents(model, req_id, width, 40, 10 + req_id)).all()
                # a displaced slot holds a candidate that kept its own slot, each at most once
                for row in got:
                    moved = row != np.arange(width)
                    assert (row[row[moved]] == row[moved]).all()
                    assert len(set(row[moved])) == moved.sum()
    for bad in (-1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="branch_tokens"):
            BeamModel(branch_tokens=bad)


def test_beam_model_branch_rate_falls_with_the_context():
    # width 2: a row moves iff exactly one of the two candidates branches, 2 p (1 - p).
    # Capped: p = 0.5 while 1e6 / n >= 0.5, so 0.5 of 20,000 rows move (standard error 0.0035)
    rows = BeamModel(1e6, seed=1).parents(0, 2, 20_000, 100)
    assert abs((rows != np.arange(2)).any(axis=1).mean() - 0.5) < 0.014
    # p = 30 / n with n = 100 + j + 1: rows move 2 p (1 - p) of the time, summed by hand over
    # j; the count is a sum of independent Bernoullis (variance sum 2p(1-p)(1-2p(1-p)))
    rows = BeamModel(30.0, seed=2).parents(0, 2, 20_000, 100)
    moved = int((rows != np.arange(2)).any(axis=1).sum())
    expected = variance = 0.0
    for j in range(20_000):
        p = 30.0 / (100 + j + 1)
        q = 2 * p * (1 - p)
        expected += q
        variance += q * (1 - q)
    assert abs(moved - expected) < 4 * variance**0.5
    # early rows (n near 100) move far more often than late ones (n near 20,000)
    assert (rows[:500] != np.arange(2)).any(axis=1).mean() > 5 * (
        (rows[-5000:] != np.arange(2)).any(axis=1).mean()
    )


def test_group_readmitted_past_its_prompt_needs_every_sample_block():
    # n = 3, prompt 10, back after a recompute with 4 tokens generated (14 tokens): the root
    # takes blocks for positions 0-9 (3 blocks, the third holding 8, 9); positions 10, 11
    # land in that shared partial block, so samples 0 and 1 copy it (2 blocks); positions 12,
    # 13 open a fourth block in every sample (3 blocks): 3 + 2 + 3 = 8 blocks, not the
    # cdiv(14, 4) = 4 of a prompt counted once
    req = doc(1, 10, n=3)
    short = alloc(blocks=7)
    assert not short.can_admit(req, 14)
    assert short.allocate(req, 14) is None
    enough = alloc(blocks=8)
    assert enough.can_admit(req, 14)
    assert enough.allocate(req, 14) is not None
    assert enough.num_free_blocks == 0
    enough.check_invariants()
