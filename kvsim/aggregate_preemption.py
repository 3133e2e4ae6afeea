"""Preemption in the aggregate core (``kvsim.aggregate_core``): vLLM v1's recompute preemption
over the core's running set, a cohort of steady decoders plus the requests handled one by one.

Two paths, as ``V1Scheduler`` has (its lazy pass and, where that cannot decide, its exact pass):

- ``preempt_for_step``: where the token budget holds every running request, the exact pass
  would schedule them all in running order until one's blocks do not fit; only the requests
  taking blocks at this step (the others' chunks, the members crossing a block boundary) can
  fail, and only the victims (the last running requests) leave the cohort;
- ``exact_running``: otherwise the cohort is flushed and every running request is scheduled in
  running order, preempting from the back, as ``V1Scheduler._schedule_running`` does.

A victim's full blocks join the free queue's back tail first and its partial block the front;
under prefix caching the full ones keep their keys (``kvsim.allocators.counted_queue``, which
hears of every take and release in the order the general engine makes them).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from kvsim.allocators.counted_queue import CountedFreeQueue, ReleasedTable
from kvsim.request import Request
from kvsim.scheduler.cohort import DecodeCohort


class NotModeledError(Exception):
    """The aggregate core met a case it does not model (the message says which)."""


@dataclass(slots=True)
class RunningSet:
    """The aggregate core's running set and pool, as the exact pass needs them (the same
    containers as ``AggregateCore.run``'s locals, mutated in place)."""

    cohort: DecodeCohort
    others: dict[Request, None]
    member_seq: dict[Request, int]
    blocks_of: dict[Request, int]
    waiting: deque[Request]
    free_queue: CountedFreeQueue | None
    released: dict[Request, ReleasedTable]
    keyed_of: dict[Request, int]
    max_preemptions: int


@dataclass(slots=True)
class ExactStep:
    """What the exact pass scheduled (``V1Scheduler._schedule_running``'s plan)."""

    free: int
    budget: int
    scheduled: list[Request] = field(default_factory=list)
    new_tokens: list[int] = field(default_factory=list)
    work: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0, 0.0])
    num_prefills: int = 0
    num_preempted: int = 0
    partial: bool = False


def exact_running(pool: RunningSet, budget: int, free: int) -> ExactStep:
    """``V1Scheduler._schedule_running`` after ``_flush``: the cohort's members become others,
    then every running request in running order gets its tokens while the budget lasts, the last
    running request being preempted until a request's blocks fit (the request itself last).

    Raises:
        NotModeledError: a request is preempted more than ``max_preemptions_per_request`` times
            (``kvsim.engine`` raises its livelock error) or has nothing to compute.
    """
    cohort, blocks_of, others = pool.cohort, pool.blocks_of, pool.others
    b = cohort.period
    running = list(others)
    for member in list(cohort.members.values()):  # LazyDecodes.flush
        cohort.materialize(member)
        req = member.request
        req.num_held_slots = held = cohort.leave(member)
        blocks_of[req] = held // b
        running.append(req)
    cohort.allocate_pooled(cohort.clock, 1)  # (nobody left to allocate for: the clock moves on)
    running.sort(key=pool.member_seq.__getitem__)
    others.clear()
    others.update(dict.fromkeys(running))
    step = ExactStep(free, budget)
    work = step.work
    i = 0
    while i < len(running) and step.budget > 0:
        req = running[i]
        computed = req.num_computed_tokens
        unknown = req.prompt_tokens + req.num_output_tokens - computed
        if unknown <= 0:
            raise NotModeledError("a running request with nothing to compute")
        num_new = min(unknown, step.budget)
        extra = -((computed + num_new) // -b) - blocks_of[req]
        while extra > step.free:
            victim = running.pop()
            step.free += preempt(pool, victim)
            step.num_preempted += 1
            if victim is req:
                break
        else:
            if extra > 0:
                step.free -= extra
                if pool.free_queue is not None:
                    pool.free_queue.take(extra)
                blocks_of[req] += extra
                req.num_held_slots = blocks_of[req] * b
            step.partial = step.partial or num_new < unknown
            step.scheduled.append(req)
            step.new_tokens.append(num_new)
            if num_new != 1 or not req.num_output_tokens:
                step.num_prefills += 1
            work[0] += num_new
            work[1] += computed
            work[2] += 2 * num_new * computed + num_new * num_new
            work[3] += 1
            step.budget -= num_new
            i += 1
            continue
        break  # the request itself was preempted
    step.partial = step.partial or i < len(running)
    return step


def preempt(pool: RunningSet, req: Request) -> int:
    """``SchedulerCore._preempt_recompute`` of a running request; the blocks it frees.

    Its blocks are released tail first; under prefix caching the ones its computed tokens fill
    keep their keys and join the back, the partial one the front (``PagedAllocator.free`` with
    ``computed_tokens``)."""
    num_blocks = pool.blocks_of.pop(req)
    pool.keyed_of.pop(req, None)
    if pool.free_queue is not None:
        num_keyed = req.num_computed_tokens // pool.cohort.period
        pool.released[req] = pool.free_queue.release(num_blocks, num_keyed, num_keyed)
    req.num_computed_tokens = 0
    req.num_held_slots = 0
    req.num_preemptions += 1
    if req.num_preemptions > pool.max_preemptions:
        raise NotModeledError("a request is preempted too often (the engine's livelock error)")
    pool.others.pop(req, None)  # (a cohort member has left the cohort)
    del pool.member_seq[req]
    pool.waiting.appendleft(req)
    return num_blocks


def preempt_for_step(
    pool: RunningSet, chunks: list[tuple[Request, int]], clock: int, free: int
) -> tuple[int, int, list[tuple[Request, int]]]:
    """The exact pass's preemptions when the token budget holds every running request (so the
    pass schedules them all, in running order, until a request's blocks do not fit), without
    flushing the cohort: only the requests that take blocks at this step (the others' chunks
    and the members crossing a block boundary) can fail, and only the victims leave.

    Returns:
        The blocks the victims free, how many were preempted, and ``chunks`` without them.
    """
    cohort, blocks_of, members = pool.cohort, pool.blocks_of, pool.cohort.members
    b = cohort.period
    need_of = {m.request: 1 for m in cohort.crossing_members(clock)}
    for req, num_new in chunks:
        extra = -((req.num_computed_tokens + num_new) // -b) - blocks_of[req]
        if extra > 0:
            need_of[req] = extra
    order = sorted([*members, *pool.others], key=pool.member_seq.__getitem__)
    tail, freed, preempted = len(order), 0, set()
    for req in order:
        if req in preempted:
            break  # everyone from here on was preempted
        need = need_of.get(req, 0)
        while need > free + freed:
            tail -= 1
            victim = order[tail]
            member = members.get(victim)
            if member is not None:  # LazyDecodes.release
                cohort.materialize(member)
                blocks_of[victim] = cohort.leave(member) // b
            freed += preempt(pool, victim)
            preempted.add(victim)
            if victim is req:
                break
        else:
            free -= need
            if need and pool.free_queue is not None:  # taken now, between the releases
                pool.free_queue.take(need)
            continue
        break  # the request itself was preempted
    return freed, len(preempted), [c for c in chunks if c[0] not in preempted]
