"""The ``vllm-v0`` profile: the PagedAttention paper's engine, whole-prompt steps, swap.

Follows vLLM v0.6.6's default scheduler (``vllm/core/scheduler.py``, ``_schedule_default``), whose
rules are those of the paper's release (v0.1.7 ``Scheduler._schedule``), with the block checks of
that release's ``BlockSpaceManager`` (v0.6.6 had only the second block manager, which counts the
blocks a step touches: docs/engine.md). Each step is either a prefill step or a decode step,
never both:

1. **Prefills first**, unless something is swapped out: waiting requests are admitted FCFS while
   the head's whole prompt (prompt + outputs after a recompute) leaves the watermark free
   (``BlockSpaceManager.can_allocate``: free - required >= 0.01 of the blocks, prefix hits
   ignored), fits the step's ``max_num_batched_tokens`` (cached tokens not charged, at least one)
   and keeps the running sequences <= ``max_num_seqs``; the first head that does not stops
   admission. If anyone was admitted the step runs only these prefills.
2. **Otherwise every running request decodes one token**, oldest first. Before each, v0's
   ``can_append_slot`` wants one free block per sequence of the request, whether or not it needs
   one; while there is none the last running request is preempted (the request itself when it is
   the last): recomputed when it is one sequence, swapped out when it is a group (or always, with
   ``preemption_mode = "swap"``). Recompute victims go to the front of the waiting queue.
3. **If nobody was preempted**, swapped requests come back (``kvsim.core.kv.swap``) and decode too.

With ``scheduler.batching = "request"`` (the paper's FasterTransformer baseline, §6.1: a
Triton-like batcher in front of an engine without iteration-level scheduling) admission is open
only while a batch forms: from the step the running list is empty until the first decode step.
The batch then runs until its last request finishes, newcomers waiting meanwhile
(``head_blocked = "batch"``). FasterTransformer also keeps computing finished rows of a batch
until the whole batch ends; kvsim does not charge that padding, so its baseline is an upper
bound on FasterTransformer's rate.
"""

from __future__ import annotations

from kvsim.config import EngineArgs
from kvsim.core.kv.base import NO_HIT, Allocator
from kvsim.core.kv.paged import PagedAllocator
from kvsim.core.kv.swap import SwapSpace
from kvsim.core.scheduler.core import SchedulerCore
from kvsim.core.scheduler.plan import StepPlan
from kvsim.workload.request import Request


class V0Scheduler(SchedulerCore):
    """vLLM v0's default scheduler (see the module docstring).

    Args:
        allocator: the KV allocation policy.
        args: the run's resolved engine arguments.
        swap: the CPU swap pool (paged allocators), or ``None``.
        pooled: steady decoders may take anonymous blocks in bulk (``SchedulerCore``).
    """

    def __init__(
        self,
        allocator: Allocator,
        args: EngineArgs,
        swap: SwapSpace | None,
        pooled: bool = False,
    ) -> None:
        super().__init__(allocator, args, pooled)
        self.swap = swap
        self._batch_forming = True  # request-level batching: admission open

    @classmethod
    def with_swap_space(
        cls, allocator: Allocator, args: EngineArgs, pooled: bool = False
    ) -> V0Scheduler:
        """The scheduler with vLLM v0's CPU swap pool of ``args.swap_space_gib`` GiB in blocks
        of the pool's size (``SwapSpace.from_gib``) when the pool is paged; none otherwise."""
        scheduler = cls(allocator, args, None, pooled)
        if allocator.paged:
            scheduler.swap = SwapSpace.from_gib(
                args.swap_space_gib,
                block_size_tokens=allocator.block_size_tokens,
                bytes_per_token=allocator.bytes_per_token,
            )
        return scheduler

    def has_work(self) -> bool:
        return bool(self.running or self.waiting or (self.swap and self.swap.has_swapped()))

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        self._add_cohort_step(plan, self.lazy.cohort.clock, 0)  # a prefill step
        swapped = self.swap is not None and self.swap.has_swapped()
        if swapped:
            if self.waiting:
                plan.head_blocked = "swapped"
        elif self._admission_open():
            self._schedule_prefills(plan)
        elif self.waiting:
            plan.head_blocked = "batch"
        if not plan.scheduled:
            self._schedule_decodes(plan)
            if not plan.num_preempted and self.swap is not None:
                self._swap_in(plan)
        if self.swap is not None:
            plan.swap_blocks = self.swap.take_step_blocks()
        plan.all_running_scheduled = len(plan.scheduled) + plan.num_cohort == len(self.running)
        plan.extendable = (
            not plan.num_preempted
            and not plan.swap_blocks
            and not (self.swap is not None and self.swap.has_swapped())
            and plan.head_blocked in (None, "kv", "max_num_seqs", "batch")
        )
        self._finish_plan(plan)
        return plan

    def complete(self, plan: StepPlan, now_s: float, step0_end_s: float) -> list[Request]:
        # a decode step closes a request-level batch: a decode plan, or a prefill plan whose
        # span went on to decode (the engine fast-forwards past step 0 without planning)
        if plan.num_prefills == 0 or plan.num_steps > 1:
            self._batch_forming = False
        return super().complete(plan, now_s, step0_end_s)

    def _admission_open(self) -> bool:
        """Iteration-level batching admits at every step; request-level batching only while a
        batch forms (``scheduler.batching``)."""
        if self.args.batching == "iteration":
            return True
        if not self.running:
            self._batch_forming = True
        return self._batch_forming

    def _schedule_prefills(self, plan: StepPlan) -> None:
        allocator, waiting = self.allocator, self.waiting
        seqs = self.num_running_seqs()
        used = 0
        while waiting:
            head = waiting[0]
            num_tokens = head.num_tokens
            if not allocator.can_admit(head, num_tokens):
                plan.head_blocked = "kv"
                return
            hit = NO_HIT
            if head.num_computed_tokens == 0 and allocator.caches_prefixes:
                hit = allocator.find_cached_prefix(head)
            charged = max(1, num_tokens - hit.num_tokens)
            if used + charged > self.token_budget:
                plan.head_blocked = "budget"
                return
            if seqs + head.num_seqs > self.max_num_seqs:
                plan.head_blocked = "max_num_seqs"
                return
            placed = self._allocate(head, num_tokens, hit)
            assert placed, f"can_admit said yes, allocate refused request {head.req_id}"
            self.pop_waiting()
            self._run(head)
            if not head.readmitted:
                head.num_cached_tokens = hit.num_tokens
            head.num_computed_tokens = hit.num_tokens
            plan.add(head, num_tokens - hit.num_tokens)
            used += charged
            seqs += head.num_seqs

    def _schedule_decodes(self, plan: StepPlan) -> None:
        """Every running request decodes one token, oldest first; before each, v0's
        ``can_append_slot`` check, preempting the last running request while it fails. When
        ``_cohort_decodes`` proves that every check passes, the members decode in bulk
        (``_decode_in_bulk``); otherwise every running request is checked in turn
        (``_decode_in_order``)."""
        lazy = self.lazy
        clock = lazy.cohort.clock
        if lazy.cohort.members and self._cohort_decodes():
            self._decode_in_bulk(plan, clock)
        else:
            if lazy.cohort.members and not lazy.takes_turns():
                lazy.flush(self.running)  # a member's growth may fail: everyone one by one
            self._decode_in_order(plan, clock)
        self._add_cohort_step(plan, clock, 1)

    def _decode_in_bulk(self, plan: StepPlan, clock: int) -> None:
        """The members' blocks and the explicit requests' decodes, none of which preempts."""
        lazy = self.lazy
        for req, member in lazy.step_order(clock):
            if member is not None:
                lazy.step_member(member, clock)
                continue
            placed = self._allocate(req, req.num_computed_tokens + 1)
            assert placed, f"req {req.req_id}: _cohort_decodes let a decode that fails"
            plan.add(req, 1)

    def _decode_in_order(self, plan: StepPlan, clock: int) -> None:
        """vLLM v0's decode pass (``_schedule_running``): each running request in turn, its
        ``can_append_slot`` check (and its allocation) failing preempts the last running
        request, until it passes or the request itself was the last. Members stay in the
        cohort unless preempted (a paged pool: their step fits once the check passes)."""
        lazy = self.lazy
        can_append = self.allocator.can_append_v0
        for req, member in lazy.in_order(self.running, clock):
            if req not in lazy.seq:  # preempted in this pass (victims leave from the tail)
                break
            while not (
                can_append(req)
                and (member is not None or self._allocate(req, req.num_computed_tokens + 1))
            ):
                if self._preempt_last(plan, clock) is req:
                    return
            if member is None:
                plan.add(req, 1)
            elif lazy.steps_at(member, clock):
                lazy.step_member(member, clock)

    def _cohort_decodes(self) -> bool:
        """Whether this decode step can run with the cohort's members in bulk: every
        allocation fits and every ``can_append_v0`` check passes if the pool keeps one block per
        sequence of the widest running request after all of them, so nobody is preempted."""
        allocator, lazy = self.allocator, self.lazy
        cohort = lazy.cohort
        need = lazy.touched_slots_needed(cohort.clock)
        widest = cohort.widest()
        for req in lazy.others:
            num_tokens = req.num_computed_tokens + 1
            if not allocator.can_allocate(req, num_tokens):
                return False
            need += allocator.num_slots_needed(req, num_tokens)
            widest = max(widest, req.num_seqs)
        free = allocator.num_free_tokens
        if need > free:
            return False  # some decode does not fit: the one-by-one pass preempts
        return not allocator.paged or free - need >= widest * allocator.block_size_tokens

    def _preempt(self, req: Request) -> None:
        # vLLM v0's rule; without a CPU pool (slab allocators) a group restarts from its prompt
        mode = self.args.preemption_mode or ("recompute" if req.num_seqs == 1 else "swap")
        if mode == "swap" and self.swap is not None:
            assert isinstance(self.allocator, PagedAllocator)
            if self.swap.swap_out(req, self.allocator):
                req.num_held_slots = 0
                self._count_preemption(req)
                return
        self._preempt_recompute(req)  # also the fallback when the CPU pool is full

    def _swap_in(self, plan: StepPlan) -> None:
        """Swapped requests come back one at a time, each decoding before the next is tried."""
        assert self.swap is not None
        assert isinstance(self.allocator, PagedAllocator)
        room = self.max_num_seqs - self.num_running_seqs()
        while (req := self.swap.swap_in_next(self.allocator, room)) is not None:
            req.num_held_slots = self.allocator.held_slots(req.req_id)
            self._run(req)
            placed = self._allocate(req, req.num_computed_tokens + 1)
            assert placed, f"can_swap_in said yes, the decode of request {req.req_id} did not fit"
            plan.add(req, 1)
            room -= req.num_seqs

    def growth_reserve_slots(self, plan: StepPlan) -> int:
        """v0's decode check wants one free block per sequence at every step of a span."""
        if not self.allocator.paged:
            return 0
        return self.lazy.cohort.widest() * self.allocator.block_size_tokens
