"""The plan's search: the interval of knob values where every condition of a plan holds.

Each condition (a target, or "the config is valid and its requests fit the pool") is assumed
monotone in the knob, but not all in the same direction: p99 TTFT falls as ``max_num_seqs``
grows (less queueing) while p99 TPOT rises (bigger batches), so the values meeting both form an
interval. The two ends of the bracket tell each condition's direction; each condition that
changes between them has its own boundary, found by k-ary search (``PROBES_PER_ROUND`` points a
round, so the points visited do not depend on how many processes evaluate them). The interval
is the highest "from here up" boundary to the lowest "up to here" one.

                 grid index:  0 . . . . . L . . . . . U . . . n
    TTFT (holds from L up):   x x x x x x o o o o o o o o o o o
    TPOT (holds up to U):     o o o o o o o o o o o o o x x x x
    every condition:          x x x x x x o o o o o o o x x x x   -> interval [L, U]
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

# Values one search round evaluates: fixed, so that -j changes the speed of a plan but not the
# points it visits (with k = jobs, a target that a metric meets non-monotonically, as
# FasterTransformer's mean normalised latency against its rate, gave -j 1 and -j 2 different
# answers).
# Two points per round (trisection) keep both of a 2-core machine's processes busy.
PROBES_PER_ROUND = 2


@dataclass(frozen=True)
class Condition:
    """One thing a point must satisfy: ``holds(summary)``; ``name`` is what messages call it
    (``"time_to_first_token_seconds_p99 <= 2"``)."""

    name: str
    holds: Callable[[dict[str, Any]], bool]


@dataclass(frozen=True)
class Interval:
    """What ``search_interval`` found, in grid indices.

    Attributes:
        low, high: the interval's ends: every condition holds from ``low`` up to ``high``. With
            ``low > high`` no value meets them all: the condition ``low_by`` needs the knob at
            ``low`` or above, and ``high_by`` at ``high`` or below.
        low_by, high_by: the condition whose boundary sets each end (``None``: the bracket's
            end).
        fails_at_both_ends: a condition that neither end of the bracket meets (then no value
            is taken to meet it, and ``low``, ``high`` are the bracket's ends).
    """

    low: int
    high: int
    low_by: Condition | None = None
    high_by: Condition | None = None
    fails_at_both_ends: Condition | None = None

    @property
    def empty(self) -> bool:
        return self.fails_at_both_ends is not None or self.low > self.high


class _Search:
    """Holds the grid, the evaluated indices, and the evaluation callbacks."""

    def __init__(
        self,
        grid: Sequence[float],
        summary_at: Callable[[float], dict[str, Any]],
        evaluate: Callable[[Sequence[float]], None],
    ) -> None:
        self.grid, self.summary_at, self.evaluate = grid, summary_at, evaluate
        self.visited: set[int] = {0, len(grid) - 1}

    def holds(self, condition: Condition, i: int) -> bool:
        return condition.holds(self.summary_at(self.grid[i]))

    def first_past(self, condition: Condition, rising: bool, first: int, last: int) -> int:
        """The first index of ``first..last`` where ``condition`` has changed: where it starts
        to hold (``rising``) or stops holding. ``first`` is before the change and ``last`` after
        it; the points already evaluated between them narrow the bracket before the search
        probes any."""

        def past(i: int) -> bool:
            return self.holds(condition, i) == rising

        inside = [i for i in self.visited if first <= i <= last]
        hi = min(i for i in inside if past(i))
        lo = max(i for i in inside if i < hi and not past(i))
        while hi - lo > 1:
            k = min(PROBES_PER_ROUND, hi - lo - 1)
            probes = sorted({lo + (hi - lo) * (j + 1) // (k + 1) for j in range(k)})
            self.evaluate([self.grid[i] for i in probes])
            self.visited.update(probes)
            for i in probes:
                if past(i):
                    hi = i
                    break
                lo = i
        return hi


def search_interval(
    grid: Sequence[float],
    conditions: Sequence[Condition],
    summary_at: Callable[[float], dict[str, Any]],
    evaluate: Callable[[Sequence[float]], None],
) -> Interval:
    """The interval of ``grid`` indices where every condition holds (module docstring).

    Args:
        grid: the knob's candidate values, ascending; both ends already evaluated.
        conditions: what every point must satisfy, each assumed monotone in the knob; searched
            in this order (the points one search visits narrow the next one's bracket). The
            first bounds the others: they are judged only where it holds (a config that cannot
            run has no metric to judge, so an invalid end of the bracket is not a second end
            failing a target).
        summary_at: the summary of an evaluated value.
        evaluate: evaluates values (a round's probes at once).
    """
    search = _Search(grid, summary_at, evaluate)
    first, last = 0, len(grid) - 1  # (where the first condition holds, once it is searched)
    low, high = first, last
    low_by: Condition | None = None
    high_by: Condition | None = None
    for n, condition in enumerate(conditions):
        at_lo, at_hi = search.holds(condition, first), search.holds(condition, last)
        if not at_lo and not at_hi:
            return Interval(first, last, low_by, high_by, fails_at_both_ends=condition)
        if not (at_lo and at_hi):
            if at_hi:  # holds from some index up
                start = search.first_past(condition, True, first, last)
                if start > low:
                    low, low_by = start, condition
            else:  # holds up to some index
                end = search.first_past(condition, False, first, last) - 1
                if end < high:
                    high, high_by = end, condition
        if n == 0:
            first, last = low, high
    return Interval(low, high, low_by, high_by)


def changes_at_most_once(values: Sequence[bool]) -> bool:
    """``values`` (a condition along the knob) is monotone: it changes at most once."""
    return sum(a != b for a, b in itertools.pairwise(values)) <= 1
