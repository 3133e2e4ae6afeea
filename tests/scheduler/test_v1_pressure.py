"""vLLM v1's running pass when the pool runs out, with the running requests in the decode cohort.

When a step may preempt, every running request takes its turn (``V1Scheduler._run_in_order``):
a member's token takes a block at its crossing, and a member behind it in running order may be
preempted for it before its own turn, leaving with the blocks it took (``release_unstepped``).
"""

from __future__ import annotations

import pytest

from kvsim.core.kv.paged import PagedAllocator
from kvsim.core.scheduler import V1Scheduler
from tests.scheduler.conftest import engine_args, req, step, tokens


@pytest.mark.parametrize("pooled", [True, False])
def test_v1_preempts_a_member_behind_for_a_member_crossing_a_block(pooled: bool) -> None:
    # vLLM v1 (vllm/v1/core/sched/scheduler.py Scheduler.schedule, FCFS: allocate_slots fails ->
    # preempt self.running.pop()) by hand: 4 blocks of 4 tokens, no prefix caching. A has an
    # 8-token prompt, B a 6-token one, 20 output tokens each.
    # Step 1 (both prefill): A 2 blocks, B 2 blocks, 0 free; each samples a token.
    # Step 2: A's 9th token needs a 3rd block, none free: the last running request, B, is
    # preempted before its turn (recompute: computed 0, its 1 sampled token kept) and frees 2
    # blocks; A takes one: 1 free. B is gone, so the pass ends; nothing is admitted in a step
    # that preempted.
    # Step 3: A's 10th token fits its 3rd block. B waits: its 6 + 1 = 7 known tokens need
    # cdiv(7, 4) = 2 blocks > 1 free (scheduler_reserve_full_isl).
    # Step 4: A's 11th and 12th tokens (steps 4-5) fit; step 6, its 13th, takes the last block.
    alloc = PagedAllocator(capacity_tokens=4 * 4, block_size_tokens=4)
    sched = V1Scheduler(alloc, engine_args("vllm-v1"), pooled)
    a, b = req(0, 8, 20), req(1, 6, 20)
    sched.add_request(a)
    sched.add_request(b)
    plan, _ = step(sched)
    assert tokens(plan) == {0: 8, 1: 6}
    assert alloc.num_free_blocks == 0
    plan, _ = step(sched)  # step 2
    assert plan.num_preempted == 1
    assert tokens(plan) == {0: 1}
    assert alloc.num_free_blocks == 1
    assert (b.num_computed_tokens, b.num_output_tokens, b.num_preemptions) == (0, 1, 1)
    assert (a.num_computed_tokens, a.num_output_tokens) == (9, 2)
    alloc.check_invariants()  # no block leaked, none counted twice
    for _ in range(3):  # steps 3-5: A alone, within its 3rd block
        plan, _ = step(sched)
        assert tokens(plan) == {0: 1}
        assert plan.num_preempted == 0
        assert alloc.num_free_blocks == 1
    plan, _ = step(sched)  # step 6: A's 13th token takes the last block
    assert tokens(plan) == {0: 1}
    assert alloc.num_free_blocks == 0
    sched.lazy.flush(sched.running)  # every block attached to its table
    assert len(alloc.block_table(0)) == 4
    alloc.check_invariants()
