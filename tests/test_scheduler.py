"""Scheduler cases worked by hand: lazy growth, preemption of the newest, FCFS admission."""

from __future__ import annotations

import itertools

from kvsim.allocators import make_allocator
from kvsim.config import SchedulerConfig
from kvsim.request import Request
from kvsim.scheduler import Scheduler


def run_steps(sched: Scheduler, max_steps: int = 10_000):
    """Step the scheduler one step at a time (no fast-forward); yield (plan, finished)."""
    t = 0.0
    for _ in range(max_steps):
        if not sched.has_work():
            return
        plan = sched.schedule()
        t += 1.0
        yield plan, sched.complete(plan, t)


def test_40_prompt_plus_1000_generated_takes_3_then_62_blocks():
    alloc = make_allocator("paged", capacity_tokens=16 * 100, block_size_tokens=16)
    sched = Scheduler(alloc, SchedulerConfig())
    req = Request(0, 0.0, 40, 1000, 1000)
    sched.add_request(req)
    counts = []
    for _plan, finished in run_steps(sched):
        if finished:
            break
        counts.append(len(alloc.block_tables[req.req_id]))
    # after the prefill step the request holds 40 prompt + 1 sampled token = 41 -> 3 blocks
    assert counts[0] == 3
    # it ends with 40 + 1000 = 1040 token states = 65 blocks; 62 lazy allocations after admission
    grew = sum(1 for a, b in itertools.pairwise(counts) if b > a)
    assert counts[-1] == 65
    assert grew == 62
    assert req.num_output_tokens == 1000


def test_newest_is_preempted_and_recomputes_prompt_plus_generated():
    # 4 blocks x 2 tokens. A and B: prompt 3, output 5 (final 8 = all 4 blocks each).
    alloc = make_allocator("paged", capacity_tokens=8, block_size_tokens=2)
    sched = Scheduler(alloc, SchedulerConfig(max_model_len=8))
    a, b = Request(0, 0.0, 3, 5, 5), Request(1, 0.0, 3, 5, 5)
    sched.add_request(a)
    sched.add_request(b)
    steps = run_steps(sched)
    plan, _ = next(steps)  # step 0: both admitted, prompt 3 + sampled 1 = 4 tokens = 2 blocks each
    assert [r.req_id for r in plan.prefills] == [0, 1]
    assert alloc.num_free_blocks == 0
    plan, _ = next(steps)  # step 1: A needs a 3rd block, none free -> B (newest) preempted
    assert plan.num_preempted == 1
    assert [r.req_id for r in plan.decodes] == [0]
    assert list(sched.waiting) == [b]
    assert b.num_computed_tokens == 0
    assert b.num_output_tokens == 1
    assert sched.num_preemptions == 1
    plan, _ = next(steps)  # step 2: A 6 tokens in 3 blocks; B needs 3+1+1=5 tokens=3 blocks, 1 free
    assert not plan.prefills
    plan, _ = next(steps)  # step 3: A grows to 7 -> 4th block
    plan, finished = next(steps)  # step 4: A reaches 8 tokens, output 5 -> finishes
    assert finished == [a]
    plan, _ = next(steps)  # step 5: B re-prefills prompt + 1 generated = 4 tokens
    assert plan.prefills == [b]
    assert plan.prefill_tokens == [4]
    assert b.num_computed_tokens == 5
    assert b.num_output_tokens == 2


def test_fcfs_head_blocks_later_requests_that_would_fit():
    # first-fit, 16 slots, oracle: A (slab 12) runs; head B needs 8 > 4 free; C (slab 2) waits too
    alloc = make_allocator("first_fit", capacity_tokens=16, reservation="oracle", max_model_len=16)
    sched = Scheduler(alloc, SchedulerConfig(max_model_len=16))
    for r in (Request(0, 0.0, 6, 6, 6), Request(1, 0.0, 4, 4, 4), Request(2, 0.0, 1, 1, 1)):
        sched.add_request(r)
    plan = sched.schedule()
    assert [r.req_id for r in plan.prefills] == [0]
    assert [r.req_id for r in sched.waiting] == [1, 2]


def test_max_num_seqs_caps_the_batch():
    alloc = make_allocator("paged", capacity_tokens=1024, block_size_tokens=16)
    sched = Scheduler(alloc, SchedulerConfig(max_num_seqs=2))
    for i in range(3):
        sched.add_request(Request(i, 0.0, 10, 5, 5))
    plan = sched.schedule()
    assert len(plan.prefills) == 2
    assert len(sched.waiting) == 1


def test_token_budget_caps_prefills():
    alloc = make_allocator("paged", capacity_tokens=8192, block_size_tokens=16)
    sched = Scheduler(alloc, SchedulerConfig(max_num_batched_tokens=2048, max_model_len=2048))
    for i in range(3):
        sched.add_request(Request(i, 0.0, 1000, 5, 5))
    plan = sched.schedule()
    assert plan.prefill_tokens == [1000, 1000]  # a third 1000 would exceed 2048
