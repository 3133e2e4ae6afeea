"""Slot totals of a plan's steps over the decode cohort, for the cost model and the recorder.

The running requests are cohort totals plus a few explicit ones (``kvsim.scheduler.lazy``), so
the per-step totals the recorder categorises come from running sums instead of per-request
arrays:

    token states(j) = computed tokens after step 0 + (sequences) * j
    held(j)         = held after step 0 + B * (blocks taken by steps 1..j)
    internal(j)     = internal after step 0 + (slots past a final length taken by steps 1..j)

Totals are physical within a request (a sequence group's shared prompt blocks once:
``DecodeCohort.sum_shared``, ``Allocator.request_slots``); ``Allocator.shared_slots`` (prefix
hits held by several requests) is subtracted from held and token states by the caller.
"""

from __future__ import annotations

import numpy as np

from kvsim.allocators.base import IntArray
from kvsim.scheduler.lazy import LazyDecodes
from kvsim.scheduler.plan import StepPlan


def step_totals(lazy: LazyDecodes, plan: StepPlan) -> tuple[int, int, int, int]:
    """``(held, token states, internal, unshared)`` sums over the running requests in a plan's
    step 0 (before the cross-request shared-slot correction)."""
    cohort, allocator = lazy.cohort, lazy.allocator
    token = cohort.sum_computed(plan.cohort_clock + plan.cohort_advance) - cohort.sum_shared
    held, internal = cohort.sum_held, cohort.sum_internal
    unshared = held + cohort.sum_shared
    if lazy.others:
        new = dict(zip(plan.scheduled, plan.num_new_tokens, strict=True))
        for req in lazy.others:
            length = req.num_computed_tokens + new.get(req, 0)
            r_held, r_token, r_internal, r_unshared = allocator.request_slots(req, length)
            held += r_held
            token += r_token
            internal += r_internal
            unshared += r_unshared
    return held, token, internal, unshared


def span_series(lazy: LazyDecodes, plan: StepPlan, num_steps: int) -> tuple[IntArray, ...]:
    """``(held, token states, internal, unshared)``, each int64[num_steps], over a
    fast-forwarded span (every running request a cohort member; before the cross-request
    shared-slot correction)."""
    assert not lazy.others, "a span's running requests are all cohort members"
    assert plan.span is not None, "extend() notes the span"
    cohort, span = lazy.cohort, plan.span
    steps = np.arange(num_steps, dtype=np.int64)
    token0 = cohort.sum_computed(plan.cohort_clock + plan.cohort_advance) - cohort.sum_shared
    token = token0 + cohort.num_seqs * steps
    held = span.held0 + lazy.period * np.cumsum(np.array(span.blocks, np.int64))
    internal = span.internal0 + np.cumsum(np.array(span.internal, np.int64))
    return held, token, internal, held + cohort.sum_shared


def last_step_tokens(lazy: LazyDecodes, plan: StepPlan, num_steps: int) -> dict[int, int]:
    """req_id -> token states of every running request in the span's last step (memory map)."""
    cohort = lazy.cohort
    last = plan.cohort_clock + plan.cohort_advance + num_steps - 1
    tokens = {m.request.req_id: cohort.computed_at(m, last) for m in cohort.members.values()}
    new = dict(zip(plan.scheduled, plan.num_new_tokens, strict=True))
    for req in lazy.others:
        tokens[req.req_id] = req.num_computed_tokens + new.get(req, 0)
    return tokens
