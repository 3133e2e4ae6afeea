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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kvsim.allocators.base import Allocator, IntArray
from kvsim.request import Request
from kvsim.units import SimTime

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
    elif allocator.usable_is_threshold:
        need = allocator.admission_slots_needed(head[0], head[1])
        usable = free_total if free_total >= need else 0
        if usable == 0 and free_total >= need:
            blocked = 1
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
    _appends: tuple[Any, ...] = ()  # each column's bound append, in MEMORY_COLUMNS order

    def __post_init__(self) -> None:
        self._appends = tuple(self.columns[c].append for c in MEMORY_COLUMNS)

    def _append_row(
        self,
        time_s: SimTime,
        duration_s: float,
        num_steps: int,
        num_running: int,
        num_waiting: float,
        num_prefills: int,
        num_preempted: int,
        num_blocked: int,
        *categories: float,
    ) -> None:
        """One row, in ``MEMORY_COLUMNS`` order (``categories``: the eight slot columns)."""
        self._int_times = self._int_times and isinstance(time_s, int)
        a = self._appends
        a[0](time_s)
        a[1](duration_s)
        a[2](num_steps)
        a[3](num_running)
        a[4](num_waiting)
        a[5](num_prefills)
        a[6](num_preempted)
        a[7](num_blocked)
        token, reservation, internal, external, free, allocated, held, unshared = categories
        a[8](token)
        a[9](reservation)
        a[10](internal)
        a[11](external)
        a[12](free)
        a[13](allocated)
        a[14](held)
        a[15](unshared)

    def __len__(self) -> int:
        return len(self.columns["time_s"])

    def record_step(
        self,
        time_s: SimTime,
        duration_s: float,
        num_running: int,
        num_waiting: float,
        num_prefills: int,
        num_preempted: int,
        cats: tuple[int, int, int, int, int, int, int, int, int],
    ) -> None:
        """Append one step starting at ``time_s`` (``cats``: ``categorize_step``)."""
        token, reservation, internal, external, free, allocated, blocked, held, unshared = cats
        self._append_row(
            time_s,
            duration_s,
            1,
            num_running,
            num_waiting,
            num_prefills,
            num_preempted,
            blocked,
            token,
            reservation,
            internal,
            external,
            free,
            allocated,
            held,
            unshared,
        )

    def record(
        self,
        time_s: SimTime,
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
            # (x * w).sum(), numpy's pairwise sum, not a BLAS product: the same additions on
            # every machine, which the compiled core (kvsim.compiled_core) repeats
            means = [float((x * w).sum()) for x in series]
            waiting = float((np.broadcast_to(num_waiting, w.shape) * w).sum())
        self._append_row(
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

    def record_span_steps(
        self,
        time_s: SimTime,
        durations_s: list[float],
        total_s: float,
        start: tuple[int, int, int],
        steps: tuple[int, list[int], list[int], int],
        shared: tuple[int, int],
        allocator: Allocator,
        head: tuple[Request, int] | None,
        num_running: int,
        num_waiting: int | list[float],
        num_prefills: int,
        num_preempted: int,
    ) -> None:
        """``record`` of a short span (``k > 1``) from its slot totals, in plain Python.

        Args:
            durations_s: the steps' durations; ``total_s`` is numpy's sum of them.
            start: ``(held, token states, internal)`` sums in step 0 (each request's physical
                slots), before the cross-request shared-slot correction.
            steps: ``(slots_per_block, blocks, internal, num_seqs)``: step ``j >= 1`` adds
                ``slots_per_block * blocks[j]`` held slots, ``internal[j]`` internal slots and
                ``num_seqs`` token states (index 0 unused; ``kvsim.scheduler.plan.LazySpan``).
            shared: ``(across requests, within requests)``: slots counted by more than one
                request (``Allocator.shared_slots``), subtracted from held and token states,
                and slots a sequence group's sequences share (``DecodeCohort.sum_shared``);
                ``unshared`` is held with neither subtracted.
            allocator, head: as ``categorize_step``, whose categories each step gets.

        Each mean adds value x weight left to right in one pass over the steps (numpy's matrix
        product in ``record`` may add them in another order: the last bits can differ).
        """
        k = len(durations_s)
        weights = [d / total_s for d in durations_s] if total_s > 0 else [1 / k] * k
        capacity = allocator.capacity_tokens
        overhead = allocator.overhead_slots
        held_phys, token0, internal = start
        across, within = shared
        slots_per_block, blocks, internal_steps, num_members = steps
        need = allocator.admission_slots_needed(*head) if head is not None else 0
        threshold = head is not None and allocator.usable_is_threshold
        token_m = reservation_m = internal_m = external_m = free_m = allocated_m = 0.0
        held_m = unshared_m = 0.0
        num_blocked = 0
        for j, w in enumerate(weights):
            if j:
                held_phys += slots_per_block * blocks[j]
                internal += internal_steps[j]
            held = held_phys - across
            unshared = held_phys + within
            token = token0 + num_members * j - across
            free_total = capacity - held - overhead
            usable = free_total
            if threshold:
                if free_total < need:
                    usable = 0
                elif free_total == 0:
                    num_blocked += 1  # (usable 0 with the need met, as below)
            elif head is not None:
                usable = allocator.usable_free_slots_now(head[0], head[1], free_total)
                if usable == 0 and free_total >= need:
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
        self._append_row(
            time_s,
            total_s,
            k,
            num_running,
            waiting,
            num_prefills,
            num_preempted,
            num_blocked,
            token_m,
            reservation_m,
            internal_m,
            external_m,
            free_m,
            allocated_m,
            held_m,
            unshared_m,
        )

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
