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
   reset to 0, put at the front of the waiting queue) until they can; if the request itself was
   the last, the running loop stops.
2. **Then waiting requests, FCFS**, unless a request was preempted in this step: while the budget
   lasts and fewer than ``max_num_seqs`` run, the head's prefix-cache hit (whole blocks, never its
   last token) is looked up when it has computed nothing, it is given ``num_tokens - hits`` tokens
   capped as above (without chunked prefill a prompt larger than the budget left stops the loop,
   as since vLLM PR #28911), and its slots allocated; the first head that cannot be allocated
   stops the loop. With ``scheduler_reserve_full_isl`` (on by default, as in 0.34.0; vLLM PR
   #37307) the head is admitted only when the blocks of its whole sequence, less its prefix
   hits, are free (``KVCacheManager.can_fit_full_sequence``): a long prompt no longer starts
   chunks that must preempt before it can finish.

Prefill chunks and decodes share the step and are priced together. There is no swap and no
watermark. Sequence groups do not exist in v1: ``n > 1`` requests are fanned out into ``n``
requests by the engine (vLLM ``ParentRequest``), which share prompt blocks through the prefix cache.
"""

from __future__ import annotations

from kvsim.allocators.base import NO_HIT, PrefixHit
from kvsim.allocators.paged import PagedAllocator
from kvsim.request import Request
from kvsim.scheduler.core import SchedulerCore
from kvsim.scheduler.lazy import LazyDecodes
from kvsim.scheduler.plan import StepPlan


class V1Scheduler(SchedulerCore):
    """vLLM v1's FCFS scheduler (see the module docstring)."""

    def schedule(self) -> StepPlan:
        plan = StepPlan()
        self._threshold = self._step_threshold()
        budget = None
        lazy = self._lazy_ready()
        if lazy is not None:
            budget = self._schedule_running_lazy(plan, self.token_budget, lazy)
        if budget is None:
            self._flush()
            budget = self._schedule_running(plan, self.token_budget)
        if plan.num_preempted:
            plan.head_blocked = "preempted" if self.waiting else None
        else:
            budget = self._schedule_waiting(plan, budget)
            if self.waiting and plan.head_blocked is None:
                plan.head_blocked = "budget"
        plan.extendable = self._extendable(plan)
        self._finish_lazy_plan(plan)
        return plan

    _partial = False
    _guard_blocks: int | None = None
    _threshold = 0  # this step's long_prefill_token_threshold (``_step_threshold``)

    def _step_threshold(self) -> int:
        """The chunk cap of this step: ``long_prefill_token_threshold``, or 0 (none) without
        chunked prefill or when at most one request runs or waits as the step starts, since a
        request alone starves nobody (vLLM 0.34.0 ``Scheduler.schedule``, counting
        ``get_request_counts()`` before the running loop)."""
        threshold = self.args.long_prefill_token_threshold
        if not self.args.enable_chunked_prefill or len(self.running) + len(self.waiting) <= 1:
            return 0
        return threshold

    def _schedule_running(self, plan: StepPlan, budget: int) -> int:
        running = self.running
        threshold = self._threshold
        cache_block = self.cache_block_tokens
        i = 0
        partial = False  # some request is left mid-prefill after step 0
        per_token = self.allocator.takes_slot_per_token
        while i < len(running) and budget > 0:
            if per_token:  # a run of decodes, each taking its slot: in one allocator call
                run = self._decode_run(i, budget)
                placed = self.allocator.grow_one_each(run) if run else 0
                if placed:
                    done = run[:placed]
                    for req in done:
                        req.num_held_slots = req.num_computed_tokens + 1
                    plan.add_decodes(done)
                budget -= placed
                i += placed
                if i >= len(running) or budget <= 0:
                    break
            req = running[i]
            computed = req.num_computed_tokens
            num_new = req.prompt_tokens + req.num_output_tokens - computed
            if (
                num_new == 1
                and computed < req.num_held_slots
                and (not cache_block or not req.shares_tokens or (computed + 1) % cache_block)
            ):
                if req.num_output_tokens:  # hot path: a decode whose slot is already held
                    plan.add_decode(req)
                else:  # the last token of a prompt
                    plan.add(req, 1)
                budget -= 1
                i += 1
                continue
            if num_new == 1 and req.num_output_tokens and self._allocate(req, computed + 1):
                plan.add_decode(req)  # a decode that takes a slot (a block boundary, radix)
                budget -= 1
                i += 1
                continue
            unknown = num_new  # tokens it knows but has not computed
            if 0 < threshold < num_new:
                num_new = threshold
            if num_new > budget:
                num_new = budget
            if num_new <= 0:
                i += 1
                continue
            fits = True
            while not self._allocate(req, computed + num_new):
                victim = running.pop()
                self._preempt_recompute(victim)
                plan.num_preempted += 1
                if victim is req:
                    fits = False
                    break
            if not fits:
                break
            partial = partial or num_new < unknown
            if num_new == 1 and req.num_output_tokens:
                plan.add_decode(req)
            else:
                plan.add(req, num_new)
            budget -= num_new
            i += 1
        self._partial = partial or i < len(running)
        return budget

    def _decode_run(self, start: int, budget: int) -> list[Request]:
        """The running requests from ``start`` on that decode one token, at most ``budget``."""
        run = []
        running = self.running
        for j in range(start, min(len(running), start + budget)):  # no copy of the list
            req = running[j]
            if not req.num_output_tokens or (
                req.prompt_tokens + req.num_output_tokens - req.num_computed_tokens != 1
            ):
                break
            run.append(req)
        return run

    def _schedule_running_lazy(self, plan: StepPlan, budget: int, lazy: LazyDecodes) -> int | None:
        """``_schedule_running`` over the cohort: every member decodes one token, the others
        and the members at a block boundary are handled one by one in running order. ``None``
        (nothing changed) when the exact pass must run: the budget would run out before some
        member's turn, or some allocation could fail (a preemption).

        The budget goes to the running requests in running order; giving every member its
        token first is the same as long as no member comes after the other request at which
        the budget runs out (the *boundary*).
        """
        allocator, cohort = self.allocator, lazy.cohort
        clock = cohort.clock
        threshold = self._threshold
        others = lazy.others
        left = budget - len(cohort)  # for the others once every member has its token
        if left < 0:
            return None
        need = 0
        chunks: list[tuple[Request, int]] = []
        boundary: Request | None = None
        for req in others:
            if left <= 0:  # the budget ran out: this request and those after it wait
                boundary = boundary or req
                break
            computed = req.num_computed_tokens
            num_new = req.prompt_tokens + req.num_output_tokens - computed
            if 0 < threshold < num_new:
                num_new = threshold
            if num_new <= 0:
                return None  # never for a running request; the exact pass knows what to do
            if num_new >= left:
                num_new, boundary = left, req
            if not allocator.can_allocate(req, computed + num_new):
                return None
            need += allocator.num_slots_needed(req, computed + num_new)
            left -= num_new
            chunks.append((req, num_new))
        starved = False  # some running request gets no token (v1 then leaves it waiting)
        if boundary is not None:
            running = self.running
            after = len(running) - running.index(boundary) - 1
            others_after = len(others) - list(others).index(boundary) - 1
            if after != others_after:
                return None  # a member after the boundary would get no token
            starved = after > 0 or not chunks or chunks[-1][0] is not boundary
        if need + cohort.crossings_at(clock) * lazy.period > allocator.num_free_tokens:
            return None
        partial = False

        def allocate(req: Request, num_tokens: int) -> None:
            nonlocal partial
            computed = req.num_computed_tokens
            placed = self._allocate(req, num_tokens)
            assert placed, f"req {req.req_id}: a checked allocation failed"
            partial = partial or num_tokens < req.num_tokens
            plan.add(req, num_tokens - computed)

        lazy.step0(clock, [(r, r.num_computed_tokens + n) for r, n in chunks], allocate)
        self._partial = partial or starved
        n, context = len(cohort), cohort.sum_computed(clock)
        work = plan.work  # each member decodes one token after its `context` share
        work[0] += n
        work[1] += context
        work[2] += 2 * context + n
        work[3] += n
        plan.lazy = True
        plan.cohort_clock = clock
        plan.cohort_advance = 1
        plan.num_cohort = n
        return left

    def _schedule_waiting(self, plan: StepPlan, budget: int) -> int:
        allocator, waiting = self.allocator, self.waiting
        while waiting and budget > 0:
            if len(self.running) >= self.max_num_seqs:
                plan.head_blocked = "max_num_seqs"
                break
            head = waiting[0]
            hit = NO_HIT
            if head.num_computed_tokens == 0 and allocator.caches_prefixes:
                hit = allocator.find_cached_prefix(head)
            num_new = head.num_tokens - head.num_computed_tokens - hit.num_tokens
            threshold = self._threshold
            if 0 < threshold < num_new:
                num_new = threshold
            if not self.args.enable_chunked_prefill and num_new > budget:
                plan.head_blocked = "budget"
                break
            num_new = min(num_new, budget)
            if self.args.scheduler_reserve_full_isl and not allocator.can_allocate(
                head, head.num_tokens, hit
            ):  # the whole sequence must fit, not just this chunk (can_fit_full_sequence)
                plan.head_blocked = self._full_isl_blocked_reason(head, hit)
                break
            if not self._allocate(head, head.num_computed_tokens + hit.num_tokens + num_new, hit):
                plan.head_blocked = self._blocked_reason(head, hit, budget)
                break
            waiting.popleft()
            self._run(head)
            if head.num_preemptions == 0:
                head.num_cached_tokens = hit.num_tokens
            head.num_computed_tokens += hit.num_tokens
            if head.num_computed_tokens + num_new < head.num_tokens:
                self._partial = True
            plan.add(head, num_new)
            budget -= num_new
        return budget

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
            and plan.head_blocked not in ("budget", "preempted", "kv_prefix")
            and not self._partial
            and plan.all_running_scheduled
        )
