"""Slot totals of a lazy plan's span (``kvsim.scheduler.lazy``), for the cost model and recorder.

A lazy plan keeps its running requests as cohort totals plus a few explicit ones, so the
per-step totals the recorder categorises come from running sums instead of ``[n, k]`` arrays:

    token states(j) = sum of computed tokens after step 0 + (members) * j
    held(j)         = held after step 0 + B * (blocks taken by steps 1..j)
    internal(j)     = internal after step 0 + (slots past a final length taken by steps 1..j)

Totals count each sequence's own slots; ``Allocator.shared_slots`` (prefix hits held by several
requests) is subtracted from held and token states, as ``Allocator.span_slots`` does. Values
equal what ``span_slots`` gives the same requests, so the recorded rows are the same.
"""

from __future__ import annotations

import numpy as np

from kvsim.allocators.base import IntArray
from kvsim.scheduler.lazy import LazyDecodes
from kvsim.scheduler.plan import StepPlan


def step_totals(lazy: LazyDecodes, plan: StepPlan) -> tuple[int, int, int]:
    """``(held, token states, internal)`` per-sequence sums over the running requests in a lazy
    plan's step 0 (before the shared-slot correction)."""
    cohort, allocator = lazy.cohort, lazy.allocator
    token = cohort.sum_computed(plan.cohort_clock + plan.cohort_advance)
    held, internal = cohort.sum_held, cohort.sum_internal
    if lazy.others:
        new = dict(zip(plan.scheduled, plan.num_new_tokens, strict=True))
        for req in lazy.others:
            length = req.num_computed_tokens + new.get(req, 0)
            slots = allocator.seq_held_slots(length, req.num_held_slots)
            token += length
            held += slots
            internal += max(slots - req.final_kv_tokens, 0)
    return held, token, internal


def span_series(lazy: LazyDecodes, plan: StepPlan, num_steps: int) -> tuple[IntArray, ...]:
    """``(held, token states, internal)``, each int64[num_steps], over a fast-forwarded lazy
    span (every running request a cohort member; before the shared-slot correction)."""
    assert not lazy.others, "a span's running requests are all cohort members"
    assert plan.span is not None, "extend() notes the span"
    cohort, span = lazy.cohort, plan.span
    steps = np.arange(num_steps, dtype=np.int64)
    token = cohort.sum_computed(plan.cohort_clock + plan.cohort_advance) + len(cohort) * steps
    held = span.held0 + lazy.period * np.cumsum(np.array(span.blocks, np.int64))
    internal = span.internal0 + np.cumsum(np.array(span.internal, np.int64))
    return held, token, internal


def last_step_tokens(lazy: LazyDecodes, plan: StepPlan, num_steps: int) -> dict[int, int]:
    """req_id -> token states of every running request in the span's last step (memory map)."""
    cohort = lazy.cohort
    last = plan.cohort_clock + plan.cohort_advance + num_steps - 1
    tokens = {m.request.req_id: cohort.computed_at(m, last) for m in cohort.members.values()}
    new = dict(zip(plan.scheduled, plan.num_new_tokens, strict=True))
    for req in lazy.others:
        tokens[req.req_id] = req.num_computed_tokens + new.get(req, 0)
    return tokens
