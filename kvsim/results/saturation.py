"""Whether a run's arrivals outpaced its engine: its unfinished requests over the arrivals.

An engine past saturation finishes fewer requests a second than arrive, so the requests it has
not finished (waiting, or running in a batch that keeps growing) grow for as long as requests
keep arriving, and every latency percentile grows with the run's length rather than measuring
the engine. ``growing_queue`` reads it from the request table: how many more requests were
unfinished three quarters of the way through the arrival window, and at its end, than at its
middle, against the arrivals meanwhile. A stable engine's count holds level however many run at
once; a burst of arrivals at the very end is no trend. ``past_saturation`` is the summary's
verdict, which leaves offline batches and closed loops out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

BACKLOG_SHARE = 0.1  # growth of the unfinished requests, of the arrivals over the same time
MIN_BACKLOG = 10  # requests (a handful more is a burst, not a trend)
MIN_SPAN_STEPS = 100  # the arrival window, in the run's mean engine steps: a batch is not judged


@dataclass(frozen=True)
class Backlog:
    """How the unfinished requests grew over the second half of the arrival window.

    Attributes:
        middle_s, last_arrival_s: the window's middle and its last arrival (simulated s).
        unfinished: requests that had arrived and not finished at the last arrival (waiting or
            running; a parallel-sampling request's sequences count once).
        growth: of them, how many more than at the middle.
        arrived: requests that arrived after the middle.
    """

    middle_s: float
    last_arrival_s: float
    unfinished: int
    growth: int
    arrived: int

    @property
    def finished(self) -> int:
        """Requests that finished after the middle, up to the last arrival."""
        return self.arrived - self.growth


def growing_queue(requests: Mapping[str, Any]) -> Backlog | None:
    """How the unfinished requests (arrived, not finished: waiting or running) grew over the
    second half of the arrival window, where they grew as a saturated engine's do, else
    ``None``: from the window's middle to three quarters of the way through, and to its end,
    each time by ``MIN_BACKLOG`` requests at least and ``BACKLOG_SHARE`` of the requests that
    arrived meanwhile. (A stable engine finishes what arrives, so the count holds level,
    however many run at once; a burst at the very end is no trend.) Rejected requests (never
    finished: NaN) are not counted; the sequences of one parallel-sampling request
    (``parent_id``) are one request.

    Args:
        requests: the run's request columns (``Results.request_columns``, or its table):
            ``req_id``, ``parent_id`` (masked or NaN: none), ``arrival_time_s``,
            ``finish_time_s``, one value a row.
    """
    arrivals = np.asarray(requests["arrival_time_s"], dtype=np.float64)
    if not len(arrivals):
        return None
    first, middle, last = _window(arrivals)
    owner = _owners(requests)
    every = np.ones(len(arrivals), dtype=np.bool_)

    def unfinished(t: float) -> int:
        return _num_unfinished(requests, owner, every, t)

    def arrived_since_middle(t: float) -> int:
        return len(np.unique(owner[(arrivals > middle) & (arrivals <= t)]))

    at_middle = unfinished(middle)
    grown = []
    for t in (first + 0.75 * (last - first), last):
        growth, arrived = unfinished(t) - at_middle, arrived_since_middle(t)
        if growth < MIN_BACKLOG or growth < BACKLOG_SHARE * arrived:
            return None
        grown.append((growth, arrived))
    (growth, arrived) = grown[-1]
    return Backlog(middle, last, at_middle + growth, growth, arrived)


def past_saturation(
    requests: Mapping[str, Any], duration_s: float, num_steps: int, closed_loop: bool
) -> bool | None:
    """The summary's ``past_saturation``: whether the run's queue grew over its arrivals
    (``growing_queue``); ``False`` for arrivals within ``MIN_SPAN_STEPS`` of the run's mean
    engine step (``duration_s / num_steps``: an offline batch, whose queue is the point);
    ``None`` for a closed loop (``workload.max_concurrency``: its users wait their turn, the
    queue cannot outgrow them).

    Args:
        requests: as ``growing_queue``'s.
        duration_s: the run's length, first arrival to last finish (s).
        num_steps: the engine steps it ran (a fleet's: every replica's, over its replicas'
            summed lengths), recorded in memory rows or not.
        closed_loop: the workload is a closed loop.
    """
    if closed_loop:
        return None
    arrivals = np.asarray(requests["arrival_time_s"], dtype=np.float64)
    if not len(arrivals) or num_steps <= 0:
        return False
    span = float(arrivals.max() - arrivals.min())
    if not span >= MIN_SPAN_STEPS * duration_s / num_steps:
        return False
    return growing_queue(requests) is not None


def replica_growth(requests: Mapping[str, Any], num_replicas: int) -> list[int]:
    """How many more requests were unfinished on each replica (index 0 .. ``num_replicas - 1``,
    an idle one 0) at the arrival window's last arrival than at its middle (the window the whole
    fleet's ``growing_queue`` reads): where one replica's grows and the others' hold level, the
    router is to blame, not the fleet's size.

    Args:
        requests: as ``growing_queue``'s, with ``replica`` (the replica that served each row).
    """
    arrivals = np.asarray(requests["arrival_time_s"], dtype=np.float64)
    if not len(arrivals):
        return [0] * num_replicas
    _, middle, last = _window(arrivals)
    replica = np.asarray(requests["replica"], dtype=np.int64)
    owner = _owners(requests)
    out = []
    for index in range(num_replicas):
        mine = replica == index
        out.append(
            _num_unfinished(requests, owner, mine, last)
            - _num_unfinished(requests, owner, mine, middle)
        )
    return out


def _window(arrivals: npt.NDArray[np.float64]) -> tuple[float, float, float]:
    """The arrival window's first arrival, middle and last arrival (s)."""
    first, last = float(arrivals.min()), float(arrivals.max())
    return first, (first + last) / 2, last


def _num_unfinished(
    requests: Mapping[str, Any], owner: npt.NDArray[np.int64], rows: npt.NDArray[np.bool_], t: float
) -> int:
    """Requests among ``rows`` arrived by ``t`` and not finished then (NaN finish: never
    finished, so not counted), a parallel-sampling request's sequences once (``owner``)."""
    arrivals = np.asarray(requests["arrival_time_s"], dtype=np.float64)
    finish = np.asarray(requests["finish_time_s"], dtype=np.float64)
    return len(np.unique(owner[rows & (arrivals <= t) & (finish > t)]))


def _owners(requests: Mapping[str, Any]) -> npt.NDArray[np.int64]:
    """Each row's request: ``-1 - parent_id`` where it has one (a sequence of a parallel-sampling
    request; parent ids are numbered apart from the rows' ids), else its own ``req_id``."""
    ids = np.asarray(requests["req_id"], dtype=np.int64)
    if "parent_id" not in requests:
        return ids
    parent = requests["parent_id"]
    if isinstance(parent, np.ma.MaskedArray):
        none = np.ma.getmaskarray(parent)
        values = np.ma.getdata(parent)
    else:  # (a table's nullable column)
        values = np.asarray(parent, dtype=np.float64)
        none = np.isnan(values)
    parents = -1 - np.nan_to_num(values).astype(np.int64)
    out: npt.NDArray[np.int64] = np.where(none, ids, parents)
    return out
