"""The step durations of one engine event, and the span arithmetic on them.

An event is one step or a fast-forwarded span of ``k`` steps. Short spans keep their durations
as a plain list (numpy's per-call cost would dominate a few values); long ones as float64[k].
Both give the same numbers: running sums are sequential either way (``np.cumsum`` adds left to
right), and a short span's total repeats numpy's summation order (``numpy_sum``).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from itertools import accumulate
from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
MAX_SPAN_STEPS = 4096  # bounds the [n, k] arrays of one fast-forwarded span
SHORT_SPAN_STEPS = 64  # spans up to this long are timed and recorded in plain Python


@dataclass(slots=True, frozen=True)
class Timing:
    """Durations of an event's steps (seconds).

    Attributes:
        durations: per-step durations, a list or float64[k].
        array: the same as float64[k] when they are one (long spans), else ``None``.
        total_s: the event's length (numpy's sum of the durations; the one duration when
            ``k = 1``).
    """

    durations: list[float] | FloatArray
    array: FloatArray | None
    total_s: float

    @property
    def num_steps(self) -> int:
        return len(self.durations)

    @property
    def step0_s(self) -> float:
        return float(self.durations[0])


def one_step(duration_s: float) -> Timing:
    """The timing of a single step."""
    return Timing([duration_s], None, duration_s)


def span_timing(durations: list[float] | FloatArray) -> Timing:
    """The timing of ``k >= 1`` steps."""
    if len(durations) == 1:
        return one_step(float(durations[0]))
    if isinstance(durations, np.ndarray):
        return Timing(durations, durations, float(durations.sum()))
    return Timing(durations, None, numpy_sum(durations))


def numpy_sum(values: list[float]) -> float:
    """``float(np.array(values).sum())`` without the array: the same additions in the same
    order (numpy's pairwise sum of a contiguous float64 array: up to 8 values left to right;
    up to 128 in 8 interleaved running sums combined pairwise, then the rest left to right)."""
    n = len(values)
    if n < 8:
        total = 0.0
        for v in values:
            total += v
        return total
    if n > 128:  # numpy splits longer arrays recursively
        return float(np.array(values, np.float64).sum())
    r0, r1, r2, r3, r4, r5, r6, r7 = values[:8]
    i, whole = 8, n - n % 8
    while i < whole:
        r0 += values[i]
        r1 += values[i + 1]
        r2 += values[i + 2]
        r3 += values[i + 3]
        r4 += values[i + 4]
        r5 += values[i + 5]
        r6 += values[i + 6]
        r7 += values[i + 7]
        i += 8
    total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    for v in values[whole:]:
        total += v
    return total


def steps_before(
    durations: list[float] | FloatArray, until_s: float, side: Literal["left", "right"]
) -> int:
    """``np.searchsorted(np.cumsum(durations), until_s, side)``: how many steps end before
    ``until_s`` (``"right"``: or at it)."""
    if isinstance(durations, np.ndarray):
        return int(np.searchsorted(np.cumsum(durations), until_s, side=side))
    ends = list(accumulate(durations))
    return (bisect.bisect_left if side == "left" else bisect.bisect_right)(ends, until_s)


def waiting_per_step(
    durations: list[float] | FloatArray,
    now_s: float,
    num_waiting: int,
    arrival_times_s: FloatArray | list[float],
    num_arrived: int,
) -> int | FloatArray | list[float]:
    """Queue length in each step of a span: requests arriving during it join the queue.

    Args:
        durations: the span's step durations (``Timing.durations``), seconds.
        num_waiting: the queue's length when the span starts.
        arrival_times_s: float64[N] every request's arrival, sorted (bisected in plain Python
            for a list of durations).
        num_arrived: requests released so far (``arrival_times_s[num_arrived]`` is next).

    Returns:
        ``num_waiting`` when nothing arrives before the span's last step starts, else one
        count per step: float64[k] for an array of durations, a list of floats for a list.
    """
    if len(durations) == 1 or num_arrived == len(arrival_times_s):
        return num_waiting
    if isinstance(durations, np.ndarray):
        starts = now_s + np.concatenate(([0.0], np.cumsum(durations[:-1])))
        arrived = np.searchsorted(arrival_times_s, starts, side="right")
        return num_waiting + np.maximum(arrived - num_arrived, 0).astype(np.float64)
    ends = list(accumulate(durations[:-1]))
    if arrival_times_s[num_arrived] > now_s + ends[-1]:
        return num_waiting  # the next arrival comes after the last step starts
    starts_list = [now_s + 0.0, *(now_s + end for end in ends)]
    hi = len(arrival_times_s)
    return [
        float(
            num_waiting
            + max(bisect.bisect_right(arrival_times_s, t, num_arrived, hi) - num_arrived, 0)
        )
        for t in starts_list
    ]
