"""The ``vllm-v1`` profile: today's vLLM scheduler, one token budget per step, chunked prefill.

Follows ``vllm/v1/core/sched/scheduler.py`` (``Scheduler.schedule``, vLLM 0.34.0, FCFS policy) and
its tests (``tests/v1/core/test_scheduler.py``); ``make test-vllm`` (``tests/vllm/``) diffs it step
by step against vLLM 0.34.0's own ``Scheduler`` on 1,000 random workloads. Scheduling is
synchronous, as in vLLM's CPU build and its tests: a step's sampled tokens are known before the
next step is planned. GPU vLLM defaults to async scheduling (``AsyncScheduler``: step ``n + 1``
is planned while step ``n`` runs, with output placeholders), which kvsim does not model. Each
step:

1. **Running requests first**, in the order they were admitted: each gets
   ``num_tokens - num_computed_tokens`` new tokens (1 for a decode, the rest of its prompt for a
   partial prefill), capped by ``long_prefill_token_threshold`` (when > 0, with chunked prefill,
   and when more than one request runs or waits as the step starts: vLLM 0.34.0 lets a request
   alone take the whole budget) and by the budget left of ``max_num_batched_tokens``. When its
   slots cannot be allocated, the last running request is preempted (freed, computed tokens
   reset to 0, put at the front of the waiting queue, behind the waiting requests that hold KV
   blocks: ``SchedulerCore.add_holder``) until they can; if the request itself was the last,
   the running loop stops.
2. **Then waiting requests, FCFS** (those holding KV blocks first: a load from the CPU tier that
   ended, a prompt received from a prefill replica), unless a request was preempted in this
   step: while the budget
   lasts and fewer than ``max_num_seqs`` run, the head's prefix-cache hit (whole blocks, never its
   last token) is looked up when it has computed nothing, it is given ``num_tokens - hits`` tokens
   capped as above (without chunked prefill a prompt larger than the budget left stops the loop,
   as since vLLM PR #28911), and its slots allocated; the first head that cannot be allocated
   stops the loop. With ``scheduler_reserve_full_isl`` (on by default, as in 0.34.0; vLLM PR
   #37307) the head is admitted only when the blocks of its whole sequence, less its prefix
   hits, are free (``KVCacheManager.can_fit_full_sequence``): a long prompt no longer starts
   chunks that must preempt before it can finish. With ``--watermark`` (``cache.watermark``,
   0 by default) a waiting request's blocks, at the gate and for its chunk, must also leave
   ``int(watermark * num_blocks)`` blocks free while some request runs
   (``KVCacheManager.allocate_slots``, ``has_scheduled_reqs``).

Prefill chunks and decodes share the step and are priced together. There is no swap.
Sequence groups do not exist in v1: ``n > 1`` requests are fanned out into ``n``
requests by the engine (vLLM ``ParentRequest``), which share prompt blocks through the prefix cache.
"""

from __future__ import annotations

from typing import Final

from kvsim.core.cost import StepCostModel
from kvsim.core.kv.base import NO_HIT, PrefixHit
from kvsim.core.kv.paged import PagedAllocator, plain_slots
from kvsim.core.scheduler.cohort import Member
from kvsim.core.scheduler.core import SchedulerCore
from kvsim.core.scheduler.plan import LazySpan, StepPlan
from kvsim.workload.request import Request

# how a step's running pass handles the cohort's members (``V1Scheduler._running_pass``)
# (Final: compiled, each a constant rather than a module dictionary lookup a use)
BULK: Final = 0
IN_ORDER: Final = 1
FLUSH: Final = 2
# what ``V1Scheduler._load_from_tier`` did with the waiting head
NO_TIER_HIT: Final = 0
LOADING: Final = 1
BLOCKED: Final = 2
DEFERRED: Final = 3


class V1Scheduler(SchedulerCore):
    """vLLM v1's FCFS scheduler (see the module docstring)."""

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        self._threshold = self._step_threshold()
        budget = self._schedule_running(plan, self.token_budget)
        if plan.num_preempted:
            plan.head_blocked = "preempted" if self.waiting else None
        else:
            budget = self._schedule_waiting(plan, budget)
            if self.waiting and plan.head_blocked is None:
                plan.head_blocked = "deferred" if plan.num_deferred else "budget"
        plan.extendable = self._extendable(plan)
        self._finish_plan(plan)
        return plan

    _partial = False
    _guard_blocks: int | None = None
    _threshold = 0  # this step's long_prefill_token_threshold (``_step_threshold``)

    def _watermark_slots(self) -> int:
        """Slots a waiting request's admission must leave free while some request runs: vLLM
        0.34.0's ``int(watermark * num_blocks)`` blocks (``KVCacheManager.watermark_blocks``,
        applied by ``allocate_slots`` to a waiting or preempted request when
        ``has_scheduled_reqs``: the scheduler's ``bool(self.running)``); 0 otherwise."""
        watermark = self.args.watermark
        blocks = self.allocator.num_gpu_blocks
        if not watermark or not self.running or blocks is None:
            return 0
        return int(watermark * blocks) * self.allocator.block_size_tokens

    def _sequence_fits(self, head: Request, hit: PrefixHit) -> bool:
        """vLLM's full-sequence gate (``can_fit_sequence``) for the head's known tokens, the
        watermark (``_watermark_slots``) left free as well."""
        allocator, reserve = self.allocator, self._watermark_slots()
        if not reserve:
            return allocator.can_fit_sequence(head, head.num_tokens, hit)
        need = allocator.sequence_slots_needed(head, head.num_tokens, hit)
        return need + reserve <= allocator.num_free_tokens

    def _leaves_watermark(self, head: Request, num_tokens: int, hit: PrefixHit) -> bool:
        """Whether the head's allocation of ``num_tokens`` (its lookahead slots too) leaves the
        watermark free (always, with none): ``_allocate`` then checks it fits at all."""
        reserve = self._watermark_slots()
        if not reserve:
            return True
        tokens = self.with_lookahead(num_tokens) if self.lookahead else num_tokens
        need = self.allocator.num_slots_needed(head, tokens, hit)
        return need + reserve <= self.allocator.num_free_tokens

    def _step_threshold(self) -> int:
        """The chunk cap of this step: ``long_prefill_token_threshold``, or 0 (none) without
        chunked prefill or when at most one request runs or waits as the step starts, since a
        request alone starves nobody (vLLM 0.34.0 ``Scheduler.schedule``, counting
        ``get_request_counts()`` before the running loop)."""
        if not self._chunked_prefill or len(self.running) + len(self.waiting) <= 1:
            return 0
        return self._long_prefill_threshold

    def _running_chunk(self, req: Request, budget: int) -> tuple[int, int]:
        """``(tokens it computes, tokens it knows but has not computed)`` of a running request
        given the budget left: the rest of what it knows and its speculative drafts
        (``num_tokens_with_spec - num_computed_tokens``), capped by this step's threshold
        (``_step_threshold``), by the budget and, with drafts, by ``max_model_len`` less the
        token it samples (vLLM 0.34.0 ``Scheduler.schedule``)."""
        unknown = req.num_tokens - req.num_computed_tokens
        return self._chunk_tokens(req, unknown, budget), unknown

    def _chunk_tokens(self, req: Request, unknown: int, budget: int) -> int:
        """``_running_chunk``'s tokens of a request that knows ``unknown`` tokens it has not
        computed."""
        num_new = unknown + req.num_draft_tokens
        threshold = self._threshold
        if 0 < threshold < num_new:
            num_new = threshold
        if req.num_draft_tokens:
            num_new = min(num_new, self.max_model_len - req.num_computed_tokens - 1)
        return min(num_new, budget)

    def _schedule_running(self, plan: StepPlan, budget: int) -> int:
        """The running requests, in the order they were admitted: each gets its chunk
        (``_running_chunk``); when its slots cannot be allocated, the last running request is
        preempted until they can, and if the request itself was the last the pass stops.

        When ``_running_pass`` proves that no allocation fails and the budget reaches every
        member, the members decode in bulk; when only the budget is proven, every running
        request is handled in turn (``_run_in_order``), the members staying in the cohort unless
        preempted (a paged pool without members the allocator grows itself); otherwise the
        cohort is flushed first."""
        lazy = self.lazy
        cohort = lazy.cohort
        clock = cohort.clock
        self._ran_any = self._prefill_ran = self._partial = False
        if cohort.members:
            kind = self._running_pass(budget)
            if kind == IN_ORDER and lazy.takes_turns():
                budget = self._run_in_order(plan, clock, budget)
                self._add_cohort_step(plan, clock, 1)
                return budget
            if kind != BULK:
                lazy.flush(self.running)  # everyone one by one
        budget -= len(cohort)  # every member decodes one token (_running_pass checked it)
        for req, member in lazy.step_order(clock):
            if member is not None:
                lazy.step_member(member, clock)
                continue
            if req not in lazy.seq:  # preempted in this pass (victims leave from the tail)
                break
            if budget <= 0:
                self._partial = True  # (starved: left for a later step)
                break
            scheduled = self._schedule_explicit(plan, req, budget, clock)
            if scheduled is None:
                break
            budget -= scheduled
        self._add_cohort_step(plan, clock, 1)
        return budget

    def _run_in_order(self, plan: StepPlan, clock: int, budget: int) -> int:
        """vLLM v1's running pass over every running request in turn, the cohort's members
        included: a member's token takes one token of budget and, at its block crossing, a
        block (preempting the last running request while none is free). ``_running_pass``
        proved that the budget reaches every member."""
        lazy = self.lazy
        order = lazy.in_order(self.running, clock)
        for i in range(len(order)):
            req, member = order[i]
            if req not in lazy.seq:  # preempted in this pass (victims leave from the tail)
                break
            if budget <= 0:
                assert all(m is None for _, m in order[i:]), "a member without budget"
                self._partial = True  # (starved: left for a later step)
                break
            if member is not None:
                if not self._member_fits_preempting(plan, member, clock):
                    break
                if lazy.steps_at(member, clock):
                    lazy.step_member(member, clock)
                budget -= 1
                continue
            scheduled = self._schedule_explicit(plan, req, budget, clock)
            if scheduled is None:
                break
            budget -= scheduled
        return budget

    def _member_fits_preempting(self, plan: StepPlan, member: Member, clock: int) -> bool:
        """Make room for a member's token at ``clock``, preempting the last running request
        until it fits; ``False`` when the member itself was preempted."""
        lazy = self.lazy
        while not lazy.member_fits(member, clock):
            if self._preempt_last(plan, clock) is member.request:
                return False
        return True

    def _schedule_explicit(
        self, plan: StepPlan, req: Request, budget: int, clock: int
    ) -> int | None:
        """Schedule an explicit running request's chunk (``_running_chunk``) within ``budget``:
        the tokens it computes (0: nothing to compute), ``None`` when it was preempted (the
        pass stops). A chunk that leaves some of what it knows for later marks the step
        partial."""
        num_new, unknown = self._running_chunk(req, budget)
        if num_new <= 0:
            return 0
        if not self._allocate_preempting(plan, req, req.num_computed_tokens + num_new, clock):
            return None
        if self.spec is None:
            plan.add(req, num_new)
        else:
            self._add_speculating(plan, req, num_new)
        if num_new < unknown:
            self._partial = True
        return num_new

    _ran_any = False  # speculative decoding: the running pass scheduled a request
    _prefill_ran = False  # ... and one of them was mid-prefill (vLLM's prefill_scheduled)

    def _add_speculating(self, plan: StepPlan, req: Request, num_new: int) -> None:
        """Schedule a running request under speculative decoding: its drafts past its known
        tokens are verified (vLLM: ``spec_token_ids`` cut to the scheduled ones, then cleared);
        note a request mid-prefill (vLLM ``is_prefill_chunk``: no drafts and tokens left)."""
        self._ran_any = True
        computed = req.num_computed_tokens
        if not req.num_draft_tokens and computed < req.num_tokens:
            self._prefill_ran = True
        drafts = min(req.num_draft_tokens, max(0, computed + num_new - req.num_tokens))
        req.num_draft_tokens = 0
        if drafts:
            plan.add_verify(req, num_new, drafts, False)
        else:
            plan.add(req, num_new)
        self._count_drafting(plan, req, num_new)

    def speculative_span(
        self,
        plan: StepPlan,
        cost: StepCostModel,
        step0_s: float,
        max_steps: int,
        until_s: float | None,
        start_s: float,
    ) -> list[float]:
        """Fast-forward a step of speculating decoders: the durations (seconds) of ``plan``'s
        step 0 (``step0_s``) and of the steps after it that run while nothing but decoding
        happens, each planned, allocated and priced as it comes.

        Step ``j >= 1`` exists when step ``j - 1`` ends before ``until_s`` (the next arrival,
        seconds from ``start_s``; ``None``: none known), there are fewer than ``max_steps``,
        step ``j - 1`` finished no request once completed (``_complete_verifications``: its
        acceptance draws, in the order step-by-step planning makes them) and step ``j``'s new
        blocks are all free. Step ``j`` is what ``schedule`` would plan then: every running
        request in running order gets its chunk (``_running_chunk``: its sampled token and its
        drafts) and its slots with lookahead (``with_lookahead``), the blocks taken at once in
        running order (``PagedAllocator.grow_blocks`` at the span's end: the blocks one
        ``allocate`` each would take, nothing else taking or freeing one meanwhile), and is
        priced by ``add_verify`` and ``StepCostModel.step_s``.

        Only where no rule could tell the steps apart from one step at a time: nobody waits,
        every running request is a plain single-sequence request of a ``paged`` pool that
        samples in step 0 (a prefill may end then), shares no token (no prefix-cache work at a
        fill or a verification) and gets its whole chunk within the token budget. The plan
        keeps step 0's work sums and the last step's requests (``StepPlan``); a last step
        already completed is flagged (``StepPlan.completed``). ``plan.span`` gets each step's
        slot totals for the recorder (``kvsim.engine.span``), counted as
        ``Allocator.request_slots`` counts a step of its own.
        """
        durations = [step0_s]
        if max_steps <= 1 or (until_s is not None and step0_s >= until_s):
            return durations  # (no step 1: the plan is recorded as any other)
        if not self._speculates_alone(plan):
            return durations
        allocator = self.allocator
        assert isinstance(allocator, PagedAllocator)
        block = allocator.block_size_tokens
        running = plan.scheduled  # every running request, in running order
        held, token, internal = self._verification_slots(plan)
        span = LazySpan(held, internal, [0], [0])
        span.token0, span.tokens, span.explicit = token, [0], True
        plan.span = span
        step = plan
        end = step0_s
        free = allocator.num_free_tokens // block
        grants: list[tuple[int, int]] = []  # the span's (request id, blocks), in take order
        while len(durations) < max_steps and (until_s is None or end < until_s):
            plan.completed_finished = self._complete_verifications(step, start_s + end)
            plan.completed = True
            if plan.completed_finished:
                break
            chunks: list[int] = []
            growing: list[tuple[int, int]] = []  # (index in running, blocks)
            budget, num_blocks, fits = self.token_budget, 0, True
            for i in range(len(running)):
                req = running[i]
                num_new = self._chunk_tokens(req, req.num_tokens - req.num_computed_tokens, budget)
                if num_new <= 0:  # at max_model_len: skipped by step j, which is not the span's
                    fits = False
                    break
                budget -= num_new
                chunks.append(num_new)
                need = self.with_lookahead(req.num_computed_tokens + num_new)
                if need > req.num_held_slots:  # (as _allocate's hot path: room, no call)
                    extra = allocator.blocks_for(req.num_held_slots, need)
                    growing.append((i, extra))
                    num_blocks += extra
            if not fits or num_blocks > free:  # (step j would preempt: not the span's)
                break
            plan.completed = False
            free -= num_blocks
            for i, extra in growing:
                req = running[i]
                req.num_held_slots += extra * block
                grants.append((req.req_id, extra))
            step = StepPlan()
            for i in range(len(running)):
                self._add_speculating(step, running[i], chunks[i])
            held_j, token_j, internal_j = self._verification_slots(step)
            duration = cost.step_s(
                step.work_new_tokens,
                step.work_context_tokens,
                step.work_attention_pairs,
                step.work_seqs,
                step.work_drafting_seqs,
            )
            durations.append(duration)
            end += duration
            span.blocks.append((held_j - held) // block)
            span.tokens.append(token_j - token)
            span.internal.append(internal_j - internal)
            held, token, internal = held_j, token_j, internal_j
        if grants:  # one take: the blocks, in order, that one take a step would give
            allocator.grow_blocks(grants)
        if step is not plan and not plan.completed:  # complete() completes the last step
            plan.scheduled, plan.num_new_tokens = step.scheduled, step.num_new_tokens
        return durations

    def _speculates_alone(self, plan: StepPlan) -> bool:
        """``speculative_span``'s conditions on the step planned: nobody waits or was
        preempted, and every running request is a plain request of a ``paged`` pool that
        samples in step 0 (a decoder, or a prefill that ends then), shares no token and will
        get its whole chunk (``1 + k`` tokens each fit the budget and the step's threshold)."""
        assert self.spec is not None
        if (
            self.waiting
            or plan.num_preempted
            or self._partial
            or not plan.all_running_scheduled
            or type(self.allocator) is not PagedAllocator
            or self._every_step
            or len(plan.scheduled) != len(self.running)
        ):
            return False
        chunk = 1 + self.spec.num_speculative_tokens
        if chunk * len(self.running) > self.token_budget or 0 < self._threshold < chunk:
            return False
        scheduled, num_new = plan.scheduled, plan.num_new_tokens
        for i in range(len(scheduled)):
            req = scheduled[i]
            if (
                req.num_seqs != 1
                or req.shared_tokens
                or req.num_computed_tokens + num_new[i] < req.num_tokens
            ):
                return False
        return True

    def _verification_slots(self, step: StepPlan) -> tuple[int, int, int]:
        """``(held, token states, internal)`` slots of a step's scheduled requests, plain ones
        of a ``paged`` pool (``plain_slots`` of their held slots, as ``PagedAllocator.
        request_slots`` counts them, with the step's tokens computed)."""
        held = token = internal = 0
        scheduled, num_new = step.scheduled, step.num_new_tokens
        for i in range(len(scheduled)):
            req = scheduled[i]
            r_held, r_token, r_internal = plain_slots(
                req.num_held_slots, req.num_computed_tokens + num_new[i], req.final_kv_tokens
            )
            held += r_held
            token += r_token
            internal += r_internal
        return held, token, internal

    def _note_head_need(
        self, plan: StepPlan, head: Request, num_tokens: int, hit: PrefixHit, whole_sequence: bool
    ) -> None:
        """In a pool of several groups, note the blocks a head blocked by ``"kv"`` needed from
        the free pool (``plan.head_need_blocks``: a span lasts while the windows free fewer):
        for its whole sequence at the full-sequence gate, else for ``num_tokens``."""
        if plan.head_blocked != "kv" or self.lazy.cohort.groups is None:
            return
        allocator = self.allocator
        need = (
            allocator.sequence_slots_needed(head, num_tokens, hit)
            if whole_sequence
            else allocator.num_slots_needed(head, num_tokens, hit)
        )
        reserve = self._watermark_slots()  # (left free as well: vLLM's watermark)
        plan.head_need_blocks = (need + reserve) // allocator.block_size_tokens

    def _count_drafting(self, plan: StepPlan, req: Request, num_new: int) -> None:
        """Count ``req`` among the step's drafting sequences unless its drafts are sure to go
        unused (vLLM ``Scheduler._drafts_unused``: a prefill chunk that samples nothing, or a
        step that samples its last output token)."""
        if req.num_computed_tokens + num_new < req.num_tokens:
            return
        if req.num_output_tokens + 1 >= req.output_tokens:
            return
        plan.work_drafting_seqs += 1

    def _allocate_preempting(
        self, plan: StepPlan, req: Request, num_tokens: int, clock: int
    ) -> bool:
        """Allocate ``num_tokens`` for a running request, preempting the last running request
        (recompute) until it fits; ``False`` when the request itself was preempted."""
        while not self._allocate(req, num_tokens):
            if self._preempt_last(plan, clock) is req:
                return False
        return True

    def _running_pass(self, budget: int) -> int:
        """How this step's running pass handles the cohort's members: ``BULK`` when the budget
        reaches every member and the pool holds every allocation, so handling each running
        request one by one could neither preempt nor leave a member without its token;
        ``IN_ORDER`` when the budget reaches every member but an allocation may fail (members
        then take their turns, ``_run_in_order``); ``FLUSH`` when the budget may run out before
        a member's turn.

        The budget goes to the running requests in running order; giving every member its
        token first is the same as long as no member comes after the explicit request at which
        the budget runs out (the *boundary*). Preemptions only take requests from behind the
        one being handled, so they change no survivor's share of the budget.
        """
        allocator, lazy = self.allocator, self.lazy
        cohort = lazy.cohort
        left = budget - len(cohort)  # for the others once every member has its token
        if left < 0:
            return FLUSH
        need = 0
        fits = True
        boundary: Request | None = None
        others = lazy.others
        for req in others:
            if left <= 0:  # the budget ran out: this request and those after it wait
                boundary = boundary or req
                break
            num_new, _ = self._running_chunk(req, left)
            if num_new <= 0:
                return FLUSH  # never for a running request; the one-by-one pass knows
            if num_new >= left:
                boundary = req
            if fits:
                computed = req.num_computed_tokens
                fits = allocator.can_allocate(req, computed + num_new)
                if fits:
                    need += allocator.num_slots_needed(req, computed + num_new)
            left -= num_new
        if boundary is not None:
            running = list(self.running)  # (rare: a budget that runs out)
            after = len(running) - running.index(boundary) - 1
            others_after = len(others) - list(others).index(boundary) - 1
            if after != others_after:
                return FLUSH  # a member after the boundary would get no token
        if fits and need + lazy.touched_slots_needed(cohort.clock) <= allocator.num_free_tokens:
            return BULK
        return IN_ORDER

    def _schedule_waiting(self, plan: StepPlan, budget: int) -> int:
        allocator, waiting = self.allocator, self.waiting
        skipped: list[Request] = []
        while waiting and budget > 0:
            if len(self.running) >= self.max_num_seqs:
                plan.head_blocked = "max_num_seqs"
                break
            head = waiting[0]
            hit = NO_HIT
            if head.num_computed_tokens == 0 and allocator.caches_prefixes:
                hit = allocator.find_cached_prefix(head)
                if self.offload is not None:
                    outcome = self._load_from_tier(plan, head, hit, budget)
                    if outcome == BLOCKED:
                        break
                    if outcome == DEFERRED:  # (vLLM ``skip_request``: the next one may run)
                        # (holders lead the queue: the head holds no blocks when none does)
                        assert not self._num_holders, "a request that holds blocks is deferred"
                        skipped.append(self.pop_waiting())
                        continue
                    if outcome == LOADING:
                        continue
            num_new = head.num_tokens - head.num_computed_tokens - hit.num_tokens
            pad = False
            if num_new == 1 and self.spec is not None and self._pads(head, hit):
                if 1 + self.spec.num_speculative_tokens > budget:
                    plan.head_blocked = "budget"  # (vLLM: rather not schedule than unpadded)
                    break
                num_new, pad = 1 + self.spec.num_speculative_tokens, True
            threshold = self._threshold
            if 0 < threshold < num_new:  # capped before the unchunked budget check, as vLLM
                num_new = threshold
            if not self.args.enable_chunked_prefill and num_new > budget:
                plan.head_blocked = "budget"
                break
            num_new = min(num_new, budget)
            if self.args.scheduler_reserve_full_isl and not self._sequence_fits(head, hit):
                # the whole sequence must fit, not just this chunk (full_sequence_must_fit)
                plan.head_blocked = self._full_isl_blocked_reason(head, hit)
                self._note_head_need(plan, head, head.num_tokens, hit, whole_sequence=True)
                break
            num_tokens = head.num_computed_tokens + hit.num_tokens + num_new
            if not self._leaves_watermark(head, num_tokens, hit) or not self._allocate(
                head, num_tokens, hit
            ):
                plan.head_blocked = self._blocked_reason(head, hit, budget)
                self._note_head_need(plan, head, num_tokens, hit, whole_sequence=False)
                break
            holder = self._num_holders > 0  # (its KV loaded or received: counted then)
            self.pop_waiting()
            self._run(head)
            if not head.readmitted and head.num_computed_tokens == 0 and not holder:
                # (a loaded request's is set by start_load; a received one's at receipt, its
                # computed tokens 0 when its prompt is one token)
                head.num_cached_tokens = hit.num_tokens
                if self.offload is not None:
                    self.offload.count_query(head, hit.num_tokens, 0)
            head.num_computed_tokens += hit.num_tokens
            if head.num_computed_tokens + num_new < head.num_tokens:
                self._partial = True
            if pad:
                plan.add_verify(head, num_new, num_new - 1, True)
            else:
                plan.add(head, num_new)
            if self.spec is not None:
                self._count_drafting(plan, head, num_new)
            budget -= num_new
        if skipped:  # back at the front, in their order (vLLM ``prepend_requests``)
            waiting.extendleft(reversed(skipped))
            plan.num_deferred = len(skipped)
        return budget

    def _load_from_tier(self, plan: StepPlan, head: Request, hit: PrefixHit, budget: int) -> int:
        """Start loading the head's CPU-tier hit past its GPU hit (``kvsim.core.scheduler.
        offload``): ``LOADING`` when it now holds blocks for both and waits for the load (out
        of the queue until it ends, vLLM ``WAITING_FOR_REMOTE_KVS``), ``NO_TIER_HIT``,
        ``DEFERRED`` when the tier cannot say yet (a hit block still being stored, or read by
        another load: the head is skipped this step), or ``BLOCKED`` when its blocks do not
        fit and the waiting pass stops."""
        assert self.offload is not None
        num_loaded = self.offload.matched_tokens(head, hit.num_tokens)
        if num_loaded is None:
            return DEFERRED
        if not num_loaded:
            return NO_TIER_HIT
        total = hit.num_tokens + num_loaded
        if self.args.scheduler_reserve_full_isl and not self._sequence_fits(head, hit):
            plan.head_blocked = self._full_isl_blocked_reason(head, hit)
            return BLOCKED
        reserve = self._watermark_slots()  # (a load takes no lookahead slots: no step runs)
        need = self.allocator.num_slots_needed(head, total, hit) if reserve else 0
        if need + reserve > self.allocator.num_free_tokens or not self._allocate(
            head, total, hit, lookahead=False
        ):
            plan.head_blocked = self._blocked_reason(head, hit, budget)
            return BLOCKED
        self.pop_waiting()
        self.offload.start_load(head, hit.num_tokens, num_loaded)
        return LOADING

    def _pads(self, head: Request, hit: PrefixHit) -> bool:
        """Whether a waiting request with one token to compute is padded to a whole
        verification (``1 + k`` tokens, ``k`` placeholder drafts) to keep the step a uniform
        decode batch: nothing mid-prefill ran, something ran or the request has computed
        tokens, and the padded tokens plus the one it samples fit ``max_model_len`` (vLLM
        0.34.0 ``Scheduler.schedule``, ``pad_spec_decode``)."""
        assert self.spec is not None
        computed = head.num_computed_tokens + hit.num_tokens
        padded = 1 + self.spec.num_speculative_tokens
        return (
            not self._prefill_ran
            and (self._ran_any or computed > 0)
            and computed + padded + 1 <= self.max_model_len
        )

    def _blocked_reason(self, head: Request, hit: PrefixHit, budget: int) -> str:
        """``"kv"``, or ``"kv_prefix"`` when a decode span could lower what the head needs.

        Growth may fill blocks the head shares (more hits), or evict its cached ones: losing
        hits never lowers the need of a head computing all its tokens at once (it needs its whole
        KV either way), but can for a head whose chunk the budget or the threshold caps. Such a
        paged head is guarded instead: a span takes fewer free blocks than lie before its hit
        blocks in the free queue (``growth_reserve_slots``), so its need stays as it is.
        """
        self._guard_blocks = None
        if head.shares_tokens:
            return "kv_prefix"
        threshold = self.args.long_prefill_token_threshold  # a later step's cap at most
        cap = min(budget, threshold) if threshold else budget
        if not hit.num_tokens or head.num_tokens - head.num_computed_tokens <= cap:
            return "kv"
        if not isinstance(self.allocator, PagedAllocator):
            return "kv_prefix"
        self._guard_blocks = self.allocator.blocks_before_evicting(hit)
        return "kv"

    def _full_isl_blocked_reason(self, head: Request, hit: PrefixHit) -> str:
        """``"kv"``, or ``"kv_prefix"`` when a decode span could lower what the head's whole
        sequence needs: growth filling blocks it shares (more hits). Evictions cannot: a
        request that shares no tokens hits only its own free blocks, which it needs either way
        (``_blocked_reason``); outside paged pools, any hit is left to the exact path."""
        self._guard_blocks = None
        paged = isinstance(self.allocator, PagedAllocator)
        if head.shares_tokens or (hit.num_tokens and not paged):
            return "kv_prefix"
        return "kv"

    def growth_reserve_slots(self, plan: StepPlan) -> int:
        if self._guard_blocks is None or plan.head_blocked != "kv":
            return 0
        assert isinstance(self.allocator, PagedAllocator)
        block = self.allocator.block_size_tokens
        return max(0, self.allocator.num_free_tokens - self._guard_blocks * block)

    def _extendable(self, plan: StepPlan) -> bool:
        """Later steps repeat "every running request decodes one token" until an event: nobody
        preempted, no head that a later step's budget or cache state could admit, every running
        request scheduled and none left mid-prefill."""
        plan.all_running_scheduled = len(plan.scheduled) + plan.num_cohort == len(self.running)
        return (
            not plan.num_preempted
            and not plan.num_deferred
            and plan.head_blocked not in ("budget", "preempted", "kv_prefix")
            and not self._partial
            and plan.all_running_scheduled
        )
