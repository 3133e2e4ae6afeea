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


def event_slots(
    lazy: LazyDecodes, plan: StepPlan, num_steps: int, group_totals: list[int] | None = None
) -> SpanSlots:
    """The slot totals of a plan's ``num_steps`` steps (``across`` and ``overhead`` left 0:
    the allocator's, set by the caller); ``group_totals``: the members' step-0 per-kind
    totals (``LazyDecodes.step0_group_totals``) where the caller has them."""
    cohort, allocator = lazy.cohort, lazy.allocator
    after = plan.cohort_clock + plan.cohort_advance
    within = cohort.sum_shared
    span = plan.span
    if num_steps > 1 or (span is not None and span.explicit):
        # a span: every running request a member, or a speculative span's (explicit ones)
        assert span is not None, "extend() notes the span"
        assert span.explicit or not lazy.others, "a span's running requests are all members"
        if span.tokens:  # several KV cache groups: noted as extend allocated step by step
            token, slope = span.token0, span.token_slope
        else:
            token, slope = cohort.token_states(after), cohort.num_seqs
        return SpanSlots(
            span.held0,
            token,
            span.internal0,
            within=within,
            slots_per_block=lazy.period,
            blocks=span.blocks,
            internal_steps=span.internal,
            num_seqs=slope,
            token_steps=span.tokens,
            across_steps=span.across,
        )
    if cohort.groups is not None:  # (members that joined after step 0 as they were in it)
        if group_totals is None:
            group_totals = lazy.step0_group_totals(after)
        token = lazy.token_states_of(group_totals)
    else:
        token = cohort.token_states(after)
    held, internal = cohort.sum_held, cohort.internal_slots()
    if lazy.others:
        new = plan.tokens_by_request()
        for req in lazy.others:
            length = req.num_computed_tokens + new.get(req, 0)
            r_held, r_token, r_internal, r_unshared = allocator.request_slots(req, length)
            held += r_held
            token += r_token
            internal += r_internal
            within += r_unshared - r_held
    return SpanSlots(held, token, internal, within=within)


def last_step_tokens(lazy: LazyDecodes, plan: StepPlan, num_steps: int) -> dict[int, int]:
    """req_id -> token states of every running request in the span's last step (memory map)."""
    cohort = lazy.cohort
    last = plan.cohort_clock + plan.cohort_advance + num_steps - 1
    tokens = {m.request.req_id: cohort.computed_at(m, last) for m in cohort.members.values()}
    new = plan.tokens_by_request()
    for req in lazy.others:
        tokens[req.req_id] = req.num_computed_tokens + new.get(req, 0)
    return tokens
