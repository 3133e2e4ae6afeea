"""Where every KV slot goes, step by step: the DESIGN.md categories, recorded per engine event.

For a live request holding ``R`` slots with ``L`` token states and final KV length ``F`` (the
``prompt + output - 1`` tokens it ever computes, ``Request.final_kv_tokens``): token states ``L``,
reservation ``min(R, F) - L``, internal fragmentation ``max(0, R - F)``. ``L`` counts the tokens
a step computes from that step on (their slots are written during it).
Sequence groups and shared prefixes count shared physical slots once, and ``unshared`` records
what the same sequences would hold without sharing.
Free slots that cannot serve the request at the head of the queue are external fragmentation
(holes too small, or too few in total: the paper's "external fragmentation & other"), as are
slots taken from the pool but owned by no reservation (buddy rounding, a paged pool's remainder).
The rest are free. The five categories sum to ``capacity_slots`` in every step.

One row is recorded per engine event (a step, or a fast-forwarded span of decode steps); its
category columns are means over the span's steps weighted by step duration. Rows are kept as
typed columns (8 bytes a value), so a million-request run's series stays small.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import numpy.typing as npt
from librt.vecs import append, vec
from mypy_extensions import i64

from kvsim.base.units import SimTime
from kvsim.core.kv.base import Allocator
from kvsim.results.columns import FLOAT_COLUMNS, FULL_USAGE, MEMORY_COLUMNS
from kvsim.workload.request import Request

# MemoryRecorder's columns by type, each in MEMORY_COLUMNS order (the slot columns last)
_FLOAT_ORDER = tuple(c for c in MEMORY_COLUMNS if c in FLOAT_COLUMNS)
_INT_ORDER = tuple(c for c in MEMORY_COLUMNS if c not in FLOAT_COLUMNS)
# the positions ``MemoryRecorder._append_row`` writes (a column added or moved must fail here)
assert _FLOAT_ORDER == (
    "time_s",
    "duration_s",
    "num_requests_waiting",
    "token_states",
    "reservation",
    "internal_fragmentation",
    "external_fragmentation",
    "free",
    "allocated",
    "held",
    "unshared",
    "allocated_max",
    "full_s",
), _FLOAT_ORDER
assert _INT_ORDER == (
    "num_steps",
    "num_requests_running",
    "num_prefills",
    "num_preempted",
    "num_blocked_steps",
), _INT_ORDER


class QueueHead:
    """What the request at the head of the waiting queue needs, for ``categorize``.

    Attributes:
        need: free slots its admission needs (``Allocator.admission_slots_needed``).
        threshold: the free slots that could serve it are all of them once they reach
            ``need``, else none (``Allocator.usable_is_threshold``).
        usable: otherwise, the free slots that could serve it (holes large enough: slab
            pools, whose free space does not change while their requests decode).
    """

    def __init__(self, need: int, threshold: bool, usable: int) -> None:
        # (a plain class: mypyc compiles this __init__; a dataclass's runs interpreted)
        self.need = need
        self.threshold = threshold
        self.usable = usable


def queue_head(allocator: Allocator, head: tuple[Request, int] | None) -> QueueHead | None:
    """The ``QueueHead`` of ``(request, tokens its admission places)``, or ``None``."""
    if head is None:
        return None
    request, num_tokens = head
    need = allocator.admission_slots_needed(request, num_tokens)
    if allocator.usable_is_threshold:
        return QueueHead(need, True, 0)
    return QueueHead(need, False, allocator.usable_free_slots(request, num_tokens))


def categorize(
    capacity: int,
    overhead: int,
    held: int,
    token_states: int,
    internal: int,
    head: QueueHead | None,
) -> tuple[int, int, int, int, int, int, int]:
    """Every slot of the pool in one category (DESIGN.md), in one step.

    Args:
        capacity: slots of the pool.
        overhead: slots taken from the free pool but held by no request (buddy rounding, a
            paged pool's remainder and null block).
        held: slots held by live requests (a slot several requests share once).
        token_states: of those, slots holding computed KV.
        internal: of those, slots beyond their request's final length (never written).
        head: what the waiting head needs, or ``None`` when nobody waits.

    Returns:
        ``(token_states, reservation, internal, external, free, allocated, blocked)``: the five
        categories (they sum to ``capacity``), the slots taken from the free pool, and 1 when
        enough slots are free in total but none can serve the head (else 0).
    """
    free_total = capacity - held - overhead
    usable = free_total
    blocked = 0
    if head is not None:
        if head.threshold:
            if free_total < head.need:
                usable = 0
        else:
            usable = head.usable
        if usable == 0 and free_total >= head.need:
            blocked = 1
    return (
        token_states,
        held - token_states - internal,
        internal,
        free_total - usable + overhead,
        usable,
        capacity - free_total,
        blocked,
    )


def step_weights(durations_s: list[float], total_s: float) -> list[float]:
    """Each step's share of an event's duration (``total_s``, their sum, in seconds), the
    weight of its value in the event's row; equal shares for an event of no duration."""
    k = len(durations_s)
    return [d / total_s for d in durations_s] if total_s > 0 else [1 / k] * k


class SpanSlots:
    """Slot totals of an event's steps, before categorising them.

    Step 0 holds ``held``, ``token_states`` and ``internal`` slots (each request's physical
    slots, slots shared with other requests counted by each: ``across`` is subtracted from held
    and token states); step ``j >= 1`` adds ``slots_per_block * blocks[j]`` held slots,
    ``internal_steps[j]`` internal slots and ``num_seqs`` token states (``LazySpan``).
    ``unshared`` (what the sequences would hold without any sharing) is held plus ``within``
    (slots a sequence group's sequences share), before ``across`` is subtracted. ``overhead``:
    slots taken from the free pool but held by no request (``Allocator.overhead_slots``).
    ``token_steps[j]``: token states step ``j`` adds beyond ``num_seqs`` (a sliding window's
    freed block drops its tokens; empty: none); ``across_steps[j]``: step ``j``'s ``across``
    when it changes during the event (empty: ``across`` throughout).
    """

    def __init__(
        self,
        held: int,
        token_states: int,
        internal: int,
        overhead: int = 0,
        across: int = 0,
        within: int = 0,
        slots_per_block: int = 0,
        blocks: list[int] | None = None,
        internal_steps: list[int] | None = None,
        num_seqs: int = 0,
        token_steps: list[int] | None = None,
        across_steps: list[int] | None = None,
    ) -> None:
        # (a plain class: mypyc compiles this __init__; a dataclass's runs interpreted)
        self.held = held
        self.token_states = token_states
        self.internal = internal
        self.overhead = overhead
        self.across = across
        self.within = within
        self.slots_per_block = slots_per_block
        self.blocks: list[int] = [] if blocks is None else blocks
        self.internal_steps: list[int] = [] if internal_steps is None else internal_steps
        self.num_seqs = num_seqs
        self.token_steps: list[int] = [] if token_steps is None else token_steps
        self.across_steps: list[int] = [] if across_steps is None else across_steps


class MemoryRecorder:
    """Collects one row per engine event (see ``MEMORY_COLUMNS``) into typed columns.

    Args:
        capacity_slots: slots of the pool.
        usable_slots: slots requests can hold (``Allocator.usable_capacity_tokens``),
            ``kv_cache_usage_perc``'s denominator as ``metrics.memory_shares`` takes it (the
            capacity when 0): a step counts as full (``full_s``) at ``FULL_USAGE`` of them.

    Columns are ``librt.vecs`` packed vectors (8 bytes a value, no Python object per value,
    appended without a Python call when compiled): float64 for times, means and the waiting
    queue, int64 for counts.
    """

    def __init__(self, capacity_slots: int, usable_slots: int) -> None:
        self.capacity_slots = capacity_slots
        usable = usable_slots or capacity_slots
        self._usable_slots = float(usable)
        self._unusable_slots = float(capacity_slots - usable)
        # (an attribute: an interpreted module's global costs a lookup a step when compiled)
        self._full_usage = FULL_USAGE
        self._int_times = True  # every time_s so far was an int (SimPy starts the clock at 0)
        # time_s, duration_s, num_requests_waiting, the eight slot columns, then each event's
        # most allocated slots and full seconds
        self._floats: list[vec[float]] = [vec[float]() for _ in _FLOAT_ORDER]
        # num_steps, num_requests_running, num_prefills, num_preempted, num_blocked_steps
        self._ints: list[vec[i64]] = [vec[i64]() for _ in _INT_ORDER]

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
        token: float,
        reservation: float,
        internal: float,
        external: float,
        free: float,
        allocated: float,
        held: float,
        unshared: float,
        allocated_max: float,
        full_s: float,
    ) -> None:
        """One row, in ``MEMORY_COLUMNS`` order (``token`` .. ``unshared``: the eight slot
        columns; named, not ``*args``: a native call with unboxed floats, once an event)."""
        self._int_times = self._int_times and isinstance(time_s, int)
        f, n = self._floats, self._ints
        f[0] = append(f[0], float(time_s))
        f[1] = append(f[1], duration_s)
        f[2] = append(f[2], num_waiting)
        f[3] = append(f[3], token)
        f[4] = append(f[4], reservation)
        f[5] = append(f[5], internal)
        f[6] = append(f[6], external)
        f[7] = append(f[7], free)
        f[8] = append(f[8], allocated)
        f[9] = append(f[9], held)
        f[10] = append(f[10], unshared)
        f[11] = append(f[11], allocated_max)
        f[12] = append(f[12], full_s)
        n[0] = append(n[0], num_steps)
        n[1] = append(n[1], num_running)
        n[2] = append(n[2], num_prefills)
        n[3] = append(n[3], num_preempted)
        n[4] = append(n[4], num_blocked)

    def __len__(self) -> int:
        return len(self._floats[0])

    def record(
        self,
        time_s: SimTime,
        durations_s: list[float],
        total_s: float,
        slots: SpanSlots,
        head: QueueHead | None,
        num_running: int,
        num_waiting: int | list[float],
        num_prefills: int,
        num_preempted: int,
    ) -> None:
        """Append the event starting at ``time_s``: its steps' durations (seconds; ``total_s``
        their sum) and slot totals, each step categorised (``categorize``) and the row holding
        the duration-weighted mean of each column over the steps.

        ``num_waiting`` is the queue length, or one count per step when requests arrive during
        the event. Each mean adds value x weight left to right in one pass over the steps.
        """
        weights = step_weights(durations_s, total_s)
        capacity, overhead = self.capacity_slots, slots.overhead
        held_phys, token0, internal = slots.held, slots.token_states, slots.internal
        across, within = slots.across, slots.within
        per_block, blocks, internal_steps = (
            slots.slots_per_block,
            slots.blocks,
            slots.internal_steps,
        )
        num_seqs = slots.num_seqs
        token_steps, across_steps = slots.token_steps, slots.across_steps
        token_m = reservation_m = internal_m = external_m = free_m = allocated_m = 0.0
        held_m = unshared_m = 0.0
        allocated_max = full_s = 0.0
        usable, unusable, full_usage = self._usable_slots, self._unusable_slots, self._full_usage
        num_blocked = 0
        for j, w in enumerate(weights):
            if j:
                held_phys += per_block * blocks[j]
                internal += internal_steps[j]
                if token_steps:
                    token0 += token_steps[j]
            if across_steps:
                across = across_steps[j]
            held = held_phys - across
            token, reservation, internal_j, external, free, allocated, blocked = categorize(
                capacity, overhead, held, token0 + num_seqs * j - across, internal, head
            )
            num_blocked += blocked
            if allocated > allocated_max:
                allocated_max = float(allocated)
            if (allocated - unusable) / usable >= full_usage:  # (kv_cache_usage_perc's rule)
                full_s += durations_s[j]
            token_m += token * w
            reservation_m += reservation * w
            internal_m += internal_j * w
            external_m += external * w
            free_m += free * w
            allocated_m += allocated * w
            held_m += held * w
            unshared_m += (held_phys + within) * w
        waiting = 0.0
        if isinstance(num_waiting, list):
            for j in range(len(weights)):  # (indexed: mypyc compiles zip(strict=) as a call)
                waiting += num_waiting[j] * weights[j]
        else:
            for w in weights:
                waiting += num_waiting * w
        self._append_row(
            time_s,
            total_s,
            len(weights),
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
            allocated_max,
            full_s,
        )

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The rows as numpy arrays, one per column (``MEMORY_COLUMNS``), with the dtypes
        pandas gives them. Views of the columns, not copies (a later append makes a new vector
        and leaves a viewed one as it was)."""
        views: dict[str, npt.NDArray[Any]] = {}
        for name, col in zip(_FLOAT_ORDER, self._floats, strict=True):
            views[name] = np.frombuffer(cast(Any, col), np.float64)  # (a vec is a buffer)
        for name, icol in zip(_INT_ORDER, self._ints, strict=True):
            views[name] = np.frombuffer(cast(Any, icol), np.int64)
        data = {name: views[name] for name in MEMORY_COLUMNS}
        if self._int_times:  # pandas keeps a column of int times as int64
            data["time_s"] = data["time_s"].astype(np.int64)
        return data
