"""Swap preemption worked by hand: GPU and CPU free blocks move by the right amounts.

Pool: 11 paged blocks of 4 tokens, no watermark; CPU swap pool: 8 blocks of 4 tokens.
A and B both have 14-token prompts; A generates 8 tokens, B 100.
"""

from __future__ import annotations

import pytest

from kvsim.allocators.paged import PagedAllocator
from kvsim.config import SchedulerConfig, config_from_dict
from kvsim.engine import simulate
from kvsim.request import Request
from kvsim.scheduler import Scheduler, StepPlan
from kvsim.swap import SwapSpace


def req(req_id: int, prompt: int, output: int) -> Request:
    return Request(
        req_id=req_id,
        arrival_time_s=0.0,
        prompt_tokens=prompt,
        output_tokens=output,
        max_tokens=output,
    )


@pytest.fixture
def setup() -> tuple[Scheduler, PagedAllocator, SwapSpace, Request, Request]:
    alloc = PagedAllocator(capacity_tokens=44, block_size_tokens=4)
    swap = SwapSpace(num_cpu_blocks=8, block_size_tokens=4, bytes_per_token=10)
    sched = Scheduler(alloc, SchedulerConfig(max_model_len=200), swap)
    a, b = req(0, 14, 8), req(1, 14, 100)
    sched.add_request(a)
    sched.add_request(b)
    return sched, alloc, swap, a, b


def step(sched: Scheduler, now: float = 0.0) -> StepPlan:
    plan = sched.schedule()
    sched.complete(plan, now)
    return plan


def test_swap_out_and_in_by_hand(
    setup: tuple[Scheduler, PagedAllocator, SwapSpace, Request, Request],
) -> None:
    sched, alloc, swap, a, b = setup
    # step 1: both prefill 14 tokens + 1 sampled = 15 slots = 4 blocks each -> 11 - 8 = 3 free
    step(sched)
    assert alloc.num_free_blocks == 3
    # step 2: 16 tokens still fit 4 blocks; step 3: 17 tokens -> a 5th block each -> 1 free;
    # steps 4-6 grow to 20 tokens inside the 5th block
    for _ in range(5):
        step(sched)
    assert (a.num_computed_tokens, b.num_computed_tokens, alloc.num_free_blocks) == (20, 20, 1)
    # step 7: A takes the last block (6 blocks); B needs a 6th block, none is free -> B, the most
    # recently admitted, is swapped out: its 5 GPU blocks are freed (0 + 5 = 5 free) and
    # cdiv(20, 4) = 5 CPU blocks are taken (8 - 5 = 3 free). B keeps its 20 token states.
    plan = step(sched)
    assert plan.num_preempted == 1
    assert plan.swap_blocks == 5
    assert plan.decodes == [a]
    assert (alloc.num_free_blocks, swap.num_free_cpu_blocks) == (5, 3)
    assert list(swap.swapped) == [b]
    assert b.num_computed_tokens == 20
    # a newcomer C (3-token prompt, 1 block) would fit in the 5 free blocks, but nobody is
    # admitted while B is swapped out
    c = req(2, 3, 5)
    sched.add_request(c)
    # step 8: A decodes its 8th token and finishes (22 tokens); B needs cdiv(21, 4) = 6 blocks,
    # only 5 are free, so it stays on the CPU; C waits.
    plan = step(sched)
    assert plan.swap_blocks == 0
    assert plan.prefills == []
    assert a.finish_time_s is not None
    assert alloc.num_free_blocks == 11  # A's 6 blocks came back
    # step 9: B is swapped in first (6 GPU blocks for 21 tokens -> 5 free; its 5 CPU blocks are
    # freed -> 8 free), then C is admitted (1 block -> 4 free).
    plan = step(sched)
    assert plan.swap_blocks == 5
    assert plan.decodes == [b]
    assert plan.prefills == [c]
    assert (alloc.num_free_blocks, swap.num_free_cpu_blocks) == (4, 8)
    assert b.num_computed_tokens == 21
    assert b.num_preemptions == 1
    swap.check_invariants()
    alloc.check_invariants()
    s = swap.summary(0.0)
    # 5 blocks each way * 4 tokens * 10 bytes per token = 200 bytes
    assert (s["swap_out_bytes"], s["swap_in_bytes"], s["num_swap_outs"], s["num_swap_ins"]) == (
        200,
        200,
        1,
        1,
    )


def test_full_cpu_pool_falls_back_to_recompute() -> None:
    alloc = PagedAllocator(capacity_tokens=44, block_size_tokens=4)
    swap = SwapSpace(num_cpu_blocks=4, block_size_tokens=4, bytes_per_token=10)  # < 5 needed
    sched = Scheduler(alloc, SchedulerConfig(max_model_len=200), swap)
    a, b = req(0, 14, 8), req(1, 14, 100)
    sched.add_request(a)
    sched.add_request(b)
    for _ in range(7):
        plan = step(sched)
    assert plan.num_preempted == 1
    assert plan.swap_blocks == 0
    assert swap.num_fallbacks == 1
    assert not swap.has_swapped()
    assert b.num_computed_tokens == 0
    assert sched.waiting[0] is b
    assert swap.num_free_cpu_blocks == 4


def test_swap_space_from_gib() -> None:
    # 1 GiB / (16 tokens * 819200 bytes) = 1073741824 / 13107200 = 81.92 -> 81 blocks
    swap = SwapSpace.from_gib(1.0, block_size_tokens=16, bytes_per_token=819200)
    assert swap.num_cpu_blocks == 81


def test_engine_reports_swap_bytes_and_time() -> None:
    config = config_from_dict(
        {
            "cache": {"kv_cache_gib": 2.0, "allocator": "paged", "block_size_tokens": 16},
            "scheduler": {"preemption_mode": "swap", "swap_space_gib": 4.0},
            "workload": {
                "rate_per_s": 50.0,
                "num_requests": 60,
                "lengths": "fixed",
                "fixed_prompt_tokens": 200,
                "fixed_output_tokens": 600,
            },
            "debug_invariants": True,
        }
    )
    s = simulate(config).summary
    assert s["num_preemptions"] > 0
    assert s["num_swap_outs"] > 0
    assert s["swap_out_bytes"] == s["swap_in_bytes"] > 0  # everything came back
    # every block crosses PCIe once each way: bytes / 25.6e9 B/s + 80 copies/block * 5 us
    blocks = 2 * s["swap_out_bytes"] // (16 * 819200)
    want = 2 * s["swap_out_bytes"] / 25.6e9 + blocks * 2 * 40 * 5e-6
    assert s["swap_time_s"] == pytest.approx(want)
