"""The decode cohort: running requests in steady decode, advanced together by one clock.

A request that has computed every token it knows but the last sampled one decodes exactly one
token per step until it finishes, is preempted or needs the allocator. Instead of touching each
such request at every step, the cohort keeps them lazily: a *clock* counts the decode steps the
cohort has run, and member ``m`` has computed ``m.computed + (clock - m.sync)`` tokens and sampled
``m.output + (clock - m.sync)``. The scheduler writes these back into the ``Request`` when it
touches the member (``materialize``); in between the request's own counters are stale.

Running totals give the sums the step cost and the recorder need (computed tokens, held slots,
internal fragmentation), a heap gives the next finish, and residues give the members whose step
needs the allocator without a loop over members. A sequence group of ``w`` sequences (vLLM v0's
parallel samples) is one member of width ``w``: its sequences decode in step, each taking its own
block at a crossing, and its full prompt blocks are held once for all ``w``:

    a member's step at clock c computes token L(c) = m.computed + c - m.sync;
    under blocks of B tokens it takes a new block when L(c) % B == 0    (crossing residue
    rho = (m.sync - m.computed) mod B), and fills one when (L(c) + 1) % B == 0 (rho - 1)

*Pooled* members (a paged pool whose block ids nobody reads: no memory map, and no key
registered as their blocks fill) take their blocks in bulk: the cohort counts them by residue and
the pool hands out anonymous blocks that join a member's table only when it is materialized
(``PagedAllocator.take_pooled``/``attach_pooled``). Other members are *touched* one by one at
their residues (``touched``). Slab members (holding their whole final length) never need the
allocator; ``period == 0`` marks such a cohort.
"""

from __future__ import annotations

from heapq import heappop, heappush

from librt.vecs import vec
from mypy_extensions import i64

from kvsim.core.kv.base import DecodeGroups
from kvsim.core.scheduler.group_sums import (
    HELD,
    INTERNAL,
    O_BASE,
    O_SLOPE,
    T_BASE,
    WIDTH,
    GroupSums,
)
from kvsim.workload.request import Request


class Member:
    """One cohort member's lazy state.

    Attributes:
        request: the request.
        seq: its place in the running order (larger = admitted later).
        sync: cohort clock at which ``computed`` and ``output`` were true.
        computed: its ``num_computed_tokens`` at ``sync``.
        output: its ``num_output_tokens`` at ``sync``.
        finish_clock: clock at which it has sampled all its output tokens.
        held: slots it holds (per sequence), kept for touched members; for pooled ones the
            slots at join (their holding follows from their length).
        cross: residue (mod the period) of the clocks whose step takes it a new block.
        fills: it needs the allocator when a block fills (the block is cached then).
        pooled: its blocks come in bulk (see the module docstring).
        final_clock: pooled: clock of the step that takes its last block, when that block
            reaches past its final length (internal fragmentation starts); else ``None``.
        width: sequences of the request (a sequence group of ``w`` decodes ``w`` tokens a
            step and takes ``w`` blocks at a crossing); 1 for a plain request.
        shared: slots its sequences share (a group's full prompt blocks, held once for ``w``
            sequences: ``(w - 1) * shared prompt slots``); 0 for a plain request.
        group_slots: in a pool of several KV cache groups, its per-kind contribution to
            ``DecodeCohort.groups`` (``GroupSums.contribution``) when it joined (a pooled
            member's changes are summed by residue, not kept here); else ``None``.
        frees_from: pooled, in a pool with a sliding group: the clock of the step at which
            its window first frees a block (then every ``period`` steps); -1 otherwise.
        frees_active: that clock has been allocated.
        frees_first: pooled, in a pool with a sliding group: blocks of each sliding group its
            first step (at ``sync``) frees besides, those its prefill left outside the window
            (``DecodeCohort.schedule_first_frees``); 0 for none.
    """

    def __init__(
        self,
        request: Request,
        seq: int,
        sync: int,
        computed: int,
        output: int,
        finish_clock: int,
        held: int,
        cross: int,
        fills: bool,
        pooled: bool,
        final_clock: int | None = None,
        width: int = 1,
        shared: int = 0,
    ) -> None:
        # (a plain class, hashed by identity: mypyc compiles this __init__, a dataclass's runs
        # interpreted, about 0.5 us a member joining)
        self.request = request
        self.seq = seq
        self.sync = sync
        self.computed = computed
        self.output = output
        self.finish_clock = finish_clock
        self.held = held
        self.cross = cross
        self.fills = fills
        self.pooled = pooled
        self.final_clock = final_clock
        self.width = width
        self.shared = shared
        self.group_slots: vec[i64] | None = None
        self.frees_from = -1  # pooled, several groups: clock of its window's first free
        self.frees_active = False  # ... reached: it frees at clocks of that residue
        self.frees_first = 0  # pooled, several groups: blocks a sliding group its first step frees
        self.freed_at = -1  # the clock of an in-order pass's step whose frees it has made


class DecodeCohort:
    """Lazily advanced steady decoders (see the module docstring).

    Invariants: ``sum_base == sum(w * (m.computed - m.sync))``, ``num_seqs == sum(w)``,
    ``sum_shared == sum(m.shared)``; ``sum_held`` and ``sum_internal`` are the members' physical
    held slots (``w * held - shared``) and slots past their final lengths (``w`` times a
    sequence's) once the steps before clock ``allocated_to`` have allocated; every member's
    ``finish_clock > clock`` between events.

    In a pool of several KV cache groups (``groups``) a member takes one block per attention
    group at a crossing and frees one per sliding group where a block leaves its window; its
    slots are summed per kind of group in ``self.groups`` (``kvsim.core.scheduler.group_sums``)
    and ``sum_internal`` stays 0. A touched member is grown by the allocator (``DECODE_EXACT``);
    a pooled one's blocks are taken and freed in bulk (``group_step``), its slots' changes
    summed by residue: at a crossing each attention kind holds ``B`` more; where its window
    frees a block the sliding kind holds, and counts as token states and as outside the
    window, ``B`` fewer; from the step whose first needed token (``computed - W + 1``) reaches
    its first held position its outside-window slots grow by one a step; at the crossing that
    takes its last block each attention kind's internal fragmentation appears. A pooled member
    just prefilled still holds the blocks its prompt left outside its windows: its first step
    frees them (vLLM frees them at the request's next allocation), a one-off drop of that many
    blocks of token states, all outside the window (``schedule_first_frees``).

    Args:
        period: block size in tokens when members grow block by block; 0 when they never
            need the allocator while decoding (slabs holding their final length).
        caching: filled blocks of tokens that other requests may share
            (``Request.shared_tokens``) are registered in a prefix cache (such members need the
            allocator when a block fills).
        pooled: members that need the allocator only for new blocks take them in bulk.
        groups: the pool's KV cache groups (``Allocator.decode_groups``), or ``None``.
    """

    def __init__(
        self, period: int, caching: bool, pooled: bool, groups: DecodeGroups | None = None
    ) -> None:
        self.period = period
        self.caching = caching
        self.pooled = pooled and period > 0
        # blocks one sequence's crossing takes, and the residue (of the computed count) at
        # which a sliding window frees a block (-1: none)
        self.cross_blocks = groups.blocks_per_crossing if groups is not None else 1
        self.window_residue = groups.window_residue if groups is not None else -1
        self.frees_per_window = groups.frees_per_window if groups is not None else 0
        self.groups = GroupSums(groups.kind_counts) if groups is not None else None
        self.window_tokens = groups.window_tokens if groups is not None else 0
        self._kind_names = groups.kind_names if groups is not None else []
        self.clock = 0
        self.allocated_to = 0  # steps at clocks before this one have their blocks
        self.members: dict[Request, Member] = {}
        self.filling: dict[Member, None] = {}  # members with ``fills``, in join order
        self.sum_base = 0
        self.sum_held = 0
        self.sum_internal = 0
        self.sum_shared = 0
        self.num_seqs = 0  # sequences of all members (a group of w counts w)
        self._widths: dict[int, int] = {}  # width -> members of that width (1 always kept)
        size = max(period, 1)
        # heaps of (clock, seq, join number, member): a member that rejoins leaves a stale entry
        # that can tie with its new one on clock and seq
        self._finishes: list[tuple[int, int, int, Member]] = []
        self._finals: list[tuple[int, int, int, Member]] = []  # pooled: by final_clock
        self._num_joins = 0
        self._crossings = [0] * size  # members whose block crossing has that residue
        self._pooled_crossings = [0] * size  # of those, pooled members
        self._window_members = [0] * size  # members whose window may free a block, by residue
        # pooled members of a pool of several groups: those whose window frees blocks, by
        # residue; heaps of (clock, seq, join number, member) of where a window first frees
        # a block and where the outside-window slots start growing
        self._pooled_frees = [0] * size
        self._freeing: list[dict[Member, None]] = [{} for _ in range(size)]
        self._window_starts: list[tuple[int, int, int, Member]] = []
        self._activations: list[tuple[int, int, int, Member]] = []
        self._all: list[dict[Member, None]] = [{} for _ in range(size)]  # by crossing residue
        self._touch: list[dict[Member, None]] = [{} for _ in range(size)]  # touched one by one
        self._num_touched = 0  # members touched one by one (not pooled)
        # pooled members whose first step frees what their prefill left outside their windows,
        # by the clock of that step (``Member.frees_first``; a member that left is skipped)
        self._first_frees: dict[int, list[Member]] = {}

    def __len__(self) -> int:
        return len(self.members)

    # -- lazy values ------------------------------------------------------------------------
    def computed_at(self, member: Member, clock: int) -> int:
        """Tokens ``member`` has computed when the cohort clock reads ``clock``."""
        return member.computed + clock - member.sync

    def sum_computed(self, clock: int) -> int:
        """Computed tokens of all members' sequences at ``clock`` (each sequence its own)."""
        return self.sum_base + self.num_seqs * clock

    def widest(self) -> int:
        """Sequences of the widest member (1 when empty)."""
        return max(self._widths) if self._widths else 1

    def held_now(self, member: Member) -> int:
        """Slots ``member`` holds once the steps before ``allocated_to`` have allocated."""
        if not member.pooled:
            return member.held
        b = self.period
        return -(self.computed_at(member, self.allocated_to) // -b) * b

    def materialize(self, member: Member) -> None:
        """Write the member's counters at the current clock into its request."""
        self.materialize_at(member, self.clock)

    def materialize_at(self, member: Member, clock: int) -> None:
        """Write the member's counters at ``clock`` into its request."""
        req, d = member.request, clock - member.sync
        req.num_computed_tokens = member.computed + d
        req.num_output_tokens = member.output + d

    # -- membership -------------------------------------------------------------------------
    def join(
        self,
        req: Request,
        seq: int,
        sync: int,
        computed: int,
        output: int,
        shared: int = 0,
        may_pool: bool = True,
    ) -> Member:
        """Add a steady decoder whose counters are ``computed``/``output`` at clock ``sync``
        and which holds ``req.num_held_slots`` slots per sequence (``shared`` of them held once
        by all its sequences: ``Member.shared``); ``may_pool``: its blocks may be taken in
        bulk as far as the pool is concerned."""
        held, final, width = req.num_held_slots, req.final_kv_tokens, req.num_seqs
        p = self.period
        cross = (sync - computed) % p if p else 0
        # (a paged pool keys a block past the tokens others may share when its request is
        # preempted; a pool of several groups keys every block of a sharing stream as it fills,
        # as a window may free it before then)
        fills = (
            self.caching
            and req.shares_tokens
            and (self.groups is not None or req.shared_tokens > computed)
        )
        joins = self._num_joins = self._num_joins + 1
        member = Member(
            req,
            seq,
            sync,
            computed,
            output,
            sync + req.output_tokens - output,
            held,
            cross,
            fills,
            self.pooled and may_pool and not fills and width == 1,
            None,
            width,
            shared,
        )
        if p:
            self._crossings[cross] += width * self.cross_blocks
            self._all[cross][member] = None
            if self.window_residue >= 0:
                self._window_members[(cross + self.window_residue) % p] += 1
            if member.pooled:
                self._pooled_crossings[cross] += 1
                last_block = -(final // -p) - 1  # index of the block holding token F - 1
                size = held if self.groups is None else -(computed // -p) * p  # (a group's)
                if size <= final and final % p and last_block * p >= computed:
                    member.final_clock = sync + last_block * p - computed
                    heappush(self._finals, (member.final_clock, seq, joins, member))
            else:
                self._num_touched += 1
                self._touch[cross][member] = None
                fill = (cross - 1) % p
                if fills and fill != cross:
                    self._touch[fill][member] = None
                if self.window_residue >= 0:
                    self._touch[(cross + self.window_residue) % p][member] = None
        self.members[req] = member
        if fills:
            self.filling[member] = None
        self.sum_base += width * (computed - sync)
        self.sum_held += width * held - shared
        if self.groups is None:
            self.sum_internal += width * max(held - final, 0)
        self.sum_shared += shared
        self.num_seqs += width
        self._widths[width] = self._widths.get(width, 0) + 1
        heappush(self._finishes, (member.finish_clock, seq, joins, member))
        return member

    def leave(
        self, member: Member, held: int | None = None, group_slots: vec[i64] | None = None
    ) -> int:
        """Remove a member (its heap entries go stale and are skipped); return its held slots.
        A pooled member of a pool of several groups is given its held slots and its
        contribution now (``GroupSums.contribution``), from the allocator."""
        if held is None:
            held = self.held_now(member)
        final = member.request.final_kv_tokens
        width = member.width
        del self.members[member.request]
        self.filling.pop(member, None)
        self.sum_base -= width * (member.computed - member.sync)
        self.sum_held -= width * held - member.shared
        if self.groups is None:
            self.sum_internal -= width * max(held - final, 0)
        elif group_slots is not None:
            self.groups.add(group_slots, -1)
        elif member.group_slots is not None:
            self.groups.add(member.group_slots, -1)
        self.sum_shared -= member.shared
        self.num_seqs -= width
        left = self._widths[width] - 1
        if left:
            self._widths[width] = left
        else:
            del self._widths[width]
        p = self.period
        if p:
            cross = member.cross
            self._crossings[cross] -= width * self.cross_blocks
            del self._all[cross][member]
            if self.window_residue >= 0:
                self._window_members[(cross + self.window_residue) % p] -= 1
            if member.pooled:
                self._pooled_crossings[cross] -= 1
                if member.frees_active:
                    self._pooled_frees[member.frees_from % p] -= 1
                    del self._freeing[member.frees_from % p][member]
            else:
                self._num_touched -= 1
                self._touch[cross].pop(member, None)
                self._touch[(cross - 1) % p].pop(member, None)
                if self.window_residue >= 0:
                    self._touch[(cross + self.window_residue) % p].pop(member, None)
        return held

    def schedule_window(self, member: Member, first_live: int) -> None:
        """Note where a pooled member's sliding window starts to matter, its groups' first live
        block being ``first_live`` (``Allocator.detach_pooled``; -1: no sliding group): its
        outside-window slots grow from the step that computes token ``first_live * B + W - 1``
        (its first needed token then reaches its first held position) and its window frees a
        block at every ``B``-th step from the one after (``sliding_skipped_blocks``)."""
        if first_live < 0:
            return
        p = self.period
        start = member.sync + first_live * p + self.window_tokens - 1 - member.computed
        member.frees_from = start + p
        assert member.frees_from > member.sync, f"req {member.request.req_id}: a free pending"
        key = (member.seq, self._num_joins, member)
        # (before: its join's contribution grows already, as it does when its first step frees
        # what left its window: its first needed token had passed its first held block)
        if start >= member.sync and not member.frees_first:
            heappush(self._activations, (start, *key))
        heappush(self._window_starts, (member.frees_from, *key))

    def schedule_first_frees(self, member: Member, blocks: int) -> None:
        """A pooled member's first step (at its ``sync``) frees ``blocks`` blocks of each
        sliding group besides what its windows free by residue: those its prefill left outside
        them (vLLM frees them at the request's next allocation, ``remove_skipped_blocks``).
        Call before ``schedule_window``, which is given its first live block after them."""
        if blocks > 0:
            member.frees_first = blocks
            self._first_frees.setdefault(member.sync, []).append(member)

    def _first_frees_at(self, clock: int) -> int:
        """Blocks of each sliding group the first steps of current members at ``clock`` free
        (``schedule_first_frees``)."""
        members, blocks = self.members, 0
        for member in self._first_frees.get(clock, ()):
            if members.get(member.request) is member:
                blocks += member.frees_first
        return blocks

    def group_step(self, clock: int) -> tuple[int, int]:
        """Count the step at ``clock`` as allocated for the pooled members of a pool of several
        groups: apply its changes to their per-kind sums (see the class docstring) and return
        ``(blocks their crossings take, blocks their windows free)``. (The caller takes and
        frees them.)"""
        groups = self.groups
        assert groups is not None, "a pool of one group"
        assert clock == self.allocated_to, f"allocating clock {clock}, expected {self.allocated_to}"
        self.allocated_to = clock + 1
        first_frees = self._first_frees
        if first_frees:  # (the clocks before: allocated, nobody asks about them again)
            for past in [c for c in first_frees if c < clock]:
                del first_frees[past]
        if not self.pooled:
            return 0, 0
        once = self._first_frees_at(clock) if first_frees else 0
        p, members = self.period, self.members
        r = clock % p
        starts = self._window_starts
        while starts and starts[0][0] <= clock:
            _, _, _, member = heappop(starts)
            if members.get(member.request) is member:
                member.frees_active = True
                self._pooled_frees[r] += 1
                self._freeing[r][member] = None
        activated = 0
        activations = self._activations
        while activations and activations[0][0] <= clock:
            if members.get(activations[0][3].request) is heappop(activations)[3]:
                activated += 1
        internal = 0
        finals = self._finals
        while finals and finals[0][0] <= clock:
            at, _, _, member = heappop(finals)
            if members.get(member.request) is member and member.final_clock == at:
                final = member.request.final_kv_tokens
                internal += -(final // -p) * p - final
        crossing = self._pooled_crossings[r]
        frees = self._pooled_frees[r] + once  # blocks of each sliding group freed
        if crossing or frees or activated or internal:
            sums = groups.sums
            for k, name in enumerate(self._kind_names):
                i = WIDTH * k
                if name == "state":
                    continue
                sums[i + HELD] += p * crossing
                sums[i + INTERNAL] += internal
                if name == "sliding":  # (a freed block's slots were token states, all outside)
                    sums[i + HELD] -= p * frees
                    sums[i + T_BASE] -= p * frees
                    sums[i + O_BASE] -= p * frees + activated * (clock + 1)
                    sums[i + O_SLOPE] += activated
            self.sum_held += p * (self.cross_blocks * crossing - self.frees_per_window * frees)
        return self.cross_blocks * crossing, self.frees_per_window * frees

    def pooled_ops_at(self, clock: int) -> list[Member]:
        """Pooled members whose step at ``clock`` takes or frees blocks (after ``group_step``
        for it), in running order."""
        r = clock % self.period if self.period else 0
        found: dict[Member, None] = {m: None for m in self._all[r] if m.pooled}
        found.update(self._freeing[r])
        members = self.members
        for member in self._first_frees.get(clock, ()):
            if members.get(member.request) is member:
                found[member] = None
        return sorted(found, key=by_seq)

    def pooled_group_ops(self, member: Member, clock: int) -> tuple[int, int]:
        """``(blocks taken, blocks freed)`` by a pooled member's step at ``clock``."""
        p = self.period
        takes = self.cross_blocks if member.cross == clock % p else 0
        frees = 0
        if member.frees_active and (clock - member.frees_from) % p == 0:
            frees = self.frees_per_window
        if clock == member.sync:
            frees += self.frees_per_window * member.frees_first
        return takes, frees

    def set_held(self, member: Member, held: int) -> None:
        """A touched member now holds ``held`` slots (after an allocation)."""
        final, width = member.request.final_kv_tokens, member.width
        self.sum_held += width * (held - member.held)
        if self.groups is None:
            self.sum_internal += width * (max(held - final, 0) - max(member.held - final, 0))
        member.held = held

    def set_group_slots(self, member: Member, values: vec[i64], clock: int) -> None:
        """A member of a pool of several groups has the per-kind slots ``values``
        (``Allocator.decode_group_slots``) in the step recorded at ``clock``."""
        groups = self.groups
        assert groups is not None, "a pool of one group"
        if member.group_slots is not None:
            groups.add(member.group_slots, -1)
        member.group_slots = GroupSums.contribution(values, clock)
        groups.add(member.group_slots)

    def token_slope(self) -> int:
        """Token states each decode step adds to ``token_states`` (between touches)."""
        if self.groups is not None:
            return self.groups.token_slope()
        return self.num_seqs

    def token_states(self, clock: int) -> int:
        """Token states of every member at ``clock`` (each group's in a pool of several;
        shared slots within a sequence group once)."""
        if self.groups is not None:
            return self.groups.pool_totals(clock)[1]
        return self.sum_computed(clock) - self.sum_shared

    def internal_slots(self) -> int:
        """Slots past the members' final lengths (every group's in a pool of several)."""
        if self.groups is not None:
            return self.groups.pool_totals(0)[2]
        return self.sum_internal

    # -- finishes ---------------------------------------------------------------------------
    def next_finish_clock(self) -> int | None:
        """Smallest ``finish_clock`` of a member, or ``None`` when empty."""
        heap = self._finishes
        while heap and self.members.get(heap[0][3].request) is not heap[0][3]:
            heappop(heap)  # the member left
        return heap[0][0] if heap else None

    def pop_finished(self) -> list[Member]:
        """Members whose ``finish_clock <= clock``, still in the cohort, in heap order."""
        out: list[Member] = []
        while (top := self.next_finish_clock()) is not None and top <= self.clock:
            out.append(heappop(self._finishes)[3])
        return out

    # -- the allocator's view ---------------------------------------------------------------
    def touched(self, first_clock: int, num_steps: int, every: bool = False) -> list[Member]:
        """Members touched one by one (``every``: all members whose step takes a block, too)
        at a clock in ``[first_clock, first_clock + num_steps)``, in running order."""
        if not self.period or num_steps <= 0 or not (every or self._num_touched):
            return []
        p = self.period
        if num_steps == 1 and not every:  # step 0: one residue
            one = self._touch[first_clock % p]
            return sorted(one, key=by_seq) if one else []
        if num_steps >= p:
            residues: range | list[int] = range(p)
        else:
            residues = [(first_clock + d) % p for d in range(num_steps)]
        found: dict[Member, None] = {}
        for r in residues:
            found.update(self._touch[r])
            if every:
                found.update(self._all[r])
        return sorted(found, key=by_seq)

    def is_touched(self, member: Member, residue: int) -> bool:
        """Whether the non-pooled ``member`` is touched one by one at clocks of ``residue``."""
        return member in self._touch[residue]

    def filling_at(self, clock: int) -> list[Member]:
        """Members whose step at ``clock`` fills a block (it computes the block's last token),
        in running order."""
        if not self.period:
            return []
        filling = self._all[(clock + 1) % self.period]
        return sorted(filling, key=by_seq) if filling else []

    def crossing_members(self, clock: int) -> list[Member]:
        """Members whose step at ``clock`` takes a block (any order)."""
        return list(self._all[clock % self.period]) if self.period else []

    def crossings_at(self, clock: int) -> int:
        """Blocks the members' step at ``clock`` takes (a group one per sequence)."""
        return self._crossings[clock % self.period] if self.period else 0

    def pooled_blocks(self, first_clock: int, num_steps: int) -> list[int]:
        """Blocks the pooled members' steps at clocks ``first_clock ...`` take, per step."""
        counts, p = self._pooled_crossings, self.period
        if num_steps == 1:
            return [counts[first_clock % p]]
        start = first_clock % p
        if start + num_steps <= p:  # no wrap: one slice
            return counts[start : start + num_steps]
        return [counts[(first_clock + d) % p] for d in range(num_steps)]

    def allocate_pooled(self, first_clock: int, num_steps: int) -> tuple[list[int], list[int]]:
        """Count the steps at clocks ``[first_clock, first_clock + num_steps)`` as allocated for
        the pooled members: return the blocks they take and the internal fragmentation they add,
        per step. (The caller takes the blocks from the pool.)"""
        assert first_clock == self.allocated_to, (
            f"allocating clock {first_clock}, expected {self.allocated_to}"
        )
        assert self.groups is None, "a pool of several groups: group_step"
        end = first_clock + num_steps
        self.allocated_to = end
        if not self.pooled:
            return [0] * num_steps, [0] * num_steps
        blocks = self.pooled_blocks(first_clock, num_steps)
        self.sum_held += self.period * sum(blocks)
        internal = [0] * num_steps
        finals, members = self._finals, self.members
        while finals and finals[0][0] < end:  # (heap order: the earliest final clock first)
            clock, _, _, member = heappop(finals)
            if members.get(member.request) is not member or member.final_clock != clock:
                continue  # it left
            final = member.request.final_kv_tokens
            jump = -(final // -self.period) * self.period - final
            internal[clock - first_clock] += jump
            self.sum_internal += jump
        return blocks, internal

    def blocks_needed(self, first_clock: int, num_steps: int) -> int:
        """Blocks all members' sequences take in the steps at clocks ``[first_clock,
        first_clock + num_steps)`` (0 for a slab cohort)."""
        p = self.period
        if not p or num_steps <= 0:
            return 0
        whole, rest = divmod(num_steps, p)
        total = self.num_seqs * self.cross_blocks * whole
        counts = self._crossings
        for d in range(rest):
            total += counts[(first_clock + d) % p]
        return total

    def max_steps_within(self, first_clock: int, max_steps: int, free_blocks: int) -> int:
        """Largest ``t <= max_steps`` whose steps from ``first_clock`` take at most
        ``free_blocks`` blocks (0 when even none fits, i.e. ``free_blocks < 0``)."""
        if free_blocks < 0:
            return 0
        n, p = self.num_seqs * self.cross_blocks, self.period
        if not p or not n or self.blocks_needed(first_clock, max_steps) <= free_blocks:
            return max_steps
        # blocks_needed grows with t: whole periods first, then the remainder step by step
        whole = min(free_blocks // n, max_steps // p)
        t, used = whole * p, whole * n
        counts = self._crossings
        while t < max_steps:
            nxt = used + counts[(first_clock + t) % p]
            if nxt > free_blocks:
                break
            used, t = nxt, t + 1
        return t

    def steps_freeing_nothing_net(self, first_clock: int, max_steps: int, slack: int = 0) -> int:
        """Largest ``t <= max_steps`` such that after each of the steps at clocks
        ``first_clock ..`` up to the ``t``-th, the blocks the members' windows may have freed
        (``frees_per_window`` a member at its window's residue, an upper bound, and at its
        first step what its prefill left outside them: ``schedule_first_frees``) exceed the
        blocks their crossings took by at most ``slack``: the pool holds at most ``slack``
        more free blocks than before them."""
        p, frees = self.period, self.frees_per_window
        if not p or not frees:
            return max_steps
        windows, crossings = self._window_members, self._crossings
        first_frees = self._first_frees
        net = 0
        for t in range(max_steps):
            r = (first_clock + t) % p
            net += frees * windows[r] - crossings[r]
            if first_frees:
                net += frees * self._first_frees_at(first_clock + t)
            if net > slack:
                return t
        return max_steps

    def check(self) -> None:
        """Assert the running totals (``debug_invariants``)."""
        members = list(self.members.values())
        base = sum(m.width * (m.computed - m.sync) for m in members)
        if self.groups is not None and any(m.pooled for m in members):
            # (pooled members' holdings are summed by residue: checked against the
            # allocator by ``group_decodes.check_groups``)
            assert self.groups.pool_totals(0)[0] == self.sum_held, "cohort group held drifted"
            assert base == self.sum_base, f"cohort base drifted: {base} != {self.sum_base}"
            assert self.num_seqs == sum(m.width for m in members), "cohort width drifted"
            self._check_members(members)
            return
        helds = [self.held_now(m) for m in members]
        held = sum(m.width * h - m.shared for h, m in zip(helds, members, strict=True))
        internal = sum(
            m.width * max(h - m.request.final_kv_tokens, 0)
            for h, m in zip(helds, members, strict=True)
        )
        if self.groups is not None:
            internal = 0  # (kept per group)
            total = GroupSums(self.groups.kind_counts)
            for m in members:
                assert m.group_slots is not None, f"req {m.request.req_id}: no group slots"
                total.add(m.group_slots)
            assert total.sums == self.groups.sums, "cohort group sums drifted"
            assert self.groups.pool_totals(0)[0] == held, "cohort group held != held"
        assert self.num_seqs == sum(m.width for m in members), "cohort width drifted"
        assert self.sum_shared == sum(m.shared for m in members), "cohort shared drifted"
        assert (base, held, internal) == (self.sum_base, self.sum_held, self.sum_internal), (
            f"cohort totals drifted: {(base, held, internal)} != "
            f"{(self.sum_base, self.sum_held, self.sum_internal)}"
        )
        self._check_members(members)

    def _check_members(self, members: list[Member]) -> None:
        for m in members:
            if not m.pooled:
                assert m.held == m.request.num_held_slots, f"req {m.request.req_id}: held drifted"
            # (a request that joins for a span may finish in the step that ends at this clock)
            assert m.finish_clock >= self.clock, f"req {m.request.req_id} should have finished"


def by_seq(member: Member) -> int:
    return member.seq
