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
category columns are means over the span's steps weighted by step duration. Rows are kept as
typed columns (8 bytes a value), so a million-request run's series stays small.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kvsim.allocators.base import Allocator, IntArray
from kvsim.request import Request

if TYPE_CHECKING:
    import pandas as pd

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
    if len(lengths):
        slots = allocator.span_slots(requests, lengths, final, held_now)
        return categorize(
            allocator, slots.held, slots.token_states, slots.internal, slots.unshared, head
        )
    zeros = np.zeros(k, np.int64)
    return categorize(allocator, zeros, zeros, zeros, zeros, head)


def categorize(
    allocator: Allocator,
    held: IntArray,
    token_states: IntArray,
    internal: IntArray,
    unshared: IntArray,
    head: tuple[Request, int] | None,
) -> SpanCategories:
    """The five categories (and the extra columns) from a span's slot totals, each int64[k]:
    held slots (shared ones once), their token states and internal fragmentation, and what
    the same sequences would hold without sharing."""
    capacity = allocator.capacity_tokens
    reservation = held - token_states - internal
    overhead = allocator.overhead_slots
    free_total = capacity - held - overhead
    if head is None:
        usable = free_total
        blocked = np.zeros(len(held), bool)
    else:
        usable = allocator.usable_free_slots_at(head[0], head[1], free_total)
        need = allocator.admission_slots_needed(head[0], head[1])
        blocked = (usable == 0) & (free_total >= need)
    return SpanCategories(
        token_states,
        reservation,
        internal,
        free_total - usable + overhead,
        usable,
        capacity - free_total,
        blocked,
        held,
        unshared,
    )


def categorize_step(
    allocator: Allocator,
    held: int,
    token_states: int,
    internal: int,
    unshared: int,
    head: tuple[Request, int] | None,
) -> tuple[int, int, int, int, int, int, int, int, int]:
    """``categorize`` of one step in plain ints: ``(token_states, reservation, internal,
    external, free, allocated, blocked (0/1), held, unshared)``."""
    capacity = allocator.capacity_tokens
    overhead = allocator.overhead_slots
    free_total = capacity - held - overhead
    blocked = 0
    if head is None:
        usable = free_total
    else:
        usable = allocator.usable_free_slots_now(head[0], head[1], free_total)
        if usable == 0 and free_total >= allocator.admission_slots_needed(head[0], head[1]):
            blocked = 1
    return (
        token_states,
        held - token_states - internal,
        internal,
        free_total - usable + overhead,
        usable,
        capacity - free_total,
        blocked,
        held,
        unshared,
    )


FLOAT_COLUMNS = frozenset(MEMORY_COLUMNS) - {
    "num_steps",
    "num_requests_running",
    "num_prefills",
    "num_preempted",
    "num_blocked_steps",
}


@dataclass
class MemoryRecorder:
    """Collects one row per engine event (see ``MEMORY_COLUMNS``) into typed columns.

    Columns are ``array`` buffers (8 bytes a value, no Python object per value): float64 for
    times, means and the waiting queue, int64 for counts.
    """

    capacity_slots: int
    columns: dict[str, array[Any]] = field(
        default_factory=lambda: {
            c: array("d" if c in FLOAT_COLUMNS else "q") for c in MEMORY_COLUMNS
        }
    )
    _int_times: bool = True  # every time_s so far was an int (SimPy starts the clock at 0)

    def __len__(self) -> int:
        return len(self.columns["time_s"])

    def record_step(
        self,
        time_s: float,
        duration_s: float,
        num_running: int,
        num_waiting: float,
        num_prefills: int,
        num_preempted: int,
        cats: tuple[int, int, int, int, int, int, int, int, int],
    ) -> None:
        """Append one step starting at ``time_s`` (``cats``: ``categorize_step``)."""
        c = self.columns
        self._int_times = self._int_times and isinstance(time_s, int)
        c["time_s"].append(time_s)
        c["duration_s"].append(duration_s)
        c["num_steps"].append(1)
        c["num_requests_running"].append(num_running)
        c["num_requests_waiting"].append(num_waiting)
        c["num_prefills"].append(num_prefills)
        c["num_preempted"].append(num_preempted)
        token, reservation, internal, external, free, allocated, blocked, held, unshared = cats
        c["num_blocked_steps"].append(blocked)
        c["token_states"].append(token)
        c["reservation"].append(reservation)
        c["internal_fragmentation"].append(internal)
        c["external_fragmentation"].append(external)
        c["free"].append(free)
        c["allocated"].append(allocated)
        c["held"].append(held)
        c["unshared"].append(unshared)

    def record(
        self,
        time_s: float,
        durations_s: FloatArray,
        cats: SpanCategories,
        num_running: int,
        num_waiting: int | FloatArray | list[float],
        num_prefills: int,
        num_preempted: int,
    ) -> None:
        """Append the span starting at ``time_s`` with per-step ``durations_s`` (float64[k]).

        ``num_waiting`` is the queue length, or one count per step (float64[k] or a list) when
        requests arrive during the span (its row then holds the duration-weighted mean).
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
        c = self.columns
        self._int_times = self._int_times and isinstance(time_s, int)
        c["time_s"].append(time_s)
        c["duration_s"].append(total_s)
        c["num_steps"].append(len(durations_s))
        c["num_requests_running"].append(num_running)
        c["num_requests_waiting"].append(waiting)
        c["num_prefills"].append(num_prefills)
        c["num_preempted"].append(num_preempted)
        c["num_blocked_steps"].append(int(cats.blocked.sum()))
        for name, mean in zip(MEMORY_COLUMNS[8:], means, strict=True):
            c[name].append(mean)

    def record_span_lists(
        self,
        time_s: float,
        durations_s: list[float],
        total_s: float,
        totals: tuple[list[int], list[int], list[int]],
        shared: int,
        allocator: Allocator,
        head: tuple[Request, int] | None,
        num_running: int,
        num_waiting: int | list[float],
        num_prefills: int,
        num_preempted: int,
    ) -> None:
        """``record`` of a short span (``k > 1``) from its per-step slot totals, in plain Python.

        Args:
            durations_s: the steps' durations; ``total_s`` is numpy's sum of them.
            totals: per-sequence ``(held, token states, internal)`` sums in each step, before
                the shared-slot correction (``kvsim.span.span_lists``).
            shared: slots counted by more than one request (``Allocator.shared_slots``),
                subtracted from held and token states; ``unshared`` is held without it.
            allocator, head: as ``categorize_step``, whose categories each step gets.

        Each mean adds value x weight left to right in one pass over the steps (numpy's matrix
        product in ``record`` may add them in another order: the last bits can differ).
        """
        k = len(durations_s)
        weights = [d / total_s for d in durations_s] if total_s > 0 else [1 / k] * k
        capacity = allocator.capacity_tokens
        overhead = allocator.overhead_slots
        token_m = reservation_m = internal_m = external_m = free_m = allocated_m = 0.0
        held_m = unshared_m = 0.0
        num_blocked = 0
        for w, unshared, token, internal in zip(weights, *totals, strict=True):
            held = unshared - shared
            token -= shared
            free_total = capacity - held - overhead
            usable = free_total
            if head is not None:
                usable = allocator.usable_free_slots_now(head[0], head[1], free_total)
                if usable == 0 and free_total >= allocator.admission_slots_needed(*head):
                    num_blocked += 1
            token_m += token * w
            reservation_m += (held - token - internal) * w
            internal_m += internal * w
            external_m += (free_total - usable + overhead) * w
            free_m += usable * w
            allocated_m += (capacity - free_total) * w
            held_m += held * w
            unshared_m += unshared * w
        waiting = 0.0
        if isinstance(num_waiting, list):
            for count, w in zip(num_waiting, weights, strict=True):
                waiting += count * w
        else:
            for w in weights:
                waiting += num_waiting * w
        c = self.columns
        self._int_times = self._int_times and isinstance(time_s, int)
        c["time_s"].append(time_s)
        c["duration_s"].append(total_s)
        c["num_steps"].append(k)
        c["num_requests_running"].append(num_running)
        c["num_requests_waiting"].append(waiting)
        c["num_prefills"].append(num_prefills)
        c["num_preempted"].append(num_preempted)
        c["num_blocked_steps"].append(num_blocked)
        c["token_states"].append(token_m)
        c["reservation"].append(reservation_m)
        c["internal_fragmentation"].append(internal_m)
        c["external_fragmentation"].append(external_m)
        c["free"].append(free_m)
        c["allocated"].append(allocated_m)
        c["held"].append(held_m)
        c["unshared"].append(unshared_m)

    def appenders(self) -> tuple[Callable[[Any], None], ...]:
        """Each column's ``append``, in ``MEMORY_COLUMNS`` order (an engine that writes rows
        itself; it reports its times' type with ``note_times``)."""
        return tuple(self.columns[c].append for c in MEMORY_COLUMNS)

    def note_times(self, all_int: bool) -> None:
        """Rows appended through ``appenders`` had only int times (``all_int``) or not."""
        self._int_times = self._int_times and all_int

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The rows as numpy arrays, one per column (``MEMORY_COLUMNS``), with the dtypes
        pandas gives them. Views of the columns, not copies: the recording is over (a column
        viewed can no longer grow)."""
        data = {
            name: np.frombuffer(col, np.float64 if col.typecode == "d" else np.int64)
            for name, col in self.columns.items()
        }
        if self._int_times:  # pandas keeps a column of int times as int64
            data["time_s"] = data["time_s"].astype(np.int64)
        return data


def memory_frame(columns: Mapping[str, npt.NDArray[Any]]) -> pd.DataFrame:
    """``MemoryRecorder.arrays`` as a DataFrame that takes the arrays over without copying them
    (no rows: object columns, as pandas builds an empty table)."""
    import pandas as pd  # only when a run's tables are built

    if not len(columns["time_s"]):
        return pd.DataFrame([], columns=list(MEMORY_COLUMNS))
    return pd.DataFrame(columns, columns=list(MEMORY_COLUMNS), copy=False)
