"""Where each KV cache group's slots go, step by step (hybrid models: ``kvsim.core.kv.hybrid``).

Beside the pool-wide categories (``kvsim.engine.recorder``, which count every group's slots
together), one column per group and category, per engine event: ``group{g}_{kind}_held``,
``_token_states``, ``_outside_window`` (of the token states, those a sliding group still holds
though no token of the step attends to them: the part of its first block before the window)
and ``_internal`` (slots past the request's final length), slots of one token of one group.
Reservation is held minus the other two. Slots several requests share are counted by each.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from librt.vecs import append, vec
from mypy_extensions import i64

from kvsim.core.kv.hybrid import HybridPagedAllocator
from kvsim.engine.recorder import step_weights
from kvsim.workload.request import Request

GROUP_CATEGORIES = ("held", "token_states", "outside_window", "internal")


class GroupRecorder:
    """One row of per-group slot totals per engine event (rows align with the memory rows).

    Args:
        allocator: the hybrid pool whose groups are recorded.
    """

    def __init__(self, allocator: HybridPagedAllocator) -> None:
        self.allocator = allocator
        self.names = [
            f"group{g}_{kind}_{cat}"
            for g, kind in enumerate(allocator.kinds)
            for cat in GROUP_CATEGORIES
        ]
        # groups of one kind hold the same positions, so the same slots: one column set a kind
        # (``kind_order``), each group's read from its kind's (``arrays``)
        # (packed vectors: an append is a native call, not a Python one a value)
        self._kind_columns = [vec[float]() for _ in range(4 * len(allocator.kind_order))]
        self._durations = vec[float]()

    def record(
        self,
        duration_s: float,
        running: Iterable[tuple[Request, int]],
        members: list[int] | None = None,
    ) -> None:
        """Append one event's totals over the ``(request, length)`` pairs of its running
        requests (``length``: tokens computed once the event's step runs) plus ``members``,
        the decode cohort's totals in the same per-kind order (``GroupSums.kind_totals``)."""
        allocator = self.allocator
        totals = list(members) if members is not None else [0] * (4 * len(allocator.kind_order))
        for req, length in running:
            values = allocator.kind_slot_values(req, length)
            for i in range(len(values)):
                totals[i] += values[i]
        self._append(vec[float]([float(t) for t in totals]), duration_s)

    def record_span(self, durations_s: list[float], total_s: float, rows: vec[i64]) -> None:
        """Append one event of several steps: each column the duration-weighted mean of the
        steps' ``rows`` (per kind, ``GroupSums.kind_totals``; one row a step, one after
        another), as ``MemoryRecorder.record`` weighs its columns."""
        weights = step_weights(durations_s, total_s)
        width = len(self._kind_columns)
        means = vec[float]([0.0] * width)  # (packed: no float object a step and column)
        for j in range(len(weights)):
            w, start = weights[j], j * width
            for i in range(width):
                means[i] += float(rows[start + i]) * w
        self._append(means, total_s)

    def _append(self, totals: vec[float], duration_s: float) -> None:
        """One row of each kind's ``totals`` (four a kind, ``kind_order``)."""
        columns = self._kind_columns
        for c in range(len(columns)):
            columns[c] = append(columns[c], totals[c])
        self._durations = append(self._durations, duration_s)

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """Each group's columns (``names``) as float64 arrays: its kind's, copied."""
        out: dict[str, npt.NDArray[Any]] = {}
        names = iter(self.names)
        for kind in self.allocator.group_kind_index:
            for i in range(4):
                column = self._kind_columns[4 * kind + i]
                out[next(names)] = np.frombuffer(cast(Any, column), np.float64).copy()
        return out

    def summary(self, capacity_slots: int) -> dict[str, float]:
        """Each column's duration-weighted mean over the run, as a percentage of the pool's
        ``capacity_slots`` (``group{g}_{kind}_{category}_pct``)."""
        weights = np.frombuffer(cast(Any, self._durations), np.float64)
        total = float(weights.sum())
        out: dict[str, float] = {}
        for name, values in self.arrays().items():
            mean = float((values * weights).sum() / total) if total > 0 else 0.0
            out[f"{name}_pct"] = 100.0 * mean / capacity_slots
        return out
