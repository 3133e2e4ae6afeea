"""The step durations of one engine event, and the span arithmetic on them.

An event is one step or a fast-forwarded span of ``k`` steps; its length is the sum of its
steps' durations added left to right, as time passes step after step.
"""

from __future__ import annotations

import bisect
from typing import Final, Literal

MAX_SPAN_STEPS: Final = 4096  # steps one event may cover (a bound on its duration list)


class Timing:
    """Durations of an event's steps (seconds).

    Attributes:
        durations: per-step durations.
        total_s: the event's length, the durations added left to right.
    """

    def __init__(self, durations: list[float], total_s: float) -> None:
        # (a plain class: mypyc compiles this __init__; a dataclass's runs interpreted)
        self.durations = durations
        self.total_s = total_s

    @property
    def num_steps(self) -> int:
        return len(self.durations)

    @property
    def step0_s(self) -> float:
        return self.durations[0]


def span_timing(durations: list[float]) -> Timing:
    """The timing of ``k >= 1`` steps."""
    total = 0.0
    for d in durations:
        total += d
    return Timing(durations, total)


def steps_before(durations: list[float], until_s: float, side: Literal["left", "right"]) -> int:
    """How many steps end before ``until_s`` (``"right"``: or at it), ends counted from the
    event's start."""
    ends = _running_sums(durations)
    return (bisect.bisect_left if side == "left" else bisect.bisect_right)(ends, until_s)


def waiting_per_step(
    durations: list[float],
    now_s: float,
    num_waiting: int,
    arrival_times_s: list[float],
    num_arrived: int,
) -> int | list[float]:
    """Queue length in each step of a span: requests arriving during it join the queue.

    Args:
        durations: the span's step durations (``Timing.durations``), seconds.
        num_waiting: the queue's length when the span starts.
        arrival_times_s: every request's arrival, sorted, seconds.
        num_arrived: requests released so far (``arrival_times_s[num_arrived]`` is next).

    Returns:
        ``num_waiting`` when nothing arrives before the span's last step starts, else one
        count per step.
    """
    if len(durations) == 1 or num_arrived == len(arrival_times_s):
        return num_waiting
    ends = _running_sums(durations[:-1])
    if arrival_times_s[num_arrived] > now_s + ends[-1]:
        return num_waiting  # the next arrival comes after the last step starts
    starts = [now_s + 0.0, *(now_s + end for end in ends)]
    hi = len(arrival_times_s)
    return [
        float(
            num_waiting
            + max(bisect.bisect_right(arrival_times_s, t, num_arrived, hi) - num_arrived, 0)
        )
        for t in starts
    ]


def _running_sums(values: list[float]) -> list[float]:
    """``list(itertools.accumulate(values))``: the same additions, left to right, in a loop
    mypyc compiles."""
    out: list[float] = []
    total = 0.0
    for i in range(len(values)):
        total = values[i] if i == 0 else total + values[i]
        out.append(total)
    return out
