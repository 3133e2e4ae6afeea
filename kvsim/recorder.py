"""Where every KV slot goes, step by step: the DESIGN.md categories, recorded per engine event.

For a live request holding ``R`` slots with ``L`` token states and final KV length ``F`` (the
``prompt + output - 1`` tokens it ever computes, ``Request.final_kv_tokens``): token states ``L``,
reservation ``min(R, F) - L``, internal fragmentation ``max(0, R - F)``. ``L`` counts the tokens
a step computes from that step on (their slots are written during it).
Sequence groups and shared prefixes go through ``Allocator.span_slots``: shared physical slots
count once, and ``unshared`` records what the same sequences would hold without sharing.
Free slots that cannot serve the request at the head of the queue are external fragmentation
(holes too small, or too few in total: the paper's "external fragmentation & other"), as are
slots taken from the pool but owned by no reservation (buddy rounding, a paged pool's remainder).
The rest are free. The five categories sum to ``capacity_slots`` in every step.

One row is recorded per engine event (a step, or a fast-forwarded span of decode steps); its
category columns are means over the span's steps weighted by step duration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from kvsim.allocators.base import Allocator, IntArray
from kvsim.request import Request

FloatArray = npt.NDArray[np.float64]

MEMORY_COLUMNS = (
    "time_s",
    "duration_s",
    "num_steps",
    "num_requests_running",
    "num_requests_waiting",
    "num_prefills",
    "num_preempted",
    "num_blocked_steps",
    "token_states",
    "reservation",
    "internal_fragmentation",
    "external_fragmentation",
    "free",
    "allocated",
    "held",
    "unshared",
)
CATEGORIES = (
    "token_states",
    "reservation",
    "internal_fragmentation",
    "external_fragmentation",
    "free",
)


@dataclass(slots=True)
class SpanCategories:
    """Per-step slot counts of one span, each int64[k]."""

    token_states: IntArray
    reservation: IntArray
    internal_fragmentation: IntArray
    external_fragmentation: IntArray
    free: IntArray
    allocated: IntArray
    blocked: npt.NDArray[np.bool_]
    held: IntArray
    unshared: IntArray

    def total(self) -> IntArray:
        return (
            self.token_states
            + self.reservation
            + self.internal_fragmentation
            + self.external_fragmentation
            + self.free
        )


def span_categories(
    allocator: Allocator,
    requests: Sequence[Request],
    lengths: IntArray,
    final: IntArray,
    held_now: IntArray,
    head: tuple[Request, int] | None,
) -> SpanCategories:
    """Categorise every slot of the pool in each step of a span.

    Args:
        allocator: the pool, already holding the slots of the whole span.
        requests: the ``n`` running requests (sequence groups count ``num_seqs`` sequences).
        lengths: int64[n, k] tokens of each request's sequences in each of ``k`` steps.
        final: int64[n] the KV tokens each sequence ends with (``Request.final_kv_tokens``).
        held_now: int64[n] slots each holds in the span's first step.
        head: the waiting head and the tokens it needs, or ``None`` when nobody waits.

    Returns:
        ``SpanCategories`` whose fields sum to the pool's capacity in every step.
    """
    k = lengths.shape[1]
    capacity = allocator.capacity_tokens
    if len(lengths):
        slots = allocator.span_slots(requests, lengths, final, held_now)
        token, internal, held_total = slots.token_states, slots.internal, slots.held
        reservation = held_total - token - internal
        unshared = slots.unshared
    else:
        token = reservation = internal = held_total = unshared = np.zeros(k, np.int64)
    overhead = allocator.overhead_slots
    free_total = capacity - held_total - overhead
    if head is None:
        usable = free_total
        blocked = np.zeros(k, bool)
    else:
        usable = allocator.usable_free_slots_at(head[0], head[1], free_total)
        need = allocator.admission_slots_needed(head[0], head[1])
        blocked = (usable == 0) & (free_total >= need)
    return SpanCategories(
        token,
        reservation,
        internal,
        free_total - usable + overhead,
        usable,
        capacity - free_total,
        blocked,
        held_total,
        unshared,
    )


@dataclass
class MemoryRecorder:
    """Collects one row per engine event (see ``MEMORY_COLUMNS``); columns are plain lists."""

    capacity_slots: int
    rows: list[tuple[float, ...]] = field(default_factory=list)

    def record(
        self,
        time_s: float,
        durations_s: FloatArray,
        cats: SpanCategories,
        num_running: int,
        num_waiting: int | FloatArray,
        num_prefills: int,
        num_preempted: int,
    ) -> None:
        """Append the span starting at ``time_s`` with per-step ``durations_s`` (float64[k]).

        ``num_waiting`` is the queue length, or float64[k] per step when requests arrive during
        the span (its row then holds the duration-weighted mean).
        """
        series = (
            cats.token_states,
            cats.reservation,
            cats.internal_fragmentation,
            cats.external_fragmentation,
            cats.free,
            cats.allocated,
            cats.held,
            cats.unshared,
        )
        if len(durations_s) == 1:  # one step: its values are the means
            total_s = float(durations_s[0])
            means = [float(x[0]) for x in series]
            waiting = float(np.asarray(num_waiting).ravel()[0])
        else:
            total_s = float(durations_s.sum())
            w = (
                durations_s / total_s
                if total_s > 0
                else np.full(len(durations_s), 1 / len(durations_s))
            )
            means = (np.stack(series) @ w).tolist()
            waiting = float(np.dot(np.broadcast_to(num_waiting, w.shape), w))
        self.rows.append(
            (
                time_s,
                total_s,
                len(durations_s),
                num_running,
                waiting,
                num_prefills,
                num_preempted,
                int(cats.blocked.sum()),
                *means,
            )
        )
