"""Whether a run's arrivals outpaced its engine: its queue over the last half of the arrivals.

An engine past saturation serves fewer requests a second than arrive, so its queue grows for as
long as requests keep arriving, and every latency percentile grows with the run's length rather
than measuring the engine. ``growing_queue`` reads it from the request table: the requests still
waiting (not yet scheduled) three quarters of the way through the arrival window and at its
end, against those that arrived since its middle. A stable engine's queue is a few requests at
any moment; a saturated one's holds a share of everything that arrived since it saturated, and
more at the end than at three quarters (a burst of arrivals at the very end is no trend).
``past_saturation`` is the summary's verdict, which leaves offline batches and closed loops out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

BACKLOG_SHARE = 0.1  # waiting, of the arrivals since the window's middle
MIN_BACKLOG = 10  # requests (a handful waiting is a burst, not a trend)
MIN_SPAN_STEPS = 100  # the arrival window, in the run's mean engine steps: a batch is not judged


@dataclass(frozen=True)
class Backlog:
    """The queue when the last request arrived.

    Attributes:
        last_arrival_s: the last request's arrival time (simulated s).
        waiting: requests that had arrived and were not yet scheduled then (a parallel-sampling
            request's sequences count once).
        second_half: requests that arrived in the second half of the arrival window.
        waiting_before: requests waiting three quarters of the way through the window.
    """

    last_arrival_s: float
    waiting: int
    second_half: int
    waiting_before: int

    @property
    def share(self) -> float:
        """``waiting`` over ``second_half`` (0 to 1 and more)."""
        return self.waiting / max(self.second_half, 1)


def growing_queue(requests: Mapping[str, Any]) -> Backlog | None:
    """The run's queue at its last arrival where it grew over the arrivals' second half, else
    ``None``: at three quarters of the arrival window and at its end, at least ``MIN_BACKLOG``
    requests, and ``BACKLOG_SHARE`` of those that arrived since the window's middle, were still
    waiting (not yet scheduled), and no fewer at the end. Rejected requests (never scheduled:
    NaN) do not wait; the sequences of one parallel-sampling request (``parent_id``) are one
    request.

    Args:
        requests: the run's request columns (``Results.request_columns``, or its table):
            ``req_id``, ``parent_id`` (masked or NaN: none), ``arrival_time_s``,
            ``first_scheduled_time_s``, one value a row.
    """
    arrivals = np.asarray(requests["arrival_time_s"], dtype=np.float64)
    if not len(arrivals):
        return None
    first, last = float(arrivals.min()), float(arrivals.max())
    scheduled = np.asarray(requests["first_scheduled_time_s"], dtype=np.float64)
    owner = _owners(requests)
    middle = (first + last) / 2

    def waiting_at(t: float) -> tuple[int, int]:  # (waiting, arrived since the middle)
        queued = (arrivals <= t) & (scheduled > t)  # (NaN: False)
        recent = (arrivals > middle) & (arrivals <= t)
        return len(np.unique(owner[queued])), len(np.unique(owner[recent]))

    def shows(waiting: int, recent: int) -> bool:
        return waiting >= MIN_BACKLOG and waiting >= BACKLOG_SHARE * recent

    early = waiting_at(first + 0.75 * (last - first))
    end = waiting_at(last)
    if shows(*early) and shows(*end) and end[0] >= early[0]:
        return Backlog(last, end[0], end[1], early[0])
    return None


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
