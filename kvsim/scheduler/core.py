"""What both engine profiles share: queues, recompute preemption, step completion, fast-forward.

Plain Python; talks only to the allocator contract. A profile (``v1.py``, ``v0.py``) plans one
step in ``schedule``; ``complete`` applies it (vLLM's ``update_from_output``): every scheduled
request's computed tokens advance by its new tokens, a request whose computed tokens catch up
with its known tokens samples one (its first sets ``first_token_time_s``), and a request that has
sampled all its output tokens finishes and frees its KV at once, so its last token never gets a
KV slot.

A plan whose later steps would all be "every running request decodes one token" may be
fast-forwarded ``k`` steps at once (``max_extension``/``extend``): up to the first finish and as
far as every request can grow without an allocation failing.

With ``enable_lazy_decodes`` (the engine's fast path, ``kvsim.scheduler.lazy``) steady decoders
advance together in a cohort and are touched only when they finish, cross a block boundary or are
preempted; a plan's ``lazy`` flag says which path made it. Without it (the default for direct
users and tests) every running request is handled at every step and its counters are always true.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import numpy as np

from kvsim.allocators.base import NO_HIT, Allocator, IntArray, PrefixHit
from kvsim.config import EngineArgs
from kvsim.request import Request
from kvsim.scheduler.lazy import LazyDecodes
from kvsim.scheduler.plan import StepPlan


class PreemptionLivelockError(ValueError):
    """A request was preempted more often than ``max_preemptions_per_request`` (a pool too
    small for the running set: the config's fault, hence a ``ValueError``)."""


class SchedulerCore:
    """FCFS continuous batching over one allocator; ``schedule`` is the profile's.

    Args:
        allocator: the KV allocation policy.
        args: the run's resolved engine arguments (``SimConfig.engine_args``).
    """

    def __init__(self, allocator: Allocator, args: EngineArgs) -> None:
        self.allocator = allocator
        self.args = args
        self.token_budget = args.max_num_batched_tokens
        self.max_num_seqs = args.max_num_seqs
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0
        self.has_groups = False  # any sequence group seen: sequences != requests from then on
        caching = allocator.paged and args.enable_prefix_caching
        # blocks are cached when they fill, so a caching pool hears of every filled block
        self.cache_block_tokens = allocator.block_size_tokens if caching else 0
        self.lazy: LazyDecodes | None = None

    # -- lazy decodes -----------------------------------------------------------------------
    def enable_lazy_decodes(self, pooled: bool = True) -> bool:
        """Advance steady decoders lazily from now on (before the first request arrives);
        ``False`` when the allocator needs every request at every step (no blocks or slabs).

        Args:
            pooled: growing tables may take anonymous blocks in bulk (``DecodeCohort``); off
                when block ids are read during the run (memory-map frames).
        """
        if self.allocator.span_layout is None:
            return False
        self.lazy = LazyDecodes(self.allocator, bool(self.cache_block_tokens), pooled)
        for req in self.running:
            self.lazy.started(req)
        self.lazy.rejoin(self.running)
        return True

    def _lazy_ready(self) -> LazyDecodes | None:
        """The lazy decodes if this step may use them (sequence groups turn them off)."""
        lazy = self.lazy
        if lazy is not None and self.has_groups:
            lazy.flush(self.running)
            self.lazy = lazy = None
        return lazy

    def _flush(self) -> None:
        """Make every running request's counters true (before an exact pass)."""
        if self.lazy is not None and self.lazy.cohort.members:
            self.lazy.flush(self.running)

    def _run(self, req: Request) -> None:
        """Append ``req`` to the running list."""
        self.running.append(req)
        if self.lazy is not None:
            self.lazy.started(req)

    def _finish_lazy_plan(self, plan: StepPlan) -> None:
        """A lazy plan whose span would carry a request that cannot join the cohort becomes an
        exact one: the members go back into ``scheduled`` (one decode token each)."""
        if not plan.lazy or not plan.extendable:
            return
        assert self.lazy is not None
        if self.lazy.can_join_after_step0(plan):
            return
        seq = self.lazy.seq
        members = self.lazy.flush(self.running)
        pairs = list(zip(plan.scheduled, plan.num_new_tokens, strict=True))
        pairs += [(m.request, 1) for m in members] if plan.num_cohort else []
        pairs.sort(key=lambda p: seq[p[0]])
        plan.scheduled = [r for r, _ in pairs]
        plan.num_new_tokens = [n for _, n in pairs]
        plan.lazy = False
        plan.num_cohort = 0

    def add_request(self, request: Request) -> None:
        """Queue an arrived request at the back of the waiting queue."""
        self.waiting.append(request)
        if request.num_seqs > 1:
            self.has_groups = True

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def num_running_seqs(self) -> int:
        """Running sequences (a group of ``w`` counts ``w``)."""
        if not self.has_groups:
            return len(self.running)
        return sum([r.num_seqs for r in self.running])

    def schedule(self) -> StepPlan:
        """Plan one step (the profile's rules)."""
        raise NotImplementedError

    # -- allocation and preemption ------------------------------------------------------------
    def _allocate(self, req: Request, num_tokens: int, hit: PrefixHit = NO_HIT) -> bool:
        """Allocate through the allocator and refresh the request's cached held slots."""
        if num_tokens <= req.num_held_slots:  # hot path: the holding has room
            cb = self.cache_block_tokens
            if not cb or not req.shares_tokens or num_tokens // cb <= req.num_computed_tokens // cb:
                return True  # and no shareable block fills, so there is nothing to cache
        if self.allocator.allocate(req, num_tokens, hit) is None:
            return False
        req.num_held_slots = self.allocator.held_slots(req.req_id)
        return True

    def _preempt_recompute(self, req: Request) -> None:  # exact passes only
        """Drop the request's KV; it re-prefills prompt + outputs from the front of the queue."""
        self.allocator.free(req.req_id, req.num_computed_tokens)
        req.num_computed_tokens = 0
        req.num_held_slots = 0
        self._count_preemption(req)
        self.waiting.appendleft(req)

    def _count_preemption(self, req: Request) -> None:
        req.num_preemptions += 1
        self.num_preemptions += 1
        if req.num_preemptions > self.args.max_preemptions_per_request:
            raise PreemptionLivelockError(
                f"request {req.req_id} (prompt {req.prompt_tokens}, output {req.output_tokens} "
                f"tokens) was preempted {req.num_preemptions} times (max_preemptions_per_request "
                f"= {self.args.max_preemptions_per_request}): the KV pool of "
                f"{self.allocator.capacity_tokens:,} slots cannot hold the running set; lower "
                "max_num_seqs or raise the KV budget"
            )

    def head_of_queue(self) -> tuple[Request, int] | None:
        """The waiting head and the tokens its admission must place (its first chunk, or its
        whole sequence under ``scheduler_reserve_full_isl``), or ``None``."""
        if not self.waiting:
            return None
        head = self.waiting[0]
        tokens = head.num_tokens
        if self.args.enable_chunked_prefill and not self.args.scheduler_reserve_full_isl:
            tokens = min(tokens, self.token_budget)
        return head, tokens

    # -- completion ---------------------------------------------------------------------------
    def complete(self, plan: StepPlan, now_s: float, step0_end_s: float) -> list[Request]:
        """Apply a finished plan; free and return the requests that finished.

        Args:
            now_s: simulated time at the end of the plan, seconds.
            step0_end_s: end of its first step (when step 0's tokens are sampled), seconds.
        """
        k = plan.num_steps
        for req, n in zip(plan.scheduled, plan.num_new_tokens, strict=True):
            req.num_computed_tokens += n
            if req.num_computed_tokens >= req.num_tokens:
                req.num_output_tokens += 1
                if req.first_token_time_s is None:
                    req.first_token_time_s = step0_end_s
        if plan.lazy:
            return self._complete_lazy(plan, now_s)
        candidates = plan.scheduled
        if k > 1:
            for req in plan.members:
                req.num_computed_tokens += k - 1
                req.num_output_tokens += k - 1
            candidates = plan.members
        finished = [r for r in candidates if r.num_output_tokens >= r.output_tokens]
        if finished:
            for req in finished:
                req.finish_time_s = now_s
                req.num_held_slots = 0
                self.allocator.free(req.req_id)
            self.running = [r for r in self.running if r.finish_time_s is None]
        if self.lazy is not None:
            for req in finished:
                self.lazy.finished(req)
            self.lazy.rejoin(self.running)
        return finished

    def _complete_lazy(self, plan: StepPlan, now_s: float) -> list[Request]:
        """``complete`` of a lazy plan once its explicit requests' step 0 is applied: the cohort
        takes its steps, and finished requests are freed in running order."""
        lazy = self.lazy
        assert lazy is not None
        cohort = lazy.cohort
        members = cohort.members
        finished = [
            r for r in plan.scheduled if r.num_output_tokens >= r.output_tokens and r not in members
        ]
        cohort.clock = plan.cohort_clock + plan.cohort_advance + plan.num_steps - 1
        for member in cohort.pop_finished():
            lazy.release(member)
            finished.append(member.request)
        if finished:
            if len(finished) > 1:
                finished.sort(key=lazy.seq.__getitem__)
            for req in finished:
                req.finish_time_s = now_s
                req.num_held_slots = 0
                self.allocator.free(req.req_id)
                lazy.finished(req)
            self.running = [r for r in self.running if r.finish_time_s is None]
        for req in plan.scheduled:  # steady after step 0: join (a span's joined already)
            if req.finish_time_s is None and req not in members and lazy.is_steady(req):
                lazy.join_now(req)
        return finished

    # -- fast-forward -------------------------------------------------------------------------
    def span_arrays(self, plan: StepPlan) -> None:
        """Fill ``plan.members``, ``lengths0``, ``final``, ``held0`` and ``num_seqs``."""
        members = plan.members = list(self.running)
        if plan.all_running_scheduled:  # the common case: members are the scheduled, in order
            plan.lengths0 = np.array([m.num_computed_tokens for m in members], np.int64)
            plan.lengths0 += np.array(plan.num_new_tokens, np.int64)
        else:
            new = {id(r): n for r, n in zip(plan.scheduled, plan.num_new_tokens, strict=True)}
            plan.lengths0 = np.array(
                [m.num_computed_tokens + new.get(id(m), 0) for m in members], np.int64
            )
        plan.final = np.array([m.final_kv_tokens for m in members], np.int64)
        plan.held0 = np.array([m.num_held_slots for m in members], np.int64)
        if self.has_groups:
            plan.num_seqs = np.array([m.num_seqs for m in members], np.int64)

    def growth_reserve_slots(self, plan: StepPlan) -> int:
        """Free slots every decode step of a span must leave (the profile's growth check)."""
        return 0

    def max_extension(self, plan: StepPlan, k_max: int) -> int:
        """Steps ``plan`` can cover without any event: no finish, failed growth or admission.

        Returns ``k >= 1``; when ``k > 1`` the k-th step is the first in which a request finishes
        or the last one its holdings allow.
        """
        if plan.lazy:
            return self._max_extension_lazy(plan, k_max)
        self.span_arrays(plan)
        if not plan.extendable or k_max <= 1 or not plan.members:
            return 1
        assert plan.lengths0 is not None
        assert plan.final is not None
        assert plan.held0 is not None
        remaining = int((plan.final - plan.lengths0).min())  # decodes left after step 0
        if remaining <= 0:
            return 1
        k = min(k_max, remaining + 1)
        grow = self.allocator.max_growth_steps_for(
            plan.members, plan.lengths0, plan.held0, k - 1, self.growth_reserve_slots(plan)
        )
        return self._cut_at_unsafe_fill(plan.members, plan.lengths0, 1 + grow)

    def _max_extension_lazy(self, plan: StepPlan, k_max: int) -> int:
        if not plan.extendable or k_max <= 1 or not self.running:
            return 1
        lazy = self.lazy
        assert lazy is not None
        lazy.prejoin(plan)  # every scheduled request is a member from the clock after step 0
        if lazy.others:  # a running request left out of a v0 prefill step that cannot join
            return 1
        after = plan.cohort_clock + plan.cohort_advance
        top = lazy.cohort.next_finish_clock()
        assert top is not None
        remaining = top - after  # decodes left after step 0 by the first to finish
        if remaining <= 0:
            return 1
        k = min(k_max, remaining + 1)
        k = 1 + lazy.growth_steps(after, k - 1, self.growth_reserve_slots(plan))
        cohort = lazy.cohort
        if k <= 1 or not lazy.caching or not cohort.filling:
            return k  # (only members that fill shareable blocks can meet an unsafe fill)
        filling = list(cohort.filling)
        tokens = [cohort.computed_at(m, after) for m in filling]
        return self._cut_at_unsafe_fill([m.request for m in filling], tokens, k)

    def _cut_at_unsafe_fill(
        self, requests: Sequence[Request], tokens: Sequence[int] | IntArray, k: int
    ) -> int:
        """``k`` cut so that a block which must be cached exactly when it fills fills in the
        next plan's step 0 (``Allocator.first_unsafe_fill_step``)."""
        if k <= 1:
            return k
        step = self.allocator.first_unsafe_fill_step(requests, tokens, k - 1)
        return k if step is None else min(k, step)

    def extend(self, plan: StepPlan, num_steps: int) -> None:
        """Let ``plan`` cover ``num_steps`` steps, allocating their slots now."""
        if num_steps <= 1:
            return
        if plan.lazy:
            assert self.lazy is not None
            self.lazy.extend(plan, num_steps)
            plan.num_steps = num_steps
            return
        assert plan.lengths0 is not None
        for req, length in zip(plan.members, plan.lengths0.tolist(), strict=True):
            placed = self._allocate(req, length + num_steps - 1)
            assert placed, f"fast-forward of {num_steps} steps did not fit req {req.req_id}"
        plan.num_steps = num_steps

    def span_context(self, plan: StepPlan) -> tuple[float, float]:
        """``(S, N)`` of a span: KV tokens its members hold after step 0 (each sequence's) and
        the sequences that decode in its later steps."""
        if plan.lazy:
            assert self.lazy is not None
            cohort = self.lazy.cohort
            after = plan.cohort_clock + plan.cohort_advance
            return float(cohort.sum_computed(after)), float(len(cohort))
        assert plan.lengths0 is not None
        weights = plan.num_seqs if plan.num_seqs is not None else 1
        start = float((weights * plan.lengths0).sum())
        num_seqs = float(plan.num_seqs.sum()) if plan.num_seqs is not None else len(plan.members)
        return start, float(num_seqs)

    def last_step_tokens(self, plan: StepPlan, num_steps: int) -> dict[int, int]:
        """req_id -> token states of every running request in the plan's last step."""
        if plan.lazy:
            from kvsim.span import last_step_tokens  # the accounting module imports this one

            assert self.lazy is not None
            return last_step_tokens(self.lazy, plan, num_steps)
        last = self.span_lengths(plan)[:, -1].tolist()
        return {r.req_id: n for r, n in zip(plan.members, last, strict=True)}

    def span_lengths(self, plan: StepPlan) -> IntArray:
        """Computed tokens of each member after each step of the plan: int64[n, num_steps]."""
        assert plan.lengths0 is not None, "span_arrays() must run first"
        steps = np.arange(plan.num_steps, dtype=np.int64)
        return plan.lengths0[:, None] + steps[None, :]
