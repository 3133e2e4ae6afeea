"""The vllm-v1 scheduler, cases worked by hand from vLLM v1's rules (``kvsim.core.scheduler.v1``).

Every expected number below is derived in the comments from the rules, not read off a run.
"""

from __future__ import annotations

import itertools

import pytest

from kvsim.core.kv.paged import PagedAllocator
from kvsim.core.scheduler import V0Scheduler, V1Scheduler, make_scheduler
from tests.scheduler.conftest import engine_args, req, step, tokens


def paged(num_blocks: int, block: int) -> PagedAllocator:
    return PagedAllocator(capacity_tokens=num_blocks * block, block_size_tokens=block)


def test_seed_40_prompt_plus_1000_generated_takes_3_then_62_blocks():
    alloc = paged(100, 16)
    sched = V1Scheduler(alloc, engine_args())
    r = req(0, 40, 1000)
    sched.add_request(r)
    counts = []
    for _ in range(2000):
        _, finished = step(sched)
        if finished:
            break
        counts.append(len(alloc.block_tables[r.req_id]))
    # the prefill step holds the 40 prompt tokens: cdiv(40, 16) = 3 blocks
    assert counts[0] == 3
    # it ends having written 40 + 1000 - 1 = 1039 KV tokens: cdiv(1039, 16) = 65 blocks (the
    # seed's 65 = 3 at admission + 62 lazy); the last step freed them, so counts stops at 64
    grew = sum(1 for a, b in itertools.pairwise(counts) if b > a)
    assert counts[-1] == 65
    assert grew == 62
    assert r.num_output_tokens == 1000


@pytest.mark.parametrize("engine", ["vllm-v1", "vllm-v0"])
def test_paper_fig6_blocks_after_prefill_and_two_decodes(engine):
    # Kwon et al. Fig. 6: a 7-token prompt in 4-token blocks holds 2 blocks after the prefill
    # (7 tokens), 2 after decode 1 (8 tokens), 3 after decode 2 (9 tokens)
    alloc = paged(10, 4)
    sched = make_scheduler(alloc, engine_args(engine))
    r = req(0, 7, 5)
    sched.add_request(r)
    held = []
    for _ in range(3):
        step(sched)
        held.append(len(alloc.block_tables[0]))
    assert held == [2, 2, 3]


def test_80_token_prompt_holds_5_blocks_after_its_prefill():
    alloc = paged(20, 16)
    sched = V1Scheduler(alloc, engine_args())
    sched.add_request(req(0, 80, 4))
    step(sched)
    assert len(alloc.block_tables[0]) == 5  # cdiv(80, 16); the sampled token has no slot yet


def test_chunked_prefill_splits_a_long_prompt_over_the_budget():
    # max_num_batched_tokens 2048 < max_model_len 8192 (vLLM v1's default mode): a 5000-token
    # prompt runs 2048 + 2048 + 904 tokens; its first token is sampled at the end of step 3
    sched = V1Scheduler(paged(400, 16), engine_args(max_num_batched_tokens=2048))
    r = req(0, 5000, 3)
    sched.add_request(r)
    t = [0.0]
    assert [tokens(step(sched, t)[0])[0] for _ in range(3)] == [2048, 2048, 904]
    assert r.first_token_time_s == 3.0
    assert r.num_output_tokens == 1
    plan, _ = step(sched, t)
    assert tokens(plan) == {0: 1}  # then it decodes


def test_running_first_then_waiting_share_one_budget():
    # budget 100: A decodes (1 token) before B's waiting prompt gets the remaining 99
    sched = V1Scheduler(paged(100, 16), engine_args(max_num_batched_tokens=100))
    a, b = req(0, 10, 5), req(1, 300, 5)
    sched.add_request(a)
    step(sched)  # A prefills 10 tokens
    sched.add_request(b)
    plan, _ = step(sched)
    assert tokens(plan) == {0: 1, 1: 99}
    plan, _ = step(sched)
    assert tokens(plan) == {0: 1, 1: 99}  # B is now a running partial prefill: after A, in order
    assert plan.num_prefills == 1


def test_preemption_of_the_last_running_request_and_no_admission_that_step():
    # 8 blocks of 4. A and B: 6-token prompts, 20 outputs (each writes 25 KV tokens: 7 blocks).
    # After step k (k >= 1) each has computed 5 + k tokens in cdiv(5 + k, 4) blocks. Step 12
    # needs a 5th block for A's token 17 while the 8 blocks are held 4 + 4: B, the last running
    # request, is preempted (its 4 blocks freed, computed tokens reset) and A takes one.
    alloc = paged(8, 4)
    sched = V1Scheduler(alloc, engine_args())
    a, b = req(0, 6, 20), req(1, 6, 20)
    sched.add_request(a)
    sched.add_request(b)
    for _ in range(11):
        plan, _ = step(sched)
        assert plan.num_preempted == 0
    assert alloc.num_free_blocks == 0
    plan, _ = step(sched)  # step 12
    assert plan.num_preempted == 1
    assert tokens(plan) == {0: 1}
    assert list(sched.waiting) == [b]
    assert (b.num_computed_tokens, b.num_output_tokens, b.num_preemptions) == (0, 11, 1)
    assert alloc.num_free_blocks == 3
    # step 13: B would re-prefill 6 + 11 = 17 tokens in cdiv(17, 4) = 5 blocks > 3 free
    plan, _ = step(sched)
    assert plan.head_blocked == "kv"
    assert tokens(plan) == {0: 1}
    # A samples one token per step and finishes at step 20 with 5 + 20 = 25 computed tokens
    for _ in range(7):
        plan, finished = step(sched)
    assert finished == [a]
    assert a.num_computed_tokens == 25
    plan, _ = step(sched)  # step 21: B re-prefills its 17 tokens and samples its 12th
    assert tokens(plan) == {1: 17}
    assert b.num_output_tokens == 12
    assert b.first_token_time_s == 1.0  # its first token came at the end of step 1


def test_the_request_itself_is_the_victim_when_it_is_the_last():
    # 3 blocks of 4: A (prompt 11, 3 blocks) runs alone and needs a 4th block at token 13:
    # nobody else to preempt, so A itself goes back to the waiting queue
    alloc = paged(3, 4)
    sched = V1Scheduler(alloc, engine_args())
    a = req(0, 11, 5)
    sched.add_request(a)
    step(sched)  # prefill 11 tokens (3 blocks), samples 1
    step(sched)  # decode: token 12 fits block 3
    plan, _ = step(sched)  # token 13 needs a 4th block
    assert plan.num_preempted == 1
    assert plan.is_empty
    assert list(sched.waiting) == [a]
    assert alloc.num_free_blocks == 3


def test_fcfs_head_blocks_later_requests_that_would_fit():
    # 4 blocks of 4: A holds 2; head B needs 3 blocks > 2 free; C (1 block) waits behind it
    alloc = paged(4, 4)
    sched = V1Scheduler(alloc, engine_args())
    sched.add_request(req(0, 8, 10))
    step(sched)
    b, c = req(1, 12, 1), req(2, 2, 1)
    sched.add_request(b)
    sched.add_request(c)
    plan, _ = step(sched)
    assert plan.head_blocked == "kv"
    assert tokens(plan) == {0: 1}
    assert list(sched.waiting) == [b, c]


@pytest.mark.parametrize(("chunked", "scheduled"), [(True, 2), (False, 1)])
def test_schedule_order_with_and_without_chunked_prefill(chunked, scheduled):
    # vLLM tests/v1/core/test_scheduler.py::test_schedule_order: budget 1024, max_num_seqs 3,
    # prompts 800, 800, 10, 10. Chunked: 800 + 224 (budget spent). Unchunked: the second 800
    # exceeds the 224 left and stops the waiting loop (vLLM PR #28911): only one.
    args = engine_args(max_num_batched_tokens=1024, max_num_seqs=3, enable_chunked_prefill=chunked)
    sched = V1Scheduler(paged(1000, 16), args)
    for i, p in enumerate([800, 800, 10, 10]):
        sched.add_request(req(i, p, 4))
    plan, _ = step(sched)
    assert len(plan.scheduled) == scheduled
    assert list(tokens(plan).values()) == ([800, 224] if chunked else [800])


def test_max_num_seqs_caps_the_running_requests():
    sched = V1Scheduler(paged(100, 16), engine_args(max_num_seqs=2))
    for i in range(3):
        sched.add_request(req(i, 10, 5))
    plan, _ = step(sched)
    assert len(plan.scheduled) == 2
    assert plan.head_blocked == "max_num_seqs"


def test_v0_admits_prefills_before_running_requests_grow():
    # vLLM v0 _schedule_default on the preemption case above: step 1 is a prefill step for A and
    # B; steps 2-8 decode both (5 + k tokens after step k). After step 8 the 8 blocks are held
    # 4 + 4. Step 9: v0's can_append_slot wants 1 free block for A although its token 14 fits
    # its 4th block: none is free, so B (last) is preempted. Step 10: prefills come first, and
    # B's 6 + 8 = 14 tokens need cdiv(14, 4) = 4 blocks <= 4 free: admitted in a prefill-only
    # step (A does not decode). Step 11: the pool is full again and B is preempted again.
    alloc = paged(8, 4)
    sched = V0Scheduler(alloc, engine_args("vllm-v0"), None)
    a, b = req(0, 6, 20), req(1, 6, 20)
    sched.add_request(a)
    sched.add_request(b)
    plan, _ = step(sched)
    assert tokens(plan) == {0: 6, 1: 6}
    for _ in range(7):
        plan, _ = step(sched)
        assert tokens(plan) == {0: 1, 1: 1}
    assert alloc.num_free_blocks == 0
    plan, _ = step(sched)  # step 9
    assert plan.num_preempted == 1
    assert tokens(plan) == {0: 1}
    assert (b.num_computed_tokens, b.num_output_tokens) == (0, 8)
    plan, _ = step(sched)  # step 10: prefill only
    assert tokens(plan) == {1: 14}
    assert a.num_computed_tokens == 14
    plan, _ = step(sched)  # step 11
    assert plan.num_preempted == 1
    assert tokens(plan) == {0: 1}
    assert b.num_preemptions == 2


def test_long_prefill_threshold_caps_only_when_another_request_runs_or_waits():
    # vLLM 0.34.0 vllm/v1/core/sched/scheduler.py, Scheduler.schedule: the step's threshold is
    # long_prefill_token_threshold only if chunked prefill is on and running + waiting > 1 as
    # the step starts ("when it is the only request there is nobody to starve"); else 0.
    # Budget 64, threshold 16, 16-token blocks, 100 blocks; A = 100-token prompt, B = 8 tokens.
    sched = V1Scheduler(
        paged(100, 16), engine_args(max_num_batched_tokens=64, long_prefill_token_threshold=16)
    )
    a, b = req(0, 100, 5), req(1, 8, 5)
    sched.add_request(a)
    # step 1: A alone (1 waiting, 0 running): no cap, min(100, 64) = 64 tokens
    plan, _ = step(sched)
    assert tokens(plan) == {0: 64}
    sched.add_request(b)
    # step 2: A runs, B waits (2 requests): A's 36 left capped at 16; B min(8, 16) = 8
    plan, _ = step(sched)
    assert tokens(plan) == {0: 16, 1: 8}
    # step 3: A's 20 left capped at 16, B decodes 1
    plan, _ = step(sched)
    assert tokens(plan) == {0: 16, 1: 1}


def test_long_prefill_threshold_is_ignored_without_chunked_prefill():
    # vLLM 0.34.0 Scheduler.schedule: the step's threshold is 0 with chunked prefill off, so
    # the unchunked budget check sees whole prompts. Budget 1024, threshold 400, prompts 600
    # and 800: 600 fits (424 left), then 800 > 424 stops the waiting loop.
    sched = V1Scheduler(
        paged(200, 16),
        engine_args(
            max_num_batched_tokens=1024,
            enable_chunked_prefill=False,
            long_prefill_token_threshold=400,
        ),
    )
    sched.add_request(req(0, 600, 2))
    sched.add_request(req(1, 800, 2))
    plan, _ = step(sched)
    assert tokens(plan) == {0: 600}


def test_a_waiting_request_that_holds_blocks_runs_before_a_head_that_cannot_fit():
    # vLLM 0.34.0 drains kv_holding_waiting before waiting (``_enqueue_waiting_request``): a
    # request whose prompt KV arrived from a prefill replica holds its blocks and waits ahead
    # of an earlier request that holds none. Pool: 10 blocks of 16. H's 40 received tokens hold
    # cdiv(40, 16) = 3 blocks, leaving 7 (112 slots); P, queued first, needs all 150 of its
    # tokens (cdiv(150, 16) = 10 blocks) and cannot be admitted. H computed 39 of its 40 prompt
    # tokens (the last is recomputed, as on a decode replica): it runs its 1 token, still in
    # its 3rd block (40 <= 48), and samples its first token; P waits.
    alloc = paged(10, 16)
    sched = V1Scheduler(alloc, engine_args())
    p, h = req(0, 150, 3), req(1, 40, 3)
    assert alloc.allocate(h, 40) is not None
    h.num_computed_tokens, h.num_held_slots = 39, alloc.held_slots(1)
    sched.add_request(p)
    sched.add_holder(h)  # (the engine queues a request that holds blocks so)
    assert [r.req_id for r in sched.waiting] == [1, 0]
    plan, _ = step(sched)
    assert tokens(plan) == {1: 1}
    assert h.num_output_tokens == 1
    assert [r.req_id for r in sched.waiting] == [0]
    assert len(alloc.block_tables[1]) == 3


def test_a_preempted_request_waits_behind_the_block_holders_before_the_rest():
    # vLLM 0.34.0 ``_preempt_request`` prepends the victim to ``waiting``, which the scheduler
    # scans after ``kv_holding_waiting``: holders H1, H2 (in the order they were queued), then
    # the victim V, then the plain waiting W.
    sched = V1Scheduler(paged(40, 16), engine_args())
    w, h1, h2, v = req(0, 20, 2), req(1, 20, 2), req(2, 20, 2), req(3, 20, 5)
    sched.add_request(v)
    step(sched)  # V runs its prompt
    sched.add_request(w)
    sched.add_holder(h1)
    sched.add_holder(h2)
    sched._preempt_recompute(v)
    assert [r.req_id for r in sched.waiting] == [1, 2, 3, 0]
    assert sched.pop_waiting() is h1
    sched.unhold({h2})  # (its blocks freed: it now waits first among those holding none)
    assert [r.req_id for r in sched.waiting] == [2, 3, 0]
    sched.add_holder(h1)
    assert [r.req_id for r in sched.waiting] == [1, 2, 3, 0]


def test_the_watermark_keeps_blocks_free_from_waiting_requests_while_one_runs():
    """vLLM 0.34.0's --watermark (``KVCacheManager.watermark_blocks = int(watermark *
    num_blocks)``, added in ``allocate_slots`` to the need of a WAITING or PREEMPTED request
    when ``has_scheduled_reqs``; the full-sequence gate counts its known tokens,
    ``request.num_tokens``). 10 blocks of 4 tokens, watermark 0.2 -> int(0.2 x 10) = 2 blocks.
    - step 1: A (8 prompt tokens) alone: no watermark (nothing runs); 2 blocks.
    - step 2: A decodes its 9th token: a 3rd block, 7 free. B (16 tokens, 4 blocks) arrives
      while A runs: 4 + 2 <= 7, admitted, 3 free. C (8 tokens, 2 blocks): 2 + 2 = 4 > 3,
      blocked by the watermark alone (2 <= 3 without it)."""
    alloc = paged(10, 4)
    sched = V1Scheduler(alloc, engine_args(watermark=0.2))
    sched.add_request(req(0, 8, 10))
    step(sched)
    assert alloc.held_slots(0) == 2 * 4
    b, c = req(1, 16, 4), req(2, 8, 1)
    sched.add_request(b)
    sched.add_request(c)
    plan, _ = step(sched)
    assert tokens(plan) == {0: 1, 1: 16}
    assert alloc.num_free_tokens == 3 * 4
    assert plan.head_blocked == "kv"
    assert list(sched.waiting) == [c]
    # the same pool without the watermark admits C (2 blocks <= 3 free)
    alloc = paged(10, 4)
    sched = V1Scheduler(alloc, engine_args())
    sched.add_request(req(0, 8, 10))
    step(sched)
    sched.add_request(req(1, 16, 4))
    sched.add_request(req(2, 8, 1))
    plan, _ = step(sched)
    assert tokens(plan) == {0: 1, 1: 16, 2: 8}
