"""Slot totals of a plan's steps over the decode cohort, for the recorder.

The running requests are cohort totals plus a few explicit ones (``kvsim.core.scheduler.running``),
so the per-step totals the recorder categorises come from running sums instead of a pass over the
requests:

    token states(j) = computed tokens after step 0 + (sequences) * j
    held(j)         = held after step 0 + B * (blocks taken by steps 1..j)
    internal(j)     = internal after step 0 + (slots past a final length taken by steps 1..j)

Totals are physical within a request (a sequence group's shared prompt blocks once:
``DecodeCohort.sum_shared``, ``Allocator.request_slots``); slots shared across requests
(``Allocator.shared_slots``) are subtracted by the recorder.
"""

from __future__ import annotations

from kvsim.core.scheduler.plan import StepPlan
from kvsim.core.scheduler.running import LazyDecodes
from kvsim.engine.recorder import SpanSlots


def event_slots(lazy: LazyDecodes, plan: StepPlan, num_steps: int) -> SpanSlots:
    """The slot totals of a plan's ``num_steps`` steps (``across`` and ``overhead`` left 0:
    the allocator's, set by the caller)."""
    cohort, allocator = lazy.cohort, lazy.allocator
    token = cohort.sum_computed(plan.cohort_clock + plan.cohort_advance) - cohort.sum_shared
    within = cohort.sum_shared
    if num_steps > 1:  # a span: every running request is a member
        assert not lazy.others, "a span's running requests are all cohort members"
        span = plan.span
        assert span is not None, "extend() notes the span"
        return SpanSlots(
            span.held0,
            token,
            span.internal0,
            within=within,
            slots_per_block=lazy.period,
            blocks=span.blocks,
            internal_steps=span.internal,
            num_seqs=cohort.num_seqs,
        )
    held, internal = cohort.sum_held, cohort.sum_internal
    if lazy.others:
        # the scheduled requests are most often the explicit ones in running order, some left
        # out: matched in one walk; a scheduled request the walk misses (a v0 order, one that
        # joined the cohort) sends the totals to a lookup by request
        scheduled, num_new = plan.scheduled, plan.num_new_tokens
        i, n = 0, len(scheduled)
        o_held = o_token = o_internal = o_within = 0
        for req in lazy.others:
            length = req.num_computed_tokens
            if i < n and scheduled[i] is req:
                length += num_new[i]
                i += 1
            r_held, r_token, r_internal, r_unshared = allocator.request_slots(req, length)
            o_held += r_held
            o_token += r_token
            o_internal += r_internal
            o_within += r_unshared - r_held
        if i < n:
            o_held, o_token, o_internal, o_within = _others_slots(lazy, plan)
        held += o_held
        token += o_token
        internal += o_internal
        within += o_within
    return SpanSlots(held, token, internal, within=within)


def _others_slots(lazy: LazyDecodes, plan: StepPlan) -> tuple[int, int, int, int]:
    """``(held, token states, internal, unshared - held)`` of the explicit running requests,
    each at its computed tokens plus those it computes in step 0."""
    allocator = lazy.allocator
    new = dict(zip(plan.scheduled, plan.num_new_tokens, strict=True))
    held = token = internal = within = 0
    for req in lazy.others:
        length = req.num_computed_tokens + new.get(req, 0)
        r_held, r_token, r_internal, r_unshared = allocator.request_slots(req, length)
        held += r_held
        token += r_token
        internal += r_internal
        within += r_unshared - r_held
    return held, token, internal, within


def last_step_tokens(lazy: LazyDecodes, plan: StepPlan, num_steps: int) -> dict[int, int]:
    """req_id -> token states of every running request in the span's last step (memory map)."""
    cohort = lazy.cohort
    last = plan.cohort_clock + plan.cohort_advance + num_steps - 1
    tokens = {m.request.req_id: cohort.computed_at(m, last) for m in cohort.members.values()}
    new = dict(zip(plan.scheduled, plan.num_new_tokens, strict=True))
    for req in lazy.others:
        tokens[req.req_id] = req.num_computed_tokens + new.get(req, 0)
    return tokens
