"""Lazy decodes: the scheduler's fast path over a ``DecodeCohort`` (the engine turns it on).

With lazy decodes, a plan is *lazy* (``StepPlan.lazy``) when its step-0 work on running requests
was planned over the cohort: cohort members are in no list, only in the step's work sums, and
the requests handled one by one are the rest of the running list (``others``: partial prefills,
requests that cannot join), the members touched at this step (``DecodeCohort.touched``) and the
admitted ones. Whatever the fast path cannot prove equal to the step-by-step rules (a
preemption, a token budget that runs out before the last member's turn, sequence groups)
*flushes* the cohort (every member's counters and table written back) and runs the profile's
exact pass; after that step the steady decoders join again.

Running order is kept by a sequence number given when a request starts running (the order of
``SchedulerCore.running``). Allocations that register prefix-cache keys (a member filling a
cached block, a prefill of shared tokens) run in exactly that order, interleaved with the pooled
members' block takes, since a key registered before or after another request takes (evicts) a
free block holding the same key ends differently; otherwise pooled blocks are taken in bulk.

    step 0            steps 1 .. k-1 (a fast-forwarded span)
    others  -> exact  every running request decodes: explicit ones join the cohort at the
    touched -> alloc  clock after step 0; the span's blocks are taken at once (pooled) or
    cohort  -> sums   member by member in running order (touched members)
"""

from __future__ import annotations

from collections.abc import Callable

from kvsim.allocators.base import Allocator
from kvsim.request import Request
from kvsim.scheduler.cohort import DecodeCohort, Member
from kvsim.scheduler.plan import LazySpan, StepPlan


class LazyDecodes:
    """The cohort, the running order and the running requests outside the cohort.

    Args:
        allocator: the pool (its ``span_layout`` is ``"blocks"`` or ``"slabs"``).
        caching: the pool caches full blocks of requests that share tokens.
        pooled: members of a blocks layout may take anonymous blocks in bulk (off when block
            ids are read during the run: the memory map).
    """

    def __init__(self, allocator: Allocator, caching: bool, pooled: bool) -> None:
        layout = allocator.span_layout
        if layout not in ("blocks", "slabs"):
            raise ValueError(f"lazy decodes need a blocks or slabs layout, not {layout!r}")
        self.allocator = allocator
        self.blocks = layout == "blocks"
        self.period = allocator.block_size_tokens if self.blocks else 0
        self.caching = caching
        self.cohort = DecodeCohort(self.period, caching, pooled)
        self.seq: dict[Request, int] = {}
        self._next_seq = 0
        self.others: dict[Request, None] = {}  # running, not in the cohort, in running order

    # -- membership -------------------------------------------------------------------------
    def started(self, req: Request) -> None:
        """``req`` was appended to the running list."""
        self.seq[req] = self._next_seq
        self._next_seq += 1
        self.others[req] = None

    def is_steady(self, req: Request) -> bool:
        """Whether ``req``'s next step decodes one token (it has sampled one, and computed all
        it knows but that one) and it can join the cohort."""
        computed = req.num_computed_tokens
        return (
            req.num_output_tokens > 0
            and computed == req.num_tokens - 1
            and self.can_join(req, computed)
        )

    def can_join(self, req: Request, computed: int) -> bool:
        """Whether ``req`` with ``computed`` computed tokens (and its current holding) decodes
        without the allocator except at block boundaries."""
        if req.num_seqs != 1:
            return False
        held = req.num_held_slots
        if self.blocks:
            b = self.period
            return held == -(computed // -b) * b and self.allocator.decodes_in_place(req)
        return held >= req.final_kv_tokens

    def join_now(self, req: Request) -> None:
        """A steady decoder whose counters are true now joins the cohort."""
        cohort = self.cohort
        cohort.join(
            req, self.seq[req], cohort.clock, req.num_computed_tokens, req.num_output_tokens
        )
        del self.others[req]

    def rejoin(self, running: list[Request]) -> None:
        """After an exact step: every steady decoder that can joins; the rest are ``others``."""
        self.others = {}
        members = self.cohort.members
        for req in running:
            if req in members:
                continue
            self.others[req] = None
            if self.is_steady(req):
                self.join_now(req)

    def release(self, member: Member) -> None:
        """Take ``member`` out of the cohort with true counters, holding and block table."""
        cohort = self.cohort
        cohort.materialize(member)
        held = cohort.leave(member)
        req = member.request
        if member.pooled:
            self.allocator.attach_pooled(req.req_id, (held - member.held) // self.period)
        req.num_held_slots = held

    def flush(self, running: list[Request]) -> list[Member]:
        """Release every member (running order) and return them; everyone is an ``other``."""
        cohort = self.cohort
        members = sorted(cohort.members.values(), key=_seq_of)
        for member in members:
            self.release(member)
        cohort.allocated_to = cohort.clock  # nobody depends on the clocks after it any more
        self.others = dict.fromkeys(running)
        return members

    def finished(self, req: Request) -> None:
        """Forget a request that finished."""
        self.others.pop(req, None)
        del self.seq[req]

    def prejoin(self, plan: StepPlan) -> None:
        """Every explicitly scheduled request decodes in the span's later steps: it joins the
        cohort now, at the clock after step 0, with its counters after step 0. (A v0 prefill
        step runs only prefills: the members' clock then stays where it was.)"""
        cohort = self.cohort
        after = plan.cohort_clock + plan.cohort_advance
        for req, n in zip(plan.scheduled, plan.num_new_tokens, strict=True):
            computed = req.num_computed_tokens + n
            assert computed == req.num_tokens, f"req {req.req_id} is still prefilling"
            cohort.join(req, self.seq[req], after, computed, req.num_output_tokens + 1)
            del self.others[req]

    def can_join_after_step0(self, plan: StepPlan) -> bool:
        """Whether every explicitly scheduled request can join the cohort after step 0."""
        return all(
            self.can_join(req, req.num_computed_tokens + n)
            for req, n in zip(plan.scheduled, plan.num_new_tokens, strict=True)
        )

    # -- allocation -------------------------------------------------------------------------
    def step0(
        self,
        clock: int,
        others: list[tuple[Request, int]],
        allocate: Callable[[Request, int], None],
    ) -> None:
        """Step 0's allocations for the cohort's step at ``clock`` and for ``others`` (each with
        the total tokens it needs), in running order; ``allocate`` handles an other. Every
        allocation was checked to fit."""
        cohort, allocator = self.cohort, self.allocator
        touched = cohort.touched(clock, 1)
        registers = self.caching and (
            any(m.fills for m in touched) or any(r.shares_tokens for r, _ in others)
        )
        if allocator.orders_pooled_takes and not registers:
            registers = any(r.shares_tokens or r.num_preemptions for r, _ in others)
        blocks, _ = cohort.allocate_pooled(clock, 1)
        if registers and blocks[0]:  # pooled takes keep their place in the running order
            touched = cohort.touched(clock, 1, every=True)
        elif blocks[0]:
            allocator.take_pooled(blocks[0])
        if not others and not registers:
            self._grow([(m, cohort.computed_at(m, clock) + 1) for m in touched], None, clock)
            return
        order: list[tuple[int, Request, Member | None, int]] = [
            (self.seq[r], r, None, n) for r, n in others
        ]
        order += [(m.seq, m.request, m, cohort.computed_at(m, clock) + 1) for m in touched]
        order.sort(key=_first)
        for _, req, member, num_tokens in order:
            if member is None:
                allocate(req, num_tokens)
            elif member.pooled:
                allocator.take_pooled(1)
            else:
                self._grow([(member, num_tokens)], None, clock)

    def growth_steps(self, first_clock: int, max_steps: int, reserve_slots: int) -> int:
        """Most decode steps from ``first_clock`` (at most ``max_steps``) whose block crossings
        fit in the free pool minus ``reserve_slots`` (slabs: members hold their final length)."""
        if not self.blocks:
            return max_steps
        free = self.allocator.num_free_tokens - reserve_slots
        return self.cohort.max_steps_within(first_clock, max_steps, free // self.period)

    def extend(self, plan: StepPlan, num_steps: int) -> None:
        """Allocate the span's steps ``1..num_steps-1`` (at clocks from the one after step 0);
        note what they take per step in ``plan.span``."""
        cohort, allocator = self.cohort, self.allocator
        first = plan.cohort_clock + plan.cohort_advance
        more = num_steps - 1
        span = plan.span = LazySpan(cohort.sum_held, cohort.sum_internal)
        touched = cohort.touched(first, more)
        registers = self.caching and any(m.fills for m in touched)
        blocks, internal = cohort.allocate_pooled(first, more)
        span.blocks = [0, *blocks]
        span.internal = [0, *internal]
        if registers and any(blocks):  # member by member, in running order
            for member in cohort.touched(first, more, every=True):
                length0 = cohort.computed_at(member, first)
                if member.pooled:
                    b = self.period
                    allocator.take_pooled(-((length0 + more) // -b) - (-(length0 // -b)))
                else:
                    self._grow([(member, length0 + more)], span, first)
            return
        taken = sum(blocks)
        if taken:
            allocator.take_pooled(taken)
        if touched:
            self._grow([(m, cohort.computed_at(m, first) + more) for m in touched], span, first)

    def _grow(self, items: list[tuple[Member, int]], span: LazySpan | None, first: int) -> None:
        """Make each touched member hold room for its token count, in the given (running)
        order; with a ``span``, note the steps (from clock ``first``) at which they take blocks.

        Members that cache blocks as they fill go through ``allocate`` one by one (a block's
        key must be registered before the next member takes blocks); otherwise one
        ``grow_blocks`` takes every block at once.
        """
        if not items:
            return
        allocator, b = self.allocator, self.period
        if self.caching and any(m.fills for m, _ in items):
            for member, num_tokens in items:
                req = member.request
                placed = allocator.allocate(req, num_tokens) is not None
                assert placed, f"req {req.req_id}: a checked allocation failed"
                self._held(member, allocator.held_slots(req.req_id), span, first)
            return
        grants: list[tuple[int, int]] = []
        helds: list[tuple[Member, int]] = []
        for member, num_tokens in items:
            held = -(num_tokens // -b) * b
            if held > member.held:
                grants.append((member.request.req_id, (held - member.held) // b))
                helds.append((member, held))
        allocator.grow_blocks(grants)
        for member, held in helds:
            self._held(member, held, span, first)

    def _held(self, member: Member, held: int, span: LazySpan | None, first: int) -> None:
        """A touched member now holds ``held`` slots."""
        member.request.num_held_slots = held
        if held == member.held:
            return
        if span is not None:  # step j computes token length0 + j - 1: a block when it == held
            b, final = self.period, member.request.final_kv_tokens
            before = member.held
            step = before - self.cohort.computed_at(member, first) + 1
            while before < held:
                span.blocks[step] += 1
                span.internal[step] += max(before + b - final, 0) - max(before - final, 0)
                before += b
                step += b
        self.cohort.set_held(member, held)


def _first(item: tuple[int, Request, Member | None, int]) -> int:
    return item[0]


def _seq_of(member: Member) -> int:
    return member.seq
