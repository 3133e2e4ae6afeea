"""vLLM-like continuous batching: FCFS admission, per-step decode growth, recompute preemption.

Plain Python, talks only to the allocator contract. Each call to ``schedule`` plans one engine step:

1. every running request (oldest first) gets a slot for the token it decodes this step; when the
   allocator refuses, the most recently admitted request is preempted (its KV freed, it goes back
   to the front of the queue and later re-prefills prompt + generated tokens);
2. if nobody was preempted, waiting requests are admitted in arrival order while the head fits:
   running sequences ``< max_num_seqs`` (a sequence group of ``n`` samples or ``k`` beams counts
   ``n``/``k`` and is admitted, grown and preempted as a unit, see ``kvsim.groups``), the step's
   tokens <= ``max_num_batched_tokens`` and the allocator
   can place the head's prefill (prompt + tokens generated before a preemption, + the sampled
   token). The first head that does not fit stops admission (FCFS head-of-line semantics).

Swap preemption (``preemption_mode = "swap"``) lives in ``kvsim.swap``; the three places that call
it are marked ``# [swap]``: the victim's KV goes to the CPU pool instead of being dropped, swapped
requests come back before anyone is admitted, and nobody is admitted while any is swapped out.

A decode-only plan may be fast-forwarded ``k`` steps at once (``extend``): up to the first finish
and as far as every request can grow without a new allocation failing.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from kvsim.allocators.base import Allocator, IntArray
from kvsim.config import SchedulerConfig
from kvsim.request import Request
from kvsim.swap import SwapSpace


class PreemptionLivelockError(RuntimeError):
    """A request was preempted more often than ``max_preemptions_per_request``."""


@dataclass(slots=True)
class StepPlan:
    """What one (possibly fast-forwarded) engine step runs.

    Attributes:
        prefills: requests admitted this step; each computes ``num_prefill_tokens`` tokens.
        decodes: running requests decoding one token per step, in admission order.
        prefill_tokens: tokens computed by each prefill (aligned with ``prefills``).
        num_steps: consecutive decode steps this plan covers (1 when there are prefills).
        num_preempted: requests preempted while planning it.
        stopped_by_token_budget: admission stopped because the head's prefill did not fit the
            step's token budget (it may fit the next step, so the plan must not be extended).
        lengths0, final, held0: int64[n] arrays over ``decodes + prefills``, filled by
            ``plan_arrays``: token states before step 0 (prefills: the tokens they compute),
            true final lengths, and slots held in step 0.
        swap_blocks: KV blocks moved over PCIe by this plan (swapped out plus swapped in).
        members: ``decodes + prefills`` (the rows of the arrays), filled by ``plan_arrays``.
        num_seqs: int64[n] sequences of each member, or ``None`` when all are single sequences.
    """

    prefills: list[Request] = field(default_factory=list)
    decodes: list[Request] = field(default_factory=list)
    prefill_tokens: list[int] = field(default_factory=list)
    num_steps: int = 1
    num_preempted: int = 0
    stopped_by_token_budget: bool = False
    lengths0: IntArray | None = None
    final: IntArray | None = None
    held0: IntArray | None = None
    swap_blocks: int = 0
    members: list[Request] = field(default_factory=list)
    num_seqs: IntArray | None = None

    @property
    def is_empty(self) -> bool:
        return not self.prefills and not self.decodes


class Scheduler:
    """FCFS continuous-batching scheduler over one allocator.

    Args:
        allocator: the KV allocation policy.
        config: ``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``, livelock guard.
        swap: the CPU swap pool when ``preemption_mode == "swap"``, else ``None`` (recompute).
    """

    def __init__(
        self, allocator: Allocator, config: SchedulerConfig, swap: SwapSpace | None = None
    ) -> None:
        self.allocator = allocator
        self.config = config
        self.token_budget = config.token_budget
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0
        self.has_groups = False  # any sequence group seen: sequences != requests from then on
        self.swap = swap

    def add_request(self, request: Request) -> None:
        """Queue an arrived request at the back of the waiting queue."""
        self.waiting.append(request)
        if request.num_seqs > 1:
            self.has_groups = True

    def has_work(self) -> bool:
        return bool(self.running or self.waiting or (self.swap and self.swap.has_swapped()))

    # -- planning ---------------------------------------------------------------------------
    def schedule(self) -> StepPlan:
        """Plan one step: grow running requests (preempting if needed), then admit FCFS."""
        plan = StepPlan()
        plan.num_preempted = self._grow_running()
        if self.swap is not None:  # [swap] swapped requests return first; none admitted meanwhile
            if plan.num_preempted == 0:
                room = self.config.max_num_seqs - len(self.running)
                swapped_in = self.swap.swap_in(self.allocator, room)
                for req in swapped_in:
                    req.num_held_slots = self.allocator.held_slots(req.req_id)
                self.running.extend(swapped_in)
            plan.swap_blocks = self.swap.take_step_blocks()
        plan.decodes = list(self.running)
        if plan.num_preempted == 0 and not (self.swap and self.swap.has_swapped()):
            self._admit(plan)
        return plan

    def _allocate(self, req: Request, num_tokens: int) -> bool:
        """Allocate through the allocator and refresh the request's cached held slots."""
        if num_tokens <= req.num_held_slots:
            return True  # hot path: no allocator call while the holding has room
        if self.allocator.allocate(req, num_tokens) is None:
            return False
        req.num_held_slots = self.allocator.held_slots(req.req_id)
        return True

    def _grow_running(self) -> int:
        preempted = 0
        i = 0
        running = self.running
        while i < len(running):
            req = running[i]
            if req.num_computed_tokens < req.num_held_slots:  # hot path: room in the holding
                i += 1
                continue
            while not self._allocate(req, req.num_computed_tokens + 1):
                victim = running.pop()
                self._preempt(victim)
                preempted += 1
                if victim is req:
                    break
            else:
                i += 1
        return preempted

    def _preempt(self, req: Request) -> None:
        swapped = self.swap is not None and self.swap.swap_out(req, self.allocator)  # [swap]
        if not swapped:  # recompute: drop the KV, re-prefill prompt + generated tokens later
            self.allocator.free(req.req_id)
            req.num_computed_tokens = 0
        req.num_held_slots = 0
        req.num_preemptions += 1
        self.num_preemptions += 1
        if req.num_preemptions > self.config.max_preemptions_per_request:
            raise PreemptionLivelockError(
                f"request {req.req_id} (prompt {req.prompt_tokens}, output {req.output_tokens} "
                f"tokens) was preempted {req.num_preemptions} times: the KV pool cannot hold the "
                "running set; lower max_num_seqs or raise the KV budget"
            )
        if not swapped:
            self.waiting.appendleft(req)

    def _admit(self, plan: StepPlan) -> None:
        # groups count every sequence (vLLM)
        num_seqs = sum([r.num_seqs for r in self.running]) if self.has_groups else len(self.running)
        budget = self.token_budget - num_seqs
        while self.waiting and num_seqs + self.waiting[0].num_seqs <= self.config.max_num_seqs:
            head = self.waiting[0]
            num_tokens = head.num_prefill_tokens
            if num_tokens > budget:
                plan.stopped_by_token_budget = True
                break
            if not self.allocator.can_allocate(head, num_tokens + 1):
                break
            placed = self._allocate(head, num_tokens + 1)
            assert placed, f"can_allocate said yes, allocate refused req {head.req_id}"
            self.waiting.popleft()
            self.running.append(head)
            plan.prefills.append(head)
            plan.prefill_tokens.append(num_tokens)
            budget -= num_tokens
            num_seqs += head.num_seqs

    def head_of_queue(self) -> tuple[Request, int] | None:
        """The waiting head and the tokens its admission must place, or ``None``."""
        if not self.waiting:
            return None
        head = self.waiting[0]
        return head, head.num_prefill_tokens + 1

    # -- fast-forward -----------------------------------------------------------------------
    def plan_arrays(self, plan: StepPlan) -> tuple[IntArray, IntArray, IntArray]:
        """Fill and return ``plan.lengths0``, ``plan.final`` and ``plan.held0`` (``StepPlan``)."""
        reqs = plan.members = plan.decodes + plan.prefills
        plan.num_seqs = np.array([r.num_seqs for r in reqs], np.int64) if self.has_groups else None
        plan.lengths0 = np.array(
            [r.num_computed_tokens for r in plan.decodes] + plan.prefill_tokens, np.int64
        )
        plan.final = np.array([r.prompt_tokens + r.output_tokens for r in reqs], np.int64)
        plan.held0 = np.array([r.num_held_slots for r in reqs], np.int64)
        return plan.lengths0, plan.final, plan.held0

    def max_extension(self, plan: StepPlan, k_max: int) -> int:
        """Steps ``plan`` can cover without any event: no finish, failed growth or preemption.

        Step 0 runs the plan's prefills and decodes; every later step decodes all of them.
        Returns ``k >= 1``; the k-th step is the first one in which some request finishes.
        """
        lengths0, final, held0 = self.plan_arrays(plan)
        if (
            plan.num_preempted
            or plan.swap_blocks
            or (plan.prefills and plan.stopped_by_token_budget)
        ):
            return 1
        # a prefill samples a token in step 0 as a decode does; each has final - (L + 1) left
        # after step 0, so the first finish ends step min(final - lengths0) - 1 (0-based)
        k = min(k_max, int((final - lengths0).min()) if len(final) else 1)
        if k <= 1:
            return 1
        return max(1, self.allocator.max_growth_steps_for(plan.members, lengths0, held0, k))

    def extend(self, plan: StepPlan, num_steps: int) -> None:
        """Let ``plan`` cover ``num_steps`` steps, allocating their slots now."""
        if num_steps <= 1:
            return
        pairs = [(r, r.num_computed_tokens) for r in plan.decodes]
        pairs += zip(plan.prefills, plan.prefill_tokens, strict=True)
        for req, before in pairs:
            num_tokens = before + num_steps
            if num_tokens > req.num_held_slots:
                placed = self._allocate(req, num_tokens)
                assert placed, f"fast-forward of {num_steps} steps did not fit req {req.req_id}"
        plan.num_steps = num_steps

    def span_lengths(self, plan: StepPlan) -> IntArray:
        """Token states of the plan's requests in each of its steps: int64[n, num_steps]."""
        assert plan.lengths0 is not None, "plan_arrays() must run first"
        steps = np.arange(1, plan.num_steps + 1, dtype=np.int64)
        return plan.lengths0[:, None] + steps[None, :]

    # -- completion -------------------------------------------------------------------------
    def complete(
        self, plan: StepPlan, now_s: float, first_step_end_s: float | None = None
    ) -> list[Request]:
        """Apply a finished plan; free and return finished requests.

        Args:
            now_s: simulated time at the end of the plan, seconds.
            first_step_end_s: end of the plan's first step (first tokens of its prefills);
                ``now_s`` when None.
        """
        k = plan.num_steps
        finished = []
        for req in plan.decodes:
            req.num_computed_tokens += k
            req.num_generated_tokens += k
            if req.num_generated_tokens >= req.output_tokens:
                finished.append(req)
        for req, n in zip(plan.prefills, plan.prefill_tokens, strict=True):
            req.num_computed_tokens = n + k
            req.num_generated_tokens += k
            if req.first_token_time_s is None:
                req.first_token_time_s = now_s if first_step_end_s is None else first_step_end_s
            if req.num_generated_tokens >= req.output_tokens:
                finished.append(req)
        if finished:
            for req in finished:
                req.finish_time_s = now_s
                req.num_held_slots = 0
                self.allocator.free(req.req_id)
            self.running = [r for r in self.running if r.finish_time_s is None]
        return finished
