"""The running requests: a decode cohort for the steady decoders, the rest one by one.

Every running request is either a *cohort member* (``kvsim.core.scheduler.cohort``: a steady decoder
advanced by the cohort's clock, its ``Request`` counters stale until it is touched) or an
*explicit* one (``others``: a partial prefill, a request just admitted, a beam group that
branches every step, or one the allocator must see at every token). A step's running pass
handles the explicit requests one by one by the profile's rule and the members in bulk: they
each decode one token, and only those whose step needs the allocator (a block crossing that is
not pooled, a block that fills and is cached) are touched, in running order. A step the bulk
pass cannot prove free of preemptions takes every running request in turn (``in_order``): the
members stay in the cohort, each taking its block at its turn, and only those preempted leave
it (``release_unstepped``). Anything else neither can prove equal to handling every request
one by one (a token budget that runs out before a member's turn, a member whose growth the
allocator makes itself) *flushes* the cohort first (every member's counters and table written
back), so the profile's rule then sees every request; after that step the steady decoders join
again.

Running order is kept by a sequence number given when a request starts running (the order of
``SchedulerCore.running``). Allocations that register prefix-cache keys (a member filling a
cached block, a prefill of shared tokens) or that the allocator must make itself (``EXACT``
members) run in exactly that order, interleaved with the pooled members' block takes, since a key
registered before or after another request takes (evicts) a free block holding the same key ends
differently; otherwise pooled blocks are taken in bulk.

    step 0            steps 1 .. k-1 (a fast-forwarded span)
    others  -> rule   every running request decodes: explicit ones join the cohort at the
    touched -> alloc  clock after step 0; the span's blocks are taken at once (pooled) or
    cohort  -> sums   member by member in running order (touched members)
"""

from __future__ import annotations

from kvsim.core.kv.base import DECODE_EXACT, DECODE_POOLED, DECODE_POOLED_ONLY, Allocator
from kvsim.core.scheduler.cohort import DecodeCohort, Member, by_seq
from kvsim.core.scheduler.group_decodes import (
    check_groups,
    check_step0_groups,
    extend_groups,
    pooled_group_step,
    step0_group_totals,
)
from kvsim.core.scheduler.group_sums import WIDTH, GroupSums
from kvsim.core.scheduler.plan import LazySpan, StepPlan
from kvsim.workload.request import Request


class LazyDecodes:
    """The cohort, the running order and the running requests outside the cohort.

    Args:
        allocator: the pool (its ``span_layout`` is ``"blocks"`` or ``"slabs"``).
        caching: the pool caches full blocks of requests that share tokens.
        pooled: members of a blocks layout may take anonymous blocks in bulk (off when block
            ids are read during the run: the memory map).
        joins: steady decoders join the cohort (off: every running request is handled one
            by one, as a speculating request, which advances a drawn number of tokens a step).
    """

    def __init__(
        self, allocator: Allocator, caching: bool, pooled: bool, joins: bool = True
    ) -> None:
        layout = allocator.span_layout
        if layout not in ("blocks", "slabs"):
            raise ValueError(f"lazy decodes need a blocks or slabs layout, not {layout!r}")
        self.allocator = allocator
        self.blocks = layout == "blocks"
        self.period = allocator.block_size_tokens if self.blocks else 0
        # several KV cache groups: members are touched by the groups' rules (DecodeGroups)
        groups = allocator.decode_groups()
        if groups is not None:
            caching = groups.caches
        self.caching = caching
        self.joins = joins
        self.cohort = DecodeCohort(self.period, caching, pooled, groups)
        self.seq: dict[Request, int] = {}
        self._next_seq = 0
        self.others: dict[Request, None] = {}  # running, not in the cohort, in running order
        self._exact: dict[Member, None] = {}  # members the allocator grows itself
        # in a pool of several groups, members that joined after the step 0 of the plan being
        # made (``prejoin``): the recorder counts them in step 0 as explicit requests
        self.prejoined: list[Member] = []

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
            self.joins
            and req.num_output_tokens > 0
            and computed == req.num_tokens - 1
            and self.can_join(req, computed)
        )

    def can_join(self, req: Request, computed: int) -> bool:
        """Whether ``req`` with ``computed`` computed tokens (and its current holding) decodes
        without the allocator except at block boundaries."""
        if not self.joins:
            return False
        mode = self.allocator.decode_mode(req, computed)
        if not mode:
            return False
        if mode == DECODE_POOLED_ONLY and not (self.cohort.pooled and req.num_seqs == 1):
            return False  # (its first step's frees are made only for a pooled member)
        if self.cohort.groups is not None:  # (decode_mode checked every group's table)
            return True
        held = req.num_held_slots
        if self.blocks:
            b = self.period
            return held == -(computed // -b) * b
        return held >= req.final_kv_tokens

    def join_now(self, req: Request) -> None:
        """A steady decoder whose counters are true now joins the cohort."""
        self._join(req, self.cohort.clock, req.num_computed_tokens, req.num_output_tokens)
        del self.others[req]

    def _join(self, req: Request, sync: int, computed: int, output: int) -> None:
        allocator = self.allocator
        shared = allocator.group_shared_slots(req) if req.num_seqs > 1 else 0
        mode = allocator.decode_mode(req, computed)
        pool = mode >= DECODE_POOLED  # (``DECODE_POOLED_ONLY`` too: ``can_join`` checked)
        cohort = self.cohort
        member = cohort.join(req, self.seq[req], sync, computed, output, shared, pool)
        if cohort.groups is None:
            if mode == DECODE_EXACT:
                self._exact[member] = None
        elif member.pooled:  # its slots as in the step before its first (``group_step``)
            first_live, after_first = allocator.detach_pooled(req, computed)
            slots = allocator.decode_group_slots(req, computed, computed - 1)
            cohort.set_group_slots(member, slots, sync)
            cohort.schedule_first_frees(member, after_first - first_live)
            cohort.schedule_window(member, after_first)
        else:  # grown by the allocator; its first step computes token ``computed``
            self._exact[member] = None
            slots = allocator.decode_group_slots(req, computed + 1)
            cohort.set_group_slots(member, slots, sync + 1)

    def release(self, member: Member, untaken: int = 0) -> None:
        """Take ``member`` out of the cohort with true counters, holding and block table
        (``untaken``: slots its held count includes but it never took: ``release_unstepped``)."""
        cohort = self.cohort
        if member.pooled and cohort.groups is not None:  # its tables as its steps made them
            done = max(cohort.allocated_to, member.sync)  # clocks allocated
            self._leave_pooled_group(member, done, cohort.computed_at(member, done) - 1)
            return
        cohort.materialize(member)
        req = member.request
        held = cohort.leave(member) - untaken
        self._exact.pop(member, None)
        if member.pooled:
            self.allocator.attach_pooled(req.req_id, (held - member.held) // self.period)
        req.num_held_slots = held

    def release_unstepped(self, member: Member, clock: int) -> None:
        """``release`` a member before its turn in the step at ``clock`` of an ``in_order`` pass
        (it is being preempted): a pooled member whose step there takes a block was counted as
        holding it (``allocate_pooled``) but never took it."""
        period = self.period
        cohort = self.cohort
        if member.pooled and cohort.groups is not None:
            # the sums count its step at ``clock`` (``group_step``); its tables hold what it
            # took before it, less the blocks its window freed at its turn if it had one
            length = cohort.computed_at(member, clock)
            freed = member.freed_at == clock
            self._leave_pooled_group(member, clock, length if freed else length - 1, clock + 1)
        else:
            crosses = member.pooled and period > 0 and member.cross == clock % period
            self.release(member, period if crosses else 0)
        self.others[member.request] = None  # (running, explicit, until it is preempted)

    def _leave_pooled_group(
        self, member: Member, taken_to: int, lead_computed: int, counted_to: int | None = None
    ) -> None:
        """A pooled member of a pool of several groups leaves the cohort: its tables hold the
        blocks of its steps before clock ``taken_to``, less what its windows freed by
        ``lead_computed`` computed tokens (``attach_group_pooled``); the cohort's sums, which
        counted its steps before ``counted_to`` (default ``taken_to``), lose what they
        counted."""
        cohort, allocator, req = self.cohort, self.allocator, member.request
        groups = cohort.groups
        assert groups is not None, "a pool of one group"
        cohort.materialize(member)
        if counted_to is None:
            counted_to = taken_to
        counted_length = cohort.computed_at(member, counted_to)
        counted = allocator.decode_group_slots(req, counted_length, counted_length - 1)
        allocator.attach_group_pooled(req, cohort.computed_at(member, taken_to), lead_computed)
        held = sum(n * counted[WIDTH * k] for k, n in enumerate(groups.kind_counts))
        cohort.leave(member, held, GroupSums.contribution(counted, counted_to))
        req.num_held_slots = allocator.held_slots(req.req_id)

    def member_fits(self, member: Member, clock: int) -> bool:
        """Whether ``member``'s token in the step at ``clock`` of an ``in_order`` pass can be
        allocated now: a pooled member's block crossing needs one free block (in a pool of
        several groups, one per attention group, once its window has freed its blocks: freed
        now, before anyone is preempted, as vLLM frees them first), a touched one asks the
        allocator; any other step takes nothing."""
        if not self.steps_at(member, clock):
            return True
        if member.pooled and self.cohort.groups is not None:
            takes, frees = self.cohort.pooled_group_ops(member, clock)
            if frees and member.freed_at != clock:
                self.allocator.release_pooled(frees)
                member.freed_at = clock
            return self.allocator.num_free_tokens >= takes * self.period
        if member.pooled:
            return self.allocator.num_free_tokens >= self.period
        num_tokens = self.cohort.computed_at(member, clock) + 1
        if self.cohort.groups is not None:  # (allocated now: ``step_member``'s then takes nothing)
            self.cohort.materialize_at(member, clock)  # (the allocator reads its window)
            return self.allocator.allocate(member.request, num_tokens) is not None
        return self.allocator.can_allocate(member.request, num_tokens)

    def flush(self, running: dict[Request, None]) -> list[Member]:
        """Release every member (running order) and return them; everyone is an ``other``."""
        cohort = self.cohort
        members = sorted(cohort.members.values(), key=by_seq)
        for member in members:
            self.release(member)
        cohort.allocated_to = cohort.clock  # nobody depends on the clocks after it any more
        self.others = dict(running)
        return members

    def finished(self, req: Request) -> None:
        """Forget a request that finished."""
        self.others.pop(req, None)
        del self.seq[req]

    def preempted(self, req: Request) -> None:
        """Forget a request preempted in a one-by-one pass (never a member then)."""
        assert req not in self.cohort.members, f"req {req.req_id}: a member was preempted"
        del self.others[req]
        del self.seq[req]

    def prejoin(self, plan: StepPlan) -> None:
        """Every explicitly scheduled request decodes in the span's later steps: it joins the
        cohort now, at the clock after step 0, with its counters after step 0. (A v0 prefill
        step runs only prefills: the members' clock then stays where it was.)"""
        after = plan.cohort_clock + plan.cohort_advance
        scheduled, num_new = plan.scheduled, plan.num_new_tokens
        members = self.cohort.members
        groups = self.cohort.groups is not None
        prejoined: list[Member] = []
        for i in range(len(scheduled)):  # (indexed: mypyc compiles zip(strict=) as a call)
            req = scheduled[i]
            computed = req.num_computed_tokens + num_new[i]
            assert computed == req.num_tokens, f"req {req.req_id} is still prefilling"
            self._join(req, after, computed, req.num_output_tokens + 1)
            del self.others[req]
            if groups:
                prejoined.append(members[req])
        if groups:
            self.prejoined = prejoined

    def can_join_after_step0(self, plan: StepPlan) -> bool:
        """Whether every explicitly scheduled request can join the cohort after step 0."""
        scheduled, num_new = plan.scheduled, plan.num_new_tokens
        for i in range(len(scheduled)):
            req = scheduled[i]
            if not self.can_join(req, req.num_computed_tokens + num_new[i]):
                return False
        return True

    def step0_group_totals(self, clock: int) -> list[int]:
        """``group_decodes.step0_group_totals`` of this cohort (a pool of several groups)."""
        return step0_group_totals(self.cohort, self.allocator, self.prejoined, clock)

    def token_states_of(self, totals: list[int]) -> int:
        """Token states of every group from the members' per-kind ``totals``
        (``step0_group_totals``)."""
        groups = self.cohort.groups
        assert groups is not None, "a pool of one group"
        return sum(n * totals[4 * k + 1] for k, n in enumerate(groups.kind_counts))

    def check_step0_groups(self, clock: int) -> None:
        """``group_decodes.check_step0_groups`` (``debug_invariants``)."""
        check_step0_groups(self.cohort, self.allocator, self.prejoined, clock)

    def check_groups(self, clock: int) -> None:
        """``group_decodes.check_groups`` (``debug_invariants``)."""
        check_groups(self.cohort, self.allocator, clock)

    # -- allocation -------------------------------------------------------------------------
    def step_order(self, clock: int) -> list[tuple[Request, Member | None]]:
        """The running requests a step at ``clock`` handles one by one, in running order: every
        explicit request (``None``), and the members whose step needs the allocator (pooled
        members too when their block takes must keep their place in the running order).
        The pooled members' other block takes are made here, at once."""
        cohort, allocator = self.cohort, self.allocator
        others = self.others
        touched = cohort.touched(clock, 1)
        if cohort.groups is not None:
            touched = pooled_group_step(cohort, allocator, self.caching, others, clock, touched)
            return self._merge(touched)
        registers = self._must_order(touched) or (
            self.caching and any(r.shared_tokens > r.num_computed_tokens for r in others)
        )
        if allocator.orders_pooled_takes and not registers:
            registers = any(r.shares_tokens or r.num_preemptions for r in others)
        blocks, _ = cohort.allocate_pooled(clock, 1)
        if registers and blocks[0]:  # pooled takes keep their place in the running order
            touched = cohort.touched(clock, 1, every=True)
        elif blocks[0]:
            allocator.take_pooled(blocks[0])
        return self._merge(touched)

    def _merge(self, touched: list[Member]) -> list[tuple[Request, Member | None]]:
        """The explicit requests and ``touched`` (in running order), in running order."""
        others = self.others
        if not others:
            return [(m.request, m) for m in touched]
        if not touched:
            return [(r, None) for r in others]
        seq = self.seq
        order: list[tuple[int, Request, Member | None]] = [(seq[r], r, None) for r in others]
        order += [(m.seq, m.request, m) for m in touched]
        order.sort(key=_first)
        return [(r, m) for _, r, m in order]

    def in_order(
        self, running: dict[Request, None], clock: int
    ) -> list[tuple[Request, Member | None]]:
        """Every running request of a step at ``clock`` with its member (``None`` for an
        explicit one), in running order, for a pass that checks each of them (a step that may
        preempt: ``V0Scheduler._decode_in_order``, ``V1Scheduler._run_in_order``; only when
        ``takes_turns``). The pooled members' blocks are counted now (``allocate_pooled``;
        in a pool of several groups ``group_step``) and taken (and freed) in turn
        (``member_fits``, ``step_member``, where ``steps_at`` says); a member preempted before
        its turn leaves by ``release_unstepped``."""
        if self.cohort.groups is not None:
            self.cohort.group_step(clock)
        else:
            self.cohort.allocate_pooled(clock, 1)
        members = self.cohort.members
        return [(req, members.get(req)) for req in running]

    def steps_at(self, member: Member, clock: int) -> bool:
        """Whether ``member``'s step at ``clock`` needs ``step_member`` (a block it takes or a
        block it fills)."""
        period = self.period
        if not period:
            return False
        residue = clock % period
        if member.pooled and self.cohort.groups is not None:
            return self.cohort.pooled_group_ops(member, clock) != (0, 0)
        if member.pooled:
            return member.cross == residue
        return self.cohort.is_touched(member, residue)

    def takes_turns(self) -> bool:
        """Whether an ``in_order`` pass may keep the members in the cohort: a paged pool (a
        member's step takes at most its block, checked by ``member_fits``) and no member whose
        growth the allocator makes itself (``DECODE_EXACT``), or a pool of several groups (whose
        members ``member_fits`` allocates for at their turn, as vLLM does)."""
        return (self.allocator.paged and not self._exact) or self.cohort.groups is not None

    def step_member(self, member: Member, clock: int) -> None:
        """A member's allocation in the step at ``clock`` (``step_order``): its pooled block,
        or room for the token it computes (a crossing, or a block it fills that is cached)."""
        if member.pooled and self.cohort.groups is not None:
            takes, frees = self.cohort.pooled_group_ops(member, clock)
            if member.freed_at != clock:  # (else ``member_fits`` freed them)
                self.allocator.release_pooled(frees)
            self.allocator.take_pooled(takes)
        elif member.pooled:
            self.allocator.take_pooled(1)
        else:
            self._grow([(member, self.cohort.computed_at(member, clock) + 1)], None, clock)

    def can_fast_forward(self) -> bool:
        """Whether every member the allocator grows itself may grow several tokens at once."""
        if not self._exact:
            return True
        allocator = self.allocator
        return all(allocator.can_fast_forward(m.request) for m in self._exact)

    def touched_slots_needed(self, clock: int) -> int:
        """Free slots the members' step at ``clock`` takes."""
        return self.cohort.crossings_at(clock) * self.period

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
        if cohort.groups is not None:
            extend_groups(
                cohort, allocator, self.prejoined, span, first, more, self.caching, self.others
            )
            return
        touched = cohort.touched(first, more)
        ordered = self._must_order(touched)
        blocks, internal = cohort.allocate_pooled(first, more)
        span.blocks = [0, *blocks]
        span.internal = [0, *internal]
        if ordered and any(blocks):  # member by member, in running order
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

    def _must_order(self, touched: list[Member]) -> bool:
        """Whether the touched members' allocations must keep their place in the running order
        among the pooled takes: a block cached as it fills, or the allocator's own growth."""
        if self.caching and any(m.fills for m in touched):
            return True
        exact = self._exact
        return bool(exact) and any(m in exact for m in touched)

    def _grow(self, items: list[tuple[Member, int]], span: LazySpan | None, first: int) -> None:
        """Make each touched member hold room for its token count, in the given (running)
        order; with a ``span``, note the steps (from clock ``first``) at which they take blocks.

        Members the allocator must grow itself (a cached block that fills, a sequence group,
        ``DECODE_EXACT``) go through ``allocate`` one by one; otherwise one ``grow_blocks``
        takes every block at once.
        """
        if not items:
            return
        allocator, b = self.allocator, self.period
        cohort = self.cohort
        if self._must_order([m for m, _ in items]) or any(m.width > 1 for m, _ in items):
            for member, num_tokens in items:
                req = member.request
                if cohort.groups is not None:  # the allocator reads its window's position
                    assert span is None, "a span of several groups: _extend_groups"
                    assert first == cohort.clock, "a step of several groups at another clock"
                    cohort.materialize(member)
                placed = allocator.allocate(req, num_tokens) is not None
                assert placed, f"req {req.req_id}: a checked allocation failed"
                self._held(member, allocator.held_slots(req.req_id), span, first)
                if cohort.groups is not None:
                    slots = allocator.decode_group_slots(req, num_tokens)
                    cohort.set_group_slots(member, slots, first + 1)
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
        """A touched member now holds ``held`` slots per sequence."""
        member.request.num_held_slots = held
        if held == member.held:
            return
        if span is not None:  # step j computes token length0 + j - 1: a block when it == held
            b, final, width = self.period, member.request.final_kv_tokens, member.width
            before = member.held
            step = before - self.cohort.computed_at(member, first) + 1
            while before < held:
                span.blocks[step] += width
                span.internal[step] += width * (max(before + b - final, 0) - max(before - final, 0))
                before += b
                step += b
        self.cohort.set_held(member, held)


def _first(item: tuple[int, Request, Member | None]) -> int:
    return item[0]


__all__ = ["DECODE_POOLED", "LazyDecodes"]
