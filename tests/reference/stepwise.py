"""A step-by-step reference simulator, written from vLLM's rules without any of the engine's
shortcuts: every running request is handled at every step, time advances one step at a time,
and the KV slots are audited from the allocator's block tables and slabs at every step.

It shares with the engine only the allocator (its own tests hold it against naive pools and
vLLM's tests), the step-cost function and the request records; the scheduling rules, the
fast-forward, the decode cohort and the slot accounting are written here again, plainly:

* ``vllm-v1`` (vLLM 0.34.0 ``Scheduler.schedule``): running requests first, in admission order,
  each getting the rest of what it knows capped by the budget and by
  ``long_prefill_token_threshold`` (with chunked prefill, when more than one request runs or
  waits as the step starts); a
  request that cannot get its slots preempts the last running request (recompute) until it
  can, or is itself preempted; then, unless someone was preempted, waiting requests FCFS while
  the budget lasts and fewer than ``max_num_seqs`` run, with their prefix hits, the unchunked
  rule (a prompt over the budget left stops the loop) and the full-sequence gate.
* ``vllm-v0`` (vLLM v0 ``_schedule_default``): prefills first (nothing admitted while anything
  is swapped out; the head's whole prompt must leave the watermark free, fit the step's budget
  with its cached tokens not charged and keep the running sequences under ``max_num_seqs``);
  else every running request decodes one token, preempting the last running request while
  v0's ``can_append_slot`` check or the allocation fails (a group is swapped out); then, if
  nobody was preempted, swapped requests come back one at a time.

A request samples a token when its computed tokens reach its known tokens, and finishes (its KV
freed) in the step that samples its last output token.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field

from kvsim.config import SimConfig
from kvsim.core.cost import StepCostModel
from kvsim.core.kv import Allocator
from kvsim.core.kv.base import NO_HIT
from kvsim.core.kv.paged import PagedAllocator
from kvsim.core.kv.radix import RadixAllocator
from kvsim.core.kv.slab import SlabAllocator
from kvsim.core.kv.swap import SwapSpace
from kvsim.engine.build import allocator_from_config, cost_model_from_config
from kvsim.workload.request import Request


@dataclass
class StepRow:
    """One step's record: its start and length (seconds), queue sizes, and every slot of the
    pool in one category (the DESIGN.md rule, counted from the pool itself)."""

    time_s: float
    duration_s: float
    num_running: int
    num_waiting: int
    num_prefills: int
    num_preempted: int
    blocked: int
    token_states: int
    reservation: int
    internal: int
    external: int
    free: int
    allocated: int
    held: int
    unshared: int


@dataclass
class Reference:
    """The run of one config on given requests (fresh ones: their counters are written)."""

    config: SimConfig
    requests: list[Request]
    rows: list[StepRow] = field(default_factory=list)
    num_preemptions: int = 0
    # vLLM's iteration_tokens_total, counted here step by step: tokens a step -> steps
    iteration_tokens: Counter[int] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.alloc: Allocator = allocator_from_config(self.config)
        self.swap: SwapSpace | None = None  # v0's CPU pool, for a paged pool
        if self.config.engine_args.engine == "vllm-v0" and self.alloc.paged:
            self.swap = SwapSpace.from_gib(
                self.config.engine_args.swap_space_gib,
                block_size_tokens=self.alloc.block_size_tokens,
                bytes_per_token=self.config.bytes_per_token,
            )
        self.cost: StepCostModel = cost_model_from_config(
            self.config, self.alloc.reads_block_table, self.alloc.block_size_tokens
        )
        self.args = self.config.engine_args
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []

    # -- the run ----------------------------------------------------------------------------
    def run(self) -> Reference:
        arrivals = deque(sorted(self.requests, key=lambda r: r.arrival_time_s))
        now, left = 0.0, len(self.requests)
        while left:
            while arrivals and arrivals[0].arrival_time_s <= now:
                self.waiting.append(arrivals.popleft())
            swapped = self.swap is not None and self.swap.has_swapped()
            if not (self.running or self.waiting or swapped):
                now = float(arrivals[0].arrival_time_s)
                continue
            steps, preempted, moved = self._schedule()
            if not steps and not moved:
                assert preempted, "nothing can run"
                continue  # everyone running was preempted: plan again at once
            for req, _ in steps:
                if req.first_scheduled_time_s is None:
                    req.first_scheduled_time_s = now
            duration = self.cost.step_s(*self._work(steps)) + self.cost.swap_s(moved)
            self._record(now, duration, steps, preempted)
            now += duration
            left -= len(self._complete(steps, now))
        return self

    def _schedule(self) -> tuple[list[tuple[Request, int]], int, int]:
        if self.args.engine == "vllm-v1":
            steps, preempted = self._v1()
            return steps, preempted, 0
        steps, preempted = self._v0()
        moved = self.swap.take_step_blocks() if self.swap is not None else 0
        return steps, preempted, moved

    @staticmethod
    def _work(steps: list[tuple[Request, int]]) -> tuple[float, float, float, float]:
        """Each sequence computes ``c`` tokens after ``o``: a decode ``c = 1`` after its
        ``o`` computed tokens, a prefill (chunk) ``c`` after ``o``; a group's prompt once."""
        new = context = pairs = seqs = 0
        for req, n in steps:
            w, o = req.num_seqs, req.num_computed_tokens
            if n == 1 and req.num_output_tokens:
                new, context, pairs, seqs = (
                    new + w,
                    context + w * o,
                    pairs + w * (2 * o + 1),
                    seqs + w,
                )
            else:
                c = n + (w - 1) * req.num_output_tokens
                new, context, pairs, seqs = (
                    new + c,
                    context + o,
                    pairs + 2 * c * o + c * c,
                    seqs + w,
                )
        return float(new), float(context), float(pairs), float(seqs)

    def _complete(self, steps: list[tuple[Request, int]], end_s: float) -> list[Request]:
        finished = []
        tokens = 0  # vLLM: the first outputs' prompts computed + every sequence's sampled token
        for req, n in steps:
            req.num_computed_tokens += n
            if req.num_computed_tokens >= req.num_tokens:
                req.num_output_tokens += 1
                tokens += req.num_seqs
                if req.first_token_time_s is None:
                    req.first_token_time_s = end_s
                    tokens += req.prompt_tokens - req.num_cached_tokens
            if req.num_output_tokens >= req.output_tokens:
                finished.append(req)
        if tokens:  # (a step sampling nothing has no output: vLLM makes no IterationStats)
            self.iteration_tokens[tokens] += 1
        for req in finished:
            req.finish_time_s = end_s
            self.alloc.free(req.req_id)
            self.running.remove(req)
        return finished

    # -- vllm-v1 ----------------------------------------------------------------------------
    def _v1(self) -> tuple[list[tuple[Request, int]], int]:
        args, alloc = self.args, self.alloc
        budget, threshold = args.max_num_batched_tokens, args.long_prefill_token_threshold
        if not args.enable_chunked_prefill or len(self.running) + len(self.waiting) <= 1:
            threshold = 0  # a request alone takes the whole budget
        steps: list[tuple[Request, int]] = []
        preempted = 0
        i = 0
        while i < len(self.running) and budget > 0:
            req = self.running[i]
            num_new = req.num_tokens - req.num_computed_tokens
            if 0 < threshold < num_new:
                num_new = threshold
            num_new = min(num_new, budget)
            itself = False
            while alloc.allocate(req, req.num_computed_tokens + num_new) is None:
                victim = self.running.pop()
                self._recompute(victim)
                preempted += 1
                if victim is req:
                    itself = True
                    break
            if itself:
                break
            steps.append((req, num_new))
            budget -= num_new
            i += 1
        while not preempted and self.waiting and budget > 0:
            if len(self.running) >= args.max_num_seqs:
                break
            head = self.waiting[0]
            hit = NO_HIT
            if head.num_computed_tokens == 0 and alloc.caches_prefixes:
                hit = alloc.find_cached_prefix(head)
            num_new = head.num_tokens - head.num_computed_tokens - hit.num_tokens
            if 0 < threshold < num_new:
                num_new = threshold
            if not args.enable_chunked_prefill and num_new > budget:
                break
            num_new = min(num_new, budget)
            if args.scheduler_reserve_full_isl and not alloc.can_allocate(
                head, head.num_tokens, hit
            ):
                break
            start = head.num_computed_tokens + hit.num_tokens
            if alloc.allocate(head, start + num_new, hit) is None:
                break
            self.waiting.popleft()
            self.running.append(head)
            if head.num_preemptions == 0:
                head.num_cached_tokens = hit.num_tokens
            head.num_computed_tokens = start
            steps.append((head, num_new))
            budget -= num_new
        return steps, preempted

    def _recompute(self, req: Request) -> None:
        self.alloc.free(req.req_id, req.num_computed_tokens)
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.num_preemptions += 1
        self.waiting.appendleft(req)

    # -- vllm-v0 ----------------------------------------------------------------------------
    def _v0(self) -> tuple[list[tuple[Request, int]], int]:
        args, alloc = self.args, self.alloc
        steps: list[tuple[Request, int]] = []
        if not (self.swap is not None and self.swap.has_swapped()):
            seqs = sum(r.num_seqs for r in self.running)
            used = 0
            while self.waiting:
                head = self.waiting[0]
                if not alloc.can_admit(head, head.num_tokens):
                    break
                hit = NO_HIT
                if head.num_computed_tokens == 0 and alloc.caches_prefixes:
                    hit = alloc.find_cached_prefix(head)
                charged = max(1, head.num_tokens - hit.num_tokens)
                if used + charged > args.max_num_batched_tokens:
                    break
                if seqs + head.num_seqs > args.max_num_seqs:
                    break
                placed = alloc.allocate(head, head.num_tokens, hit)
                assert placed is not None, "v0 admitted a request that does not fit"
                self.waiting.popleft()
                self.running.append(head)
                if head.num_preemptions == 0:
                    head.num_cached_tokens = hit.num_tokens
                head.num_computed_tokens = hit.num_tokens
                steps.append((head, head.num_tokens - hit.num_tokens))
                used += charged
                seqs += head.num_seqs
            if steps:
                return steps, 0
        preempted = 0
        i = 0
        while i < len(self.running):
            req = self.running[i]
            itself = False
            while not (
                alloc.can_append_v0(req)
                and alloc.allocate(req, req.num_computed_tokens + 1) is not None
            ):
                victim = self.running.pop()
                self._preempt_v0(victim)
                preempted += 1
                if victim is req:
                    itself = True
                    break
            if itself:
                break
            steps.append((req, 1))
            i += 1
        if not preempted and self.swap is not None:
            assert isinstance(alloc, PagedAllocator)
            while True:
                room = args.max_num_seqs - sum(r.num_seqs for r in self.running)
                req = self.swap.swap_in_next(alloc, room)
                if req is None:
                    break
                self.running.append(req)
                placed = alloc.allocate(req, req.num_computed_tokens + 1)
                assert placed is not None, "swapped in, but its decode does not fit"
                steps.append((req, 1))
        return steps, preempted

    def _preempt_v0(self, req: Request) -> None:
        mode = self.args.preemption_mode or ("recompute" if req.num_seqs == 1 else "swap")
        if mode == "swap" and self.swap is not None:
            assert isinstance(self.alloc, PagedAllocator)
            if self.swap.swap_out(req, self.alloc):
                req.num_preemptions += 1
                self.num_preemptions += 1
                return
        self._recompute(req)

    # -- the slots, counted from the pool ----------------------------------------------------
    def _record(
        self, now: float, duration: float, steps: list[tuple[Request, int]], preempted: int
    ) -> None:
        new = {req.req_id: n for req, n in steps}
        lengths = {r.req_id: r.num_computed_tokens + new.get(r.req_id, 0) for r in self.running}
        held, token, internal, unshared = self._audit(lengths)
        alloc = self.alloc
        capacity, overhead = alloc.capacity_tokens, alloc.overhead_slots
        free_total = capacity - held - overhead
        usable, blocked = free_total, 0
        if self.waiting:
            head = self.waiting[0]
            tokens = head.num_tokens
            if (
                self.args.engine == "vllm-v1"
                and self.args.enable_chunked_prefill
                and not self.args.scheduler_reserve_full_isl
            ):
                tokens = min(tokens, self.args.max_num_batched_tokens)
            need = alloc.admission_slots_needed(head, tokens)
            if alloc.usable_is_threshold:
                usable = free_total if free_total >= need else 0
            else:
                usable = alloc.usable_free_slots(head, tokens)
            blocked = int(usable == 0 and free_total >= need)
        self.rows.append(
            StepRow(
                now,
                duration,
                len(self.running),
                len(self.waiting),
                sum(1 for r, n in steps if not (n == 1 and r.num_output_tokens)),
                preempted,
                blocked,
                token,
                held - token - internal,
                internal,
                free_total - usable + overhead,
                usable,
                capacity - free_total,
                held,
                unshared,
            )
        )

    def _audit(self, lengths: dict[int, int]) -> tuple[int, int, int, int]:
        """``(held, token states, internal, unshared)`` slots of the running requests, each
        physical slot once, from the pool's own tables: a block (or slab, or radix token) is
        token states up to the tokens its holders computed, internal fragmentation past their
        final length, reservation in between; ``unshared`` counts every sequence's own."""
        alloc = self.alloc
        final = {r.req_id: r.final_kv_tokens for r in self.running}
        if isinstance(alloc, PagedAllocator):
            b = alloc.block_size_tokens
            blocks: dict[int, tuple[int, int]] = {}  # physical block -> (filled, past final)
            unshared = 0
            for req_id, length in lengths.items():
                tables = alloc.groups[req_id].seqs if req_id in alloc.groups else []
                if req_id in alloc.block_tables:
                    tables = [alloc.block_tables[req_id]]
                for table in tables:
                    unshared += len(table) * b
                    for i, block in enumerate(table):
                        filled = min(b, max(0, length - i * b))
                        past = max(0, (i + 1) * b - max(final[req_id], i * b))
                        blocks[block] = (filled, past)
            held = len(blocks) * b
            token = sum(f for f, _ in blocks.values())
            return held, token, sum(p for _, p in blocks.values()), unshared
        if isinstance(alloc, SlabAllocator):
            held = token = internal = 0
            for req in self.running:
                for _, size in alloc.slabs_of(req.req_id):
                    held += size
                    token += lengths[req.req_id]
                    internal += max(0, size - final[req.req_id])
            return held, token, internal, held
        assert isinstance(alloc, RadixAllocator)
        held = alloc.stats().held_slots  # every token a live request holds, shared ones once
        return held, held, 0, sum(lengths.values())
