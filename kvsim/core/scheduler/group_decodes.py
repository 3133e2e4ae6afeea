"""The decode cohort in a pool of several KV cache groups (vLLM v1's hybrid KV cache manager).

A hybrid pool's steady decoders are cohort members like any other (``kvsim.core.scheduler.
running``). Their groups change at a block crossing (one block per attention group), where a
sliding window frees a block, and where a cached block fills (``DecodeGroups``): a pooled member's
blocks are then taken and freed in bulk and its slots changed by residue
(``DecodeCohort.group_step``), a touched one goes through ``allocate``. Their per-group slots are
running sums linear in the cohort's clock (``kvsim.core.scheduler.group_sums``). This module
holds what differs from a one-group pool:

- a span's later steps (``extend_groups``) are allocated step by step: the pooled members' blocks
  at each clock in bulk (or in running order where keyed blocks are freed or cached in the same
  step), the touched members through ``allocate`` in running order, and each step's net blocks,
  token-state jumps (a freed block drops its tokens), shared slots and per-kind totals are noted
  in the span;
- step 0's per-group totals (``step0_group_totals``) count a member that joined after step 0 as
  the explicit request it was in it;
- two checks against the allocator's own count of each member (``debug_invariants``; a pooled
  member's from its lengths by the allocator's rules, summed with the others' against the
  cohort's totals).
"""

from __future__ import annotations

from librt.vecs import append, vec
from mypy_extensions import i64

from kvsim.core.kv.base import Allocator
from kvsim.core.scheduler.cohort import DecodeCohort, Member, by_seq
from kvsim.core.scheduler.group_sums import WIDTH, GroupSums
from kvsim.core.scheduler.plan import LazySpan
from kvsim.workload.request import Request


def _add_slots(totals: list[int], slots: vec[i64]) -> None:
    """Add ``Allocator.decode_group_slots`` values (six a kind) into per-kind totals (four a
    kind: held, token states, outside the window, internal)."""
    for i in range(len(totals)):
        totals[i] += slots[WIDTH * (i // 4) + i % 4]


def step0_group_totals(
    cohort: DecodeCohort, allocator: Allocator, prejoined: list[Member], clock: int
) -> list[int]:
    """The members' per-kind totals in a plan's step 0, recorded at ``clock``
    (``GroupSums.kind_totals``). A member that joined after step 0 (``prejoined``) counts as the
    explicit request it was in it: its values from its first member step do not run back across
    step 0 (a prefill, a window reached, a crossing its join did not yet allocate)."""
    groups = cohort.groups
    assert groups is not None, "a pool of one group"
    totals = groups.kind_totals(clock)
    if not prejoined:
        return totals
    joined = GroupSums(groups.kind_counts)
    for member in prejoined:
        assert member.group_slots is not None
        joined.add(member.group_slots)
    extrapolated = joined.kind_totals(clock)
    for member in prejoined:  # (counters still those before step 0)
        req = member.request
        _add_slots(
            totals, allocator.decode_group_slots(req, member.computed, req.num_computed_tokens)
        )
    for i in range(len(totals)):
        totals[i] -= extrapolated[i]
    return totals


def pooled_group_step(
    cohort: DecodeCohort,
    allocator: Allocator,
    caching: bool,
    others: dict[Request, None],
    clock: int,
    touched: list[Member],
) -> list[Member]:
    """Count the step at ``clock`` as allocated for the pooled members
    (``DecodeCohort.group_step``) and return the members to handle one by one in running order:
    ``touched`` and, where it matters, the pooled ones with blocks to take or free. It matters
    with prefix caching (``caching``) when a touched member or an explicit request (``others``)
    may free a block that carries a key, or cache one, in the same step: the free queue's order
    of keyed blocks then depends on the order of the frees. Otherwise the pooled blocks are
    taken and freed at once (frees first: a step's takes fit without them, so they never reach
    the blocks freed)."""
    takes, frees = cohort.group_step(clock)
    if not takes and not frees:
        return touched
    if caching and (touched or any(r.shares_tokens or r.num_preemptions for r in others)):
        found = dict.fromkeys(touched)
        found.update(dict.fromkeys(cohort.pooled_ops_at(clock)))
        return sorted(found, key=by_seq)
    allocator.release_pooled(frees)
    allocator.take_pooled(takes)
    return touched


def extend_groups(
    cohort: DecodeCohort,
    allocator: Allocator,
    prejoined: list[Member],
    span: LazySpan,
    first: int,
    more: int,
    caching: bool,
    others: dict[Request, None],
) -> None:
    """``LazyDecodes.extend`` in a pool of several groups: the ``more`` steps from clock
    ``first`` step by step (see the module docstring), noted in ``span``; ``prejoined``: the
    members that joined after step 0; ``caching`` and ``others`` as ``pooled_group_step``
    takes them, which allocates each step's pooled members."""
    groups = cohort.groups
    assert groups is not None
    b = cohort.period
    step0 = step0_group_totals(cohort, allocator, prejoined, first)
    width = len(step0)
    rows = vec[i64](capacity=width * (more + 1))  # (every step's row: no regrowth)
    for value in step0:
        rows = append(rows, value)
    held, token, internal = groups.pool_at(rows, 0)
    span.internal0 = internal
    span.token0 = token
    span.token_slope = slope = groups.token_slope()
    span.blocks = [0] * (more + 1)
    span.internal = [0] * (more + 1)
    span.tokens = [0] * (more + 1)
    span.across = [allocator.shared_slots()]
    for j in range(1, more + 1):
        clock = first + j - 1  # step j's
        touched = cohort.touched(clock, 1)
        for member in pooled_group_step(cohort, allocator, caching, others, clock, touched):
            if member.pooled:
                takes, frees = cohort.pooled_group_ops(member, clock)
                allocator.release_pooled(frees)
                allocator.take_pooled(takes)
                continue
            req = member.request
            cohort.materialize_at(member, clock)  # (the allocator reads its window)
            num_tokens = req.num_computed_tokens + 1
            placed = allocator.allocate(req, num_tokens) is not None
            assert placed, f"req {req.req_id}: a checked allocation failed"
            req.num_held_slots = allocator.held_slots(req.req_id)
            cohort.set_held(member, req.num_held_slots)
            slots = allocator.decode_group_slots(req, num_tokens)
            cohort.set_group_slots(member, slots, clock + 1)
        rows = groups.append_totals(rows, clock + 1)
        held_j, token_j, internal_j = groups.pool_at(rows, j * width)
        span.blocks[j] = (held_j - held) // b
        span.internal[j] = internal_j - internal
        span.tokens[j] = token_j - token - slope
        held, token, internal = held_j, token_j, internal_j
        span.across.append(allocator.shared_slots())
    span.group_rows = rows


def check_step0_groups(
    cohort: DecodeCohort, allocator: Allocator, prejoined: list[Member], clock: int
) -> None:
    """Assert ``step0_group_totals`` before a plan's later steps allocate: the allocator's own
    count of every member in step 0, one that joined after it at its step-0 length."""
    groups = cohort.groups
    if groups is None:
        return
    expected = [0] * (4 * len(groups.kind_counts))
    joined = set(prejoined)
    for member in cohort.members.values():
        req = member.request
        if member in joined:
            slots = allocator.decode_group_slots(req, member.computed, req.num_computed_tokens)
        else:
            slots = allocator.decode_group_slots(req, cohort.computed_at(member, clock))
        _add_slots(expected, slots)
    got = step0_group_totals(cohort, allocator, prejoined, clock)
    assert got == expected, f"step 0 group totals {got} != {expected}"


def check_groups(cohort: DecodeCohort, allocator: Allocator, clock: int) -> None:
    """Assert each member's per-group contribution once the step at ``clock`` (an event's last)
    is allocated: at the clock after it, it equals the allocator's own count for that step."""
    groups = cohort.groups
    if groups is None:
        return
    expected_all = [0] * (4 * len(groups.kind_counts))
    pooled = 0  # blocks the pooled members hold by the rules and not in their tables
    for member in cohort.members.values():
        req = member.request
        if member.pooled:  # (its changes are summed by residue: the pool's totals below)
            length = cohort.computed_at(member, clock) + 1
            slots = allocator.decode_group_slots(req, length, length - 1)
            _add_slots(expected_all, slots)
            held = sum(n * slots[WIDTH * k] for k, n in enumerate(groups.kind_counts))
            pooled += (held - allocator.held_slots(req.req_id)) // cohort.period
            continue
        assert member.group_slots is not None, f"req {req.req_id}: no group slots"
        own = GroupSums(groups.kind_counts)
        own.add(member.group_slots)
        own_totals = own.kind_totals(clock + 1)
        for i in range(len(expected_all)):
            expected_all[i] += own_totals[i]
        if member.sync > clock:
            continue  # (joined for the steps after it)
        slots = allocator.decode_group_slots(req, cohort.computed_at(member, clock) + 1)
        expected = [0] * (4 * len(groups.kind_counts))
        _add_slots(expected, slots)
        assert own_totals == expected, f"req {req.req_id}: group slots {own_totals} != {expected}"
    got_all = groups.kind_totals(clock + 1)
    assert got_all == expected_all, f"cohort group totals {got_all} != {expected_all}"
    got = allocator.num_pooled_blocks  # (no block leaked into, or lost from, the holding)
    assert got == pooled, f"pooled holding {got} blocks, the pooled members' rules {pooled}"
