"""Per-group slot totals of the decode cohort's members, for pools of several KV cache groups.

In a hybrid pool (``kvsim.core.kv.hybrid``) a steady decoder's slots in one group of each kind
change only where the allocator touches it (a block crossing, a block leaving a sliding window, a
cached block filling); in between, each kind's token states and outside-window slots grow by a
fixed amount per step (``Allocator.decode_group_slots``). So each member contributes, per kind,
six integers that make its slots a linear function of the cohort clock ``c``:

    held, internal                      constant between touches
    token states(c)  = t_base + t_slope * c
    outside(c)       = o_base + o_slope * c

and the cohort keeps their sums: the recorder reads every group's totals at any clock without a
pass over the members.
"""

from __future__ import annotations

from typing import Final

from librt.vecs import append, vec
from mypy_extensions import i64

# (Final: compiled, a constant rather than a module dictionary lookup a use)
HELD: Final = 0
T_BASE: Final = 1
T_SLOPE: Final = 2
O_BASE: Final = 3
O_SLOPE: Final = 4
INTERNAL: Final = 5
WIDTH: Final = 6  # integers per kind


class GroupSums:
    """The members' per-kind contributions, summed.

    Args:
        kind_counts: groups of each kind (``DecodeGroups.kind_counts``).
    """

    def __init__(self, kind_counts: list[int]) -> None:
        self.kind_counts = kind_counts
        # machine integers (no int object a sum changed)
        self.sums: vec[i64] = vec[i64]([0] * (WIDTH * len(kind_counts)))

    @staticmethod
    def contribution(values: vec[i64], clock: int) -> vec[i64]:
        """A member's contribution from ``Allocator.decode_group_slots`` values (per kind:
        held, token states, outside, internal, token growth, outside growth) that hold in the
        step whose slots are recorded at cohort clock ``clock``."""
        out = vec[i64]([0] * len(values))  # (filled by index: no slice, no append a value)
        for i in range(0, len(values), WIDTH):
            t_slope, o_slope = values[i + 4], values[i + 5]
            out[i + HELD] = values[i]
            out[i + T_BASE] = values[i + 1] - t_slope * clock
            out[i + T_SLOPE] = t_slope
            out[i + O_BASE] = values[i + 2] - o_slope * clock
            out[i + O_SLOPE] = o_slope
            out[i + INTERNAL] = values[i + 3]
        return out

    def add(self, contribution: vec[i64], sign: int = 1) -> None:
        """Add (``sign`` 1) or remove (-1) one member's contribution."""
        sums = self.sums
        for i in range(len(sums)):
            sums[i] += sign * contribution[i]

    def kind_totals(self, clock: int) -> list[int]:
        """Per kind: held, token states, outside-window and internal slots of one group of that
        kind, summed over the members, at cohort clock ``clock`` (``GroupRecorder`` order)."""
        return list(self.append_totals(vec[i64](), clock))

    def append_totals(self, rows: vec[i64], clock: int) -> vec[i64]:
        """``rows`` with ``kind_totals(clock)`` appended (a span's rows, one after another:
        no int object a value)."""
        s = self.sums
        for i in range(0, len(s), WIDTH):
            rows = append(rows, s[i + HELD])
            rows = append(rows, s[i + T_BASE] + s[i + T_SLOPE] * clock)
            rows = append(rows, s[i + O_BASE] + s[i + O_SLOPE] * clock)
            rows = append(rows, s[i + INTERNAL])
        return rows

    def pool_totals(self, clock: int) -> tuple[int, int, int]:
        """``(held, token states, internal)`` slots of every group together at ``clock``."""
        return self.pool_at(self.append_totals(vec[i64](), clock), 0)

    def pool_at(self, rows: vec[i64], start: int) -> tuple[int, int, int]:
        """``(held, token states, internal)`` of every group together from the per-kind totals
        at ``rows[start:]`` (``kind_totals``' layout: each kind's counts once for each of its
        groups)."""
        held = token = internal = 0
        counts = self.kind_counts
        for k in range(len(counts)):
            count, i = counts[k], start + 4 * k
            held += count * rows[i]
            token += count * rows[i + 1]
            internal += count * rows[i + 3]
        return held, token, internal

    def token_slope(self) -> int:
        """Token states every group together gains a step between touches."""
        s = self.sums
        return sum(n * s[WIDTH * k + T_SLOPE] for k, n in enumerate(self.kind_counts))
