"""Swap preemption (vllm-v0) worked by hand: GPU and CPU free blocks move by the right amounts.

Pool: 11 paged blocks of 4 tokens, no watermark; CPU swap pool: 8 blocks of 4 tokens.
A and B both have 14-token prompts; A generates 8 tokens, B 100.
"""

from __future__ import annotations

import pytest

from kvsim.config import config_from_dict
from kvsim.core.kv.paged import PagedAllocator
from kvsim.core.kv.swap import SwapSpace
from kvsim.core.scheduler import V0Scheduler
from kvsim.engine import simulate
from kvsim.workload.request import Request
from tests.scheduler.conftest import engine_args, req, step, tokens


def setup(cpu_blocks: int) -> tuple[V0Scheduler, PagedAllocator, SwapSpace, Request, Request]:
    alloc = PagedAllocator(capacity_tokens=44, block_size_tokens=4)
    swap = SwapSpace(num_cpu_blocks=cpu_blocks, block_size_tokens=4, bytes_per_token=10)
    sched = V0Scheduler(alloc, engine_args("vllm-v0", preemption_mode="swap"), swap)
    a, b = req(0, 14, 8), req(1, 14, 100)
    sched.add_request(a)
    sched.add_request(b)
    return sched, alloc, swap, a, b


def test_swap_out_and_in_by_hand() -> None:
    sched, alloc, swap, a, b = setup(cpu_blocks=8)
    # step 1, prefill only: 14 tokens each in cdiv(14, 4) = 4 blocks -> 11 - 8 = 3 free
    step(sched)
    assert alloc.num_free_blocks == 3
    # steps 2-7 decode tokens 15..20 (computed 13 + k after step k); token 17 opens a 5th
    # block each at step 4 -> 1 free
    for _ in range(6):
        step(sched)
    assert (a.num_computed_tokens, b.num_computed_tokens, alloc.num_free_blocks) == (20, 20, 1)
    # step 8: token 21 needs a 6th block. A: 1 free >= 1 (v0's can_append_slot) -> takes it;
    # B: 0 free -> B, the last running request, is swapped out: cdiv(20, 4) = 5 GPU blocks
    # freed, 5 CPU blocks taken (8 - 5 = 3 free); B keeps its 20 token states. A has now
    # sampled its 8th token (one per step): it finishes and frees its 6 blocks -> 5 + 6 = 11.
    plan, finished = step(sched)
    assert plan.num_preempted == 1
    assert plan.swap_blocks == 5
    assert tokens(plan) == {0: 1}
    assert finished == [a]
    assert (alloc.num_free_blocks, swap.num_free_cpu_blocks) == (11, 3)
    assert b.num_computed_tokens == 20
    # a newcomer C (3-token prompt, 1 block) fits, but nobody is admitted while B is swapped out
    c = req(2, 3, 5)
    sched.add_request(c)
    # step 9: B comes back (blocks 5 + 1 per sequence <= 11 free): 5 blocks, then its decode of
    # token 21 takes a 6th -> 5 free; its CPU blocks are freed -> 8
    plan, _ = step(sched)
    assert plan.swap_blocks == 5
    assert tokens(plan) == {1: 1}
    assert (alloc.num_free_blocks, swap.num_free_cpu_blocks) == (5, 8)
    assert b.num_computed_tokens == 21
    # step 10: nothing swapped, so prefills come first: C alone (1 block -> 4 free)
    plan, _ = step(sched)
    assert tokens(plan) == {2: 3}
    assert alloc.num_free_blocks == 4
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
    sched, _, swap, _, b = setup(cpu_blocks=4)  # < the 5 blocks B would need
    for _ in range(8):
        plan, _ = step(sched)
    assert plan.num_preempted == 1
    assert plan.swap_blocks == 0
    assert swap.num_fallbacks == 1
    assert not swap.has_swapped()
    assert b.num_computed_tokens == 0
    assert sched.waiting[0] is b
    assert swap.num_free_cpu_blocks == 4


def test_a_swapped_group_comes_back_with_its_sharing() -> None:
    # 3 samples of a 10-token prompt after their first decode: blocks 0, 1 shared, 3 partial
    # blocks of their own (copy-on-write) = 5 distinct blocks; swap-out moves 5, not 3 x 3 = 9
    alloc = PagedAllocator(capacity_tokens=44, block_size_tokens=4)
    group = Request(0, 0.0, 10, 4, 4, n=3)
    alloc.allocate(group, 10)
    alloc.allocate(group, 11)
    swapped = alloc.swap_out(0)
    assert swapped.num_blocks == 5
    assert alloc.num_free_blocks == 11
    assert alloc.can_swap_in(group, swapped)  # 5 blocks + 1 per sequence <= 11
    alloc.swap_in(group, swapped)
    tables = [alloc.block_table(0, s) for s in range(3)]
    assert tables[0][:2] == tables[1][:2] == tables[2][:2]  # the prompt blocks shared again
    assert len({t[2] for t in tables}) == 3
    assert alloc.num_free_blocks == 6
    alloc.check_invariants()


def test_swap_space_from_gib() -> None:
    # 1 GiB / (16 tokens * 819200 bytes) = 1073741824 / 13107200 = 81.92 -> 81 blocks
    swap = SwapSpace.from_gib(1.0, block_size_tokens=16, bytes_per_token=819200)
    assert swap.num_cpu_blocks == 81


def test_engine_reports_swap_bytes_and_time() -> None:
    config = config_from_dict(
        {
            "cache": {"kv_cache_gib": 2.0, "allocator": "paged", "block_size_tokens": 16},
            "scheduler": {
                "engine": "vllm-v0",
                "preemption_mode": "swap",
                "swap_space_gib": 4.0,
            },
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


def test_swap_under_v1_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="'swap' is a vLLM v0 feature"):
        config_from_dict({"scheduler": {"preemption_mode": "swap"}})


def test_a_group_that_can_never_swap_back_in_is_named() -> None:
    """Two-sequence groups on a pool of 64 MiB / (128 KiB x 16) = 32 blocks (Llama-3.1-8B), no
    watermark block (int(0.01 x 32) = 0): a group swapped out holding B blocks comes back only
    when B + 2 blocks are free (vLLM v0's can_swap_in), so one that grew to 31 never can. The
    error names that swapped request and its arithmetic, not the waiting head (whose 128-slot
    prompt the empty pool would hold)."""
    import re

    cfg = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "cache": {"kv_cache_bytes": 64 * 2**20},
            "scheduler": {"engine": "vllm-v0", "max_model_len": 256},
            "workload": {"preset": "sharegpt_like", "num_requests": 200, "rate_per_s": 50, "n": 2},
        }
    )
    with pytest.raises(ValueError, match="can never swap back in") as caught:
        simulate(cfg)
    found = re.search(
        r"holding (\d+) blocks .* \+ 1 per sequence \((\d+)\) \+ the watermark's (\d+) free, "
        r"and the empty pool has (\d+)",
        str(caught.value),
    )
    assert found is not None, str(caught.value)
    blocks, seqs, watermark, pool = map(int, found.groups())
    assert (seqs, watermark, pool) == (2, 0, 32)
    assert blocks + seqs + watermark > pool
