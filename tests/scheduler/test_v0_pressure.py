"""vLLM v0's decode pass when the pool runs out, with the running requests in the decode cohort.

The pass (``V0Scheduler._decode_in_order``) checks every running request in turn and releases
from the cohort only the requests it preempts; a pooled member preempted at its own turn, in a
step whose token would have taken it a new block, must leave with the blocks it took, not the
one it was about to take (``LazyDecodes.release_unstepped``).
"""

from __future__ import annotations

import pytest

from kvsim.core.kv.paged import PagedAllocator
from kvsim.core.scheduler import V0Scheduler
from tests.scheduler.conftest import engine_args, req, step, tokens


@pytest.mark.parametrize("pooled", [True, False])
def test_v0_preempts_a_member_at_its_own_turn_before_it_takes_its_block(pooled: bool) -> None:
    # vLLM v0 (vllm/core/scheduler.py _schedule_running, can_append_slot) by hand: 5 blocks of
    # 4 tokens; A and B have 6-token prompts and 20 output tokens.
    # Step 1 (prefill): 2 blocks each, 1 free; each samples a token.
    # Steps 2-3 decode both: 7, then 8 tokens computed, still 2 blocks each, 1 free.
    # Step 4: A's check passes (1 free >= 1), its 9th token takes a 3rd block: 0 free. B's check
    # fails (0 free): the last running request, B itself, is preempted by recompute, before its
    # own 9th token took a block. It frees its 2 blocks: 5 - 3 = 2 free; B computed 0 tokens and
    # has sampled 3 (steps 1-3).
    # Step 5: prefills first: B's 6 + 3 = 9 tokens need cdiv(9, 4) = 3 blocks > 2 free, so it
    # waits; A decodes its 10th token within its 3rd block.
    alloc = PagedAllocator(capacity_tokens=5 * 4, block_size_tokens=4)
    sched = V0Scheduler(alloc, engine_args("vllm-v0"), None, pooled)
    a, b = req(0, 6, 20), req(1, 6, 20)
    sched.add_request(a)
    sched.add_request(b)
    plan, _ = step(sched)
    assert tokens(plan) == {0: 6, 1: 6}
    for _ in range(2):
        plan, _ = step(sched)
        assert tokens(plan) == {0: 1, 1: 1}
    assert alloc.num_free_blocks == 1
    plan, _ = step(sched)  # step 4
    assert plan.num_preempted == 1
    assert tokens(plan) == {0: 1}
    assert alloc.num_free_blocks == 2
    assert (b.num_computed_tokens, b.num_output_tokens, b.num_preemptions) == (0, 3, 1)
    assert a.num_computed_tokens == 9
    alloc.check_invariants()  # no block leaked, none counted twice
    plan, _ = step(sched)  # step 5
    assert tokens(plan) == {0: 1}
    assert alloc.num_free_blocks == 2
    sched.lazy.flush(sched.running)  # every block attached to its table
    assert len(alloc.block_table(0)) == 3
    alloc.check_invariants()
