"""Whether a run's arrivals outpaced its engine: the queue at the last arrival.

An engine past saturation serves fewer requests a second than arrive, so its queue grows for as
long as requests keep arriving, and every latency percentile grows with the run's length rather
than measuring the engine. ``backlog`` reads it from the request table: the requests still
waiting (not yet scheduled) when the last one arrived, against those that arrived in the second
half of the arrival window. A stable engine's queue is a few requests at any moment; a saturated
one's holds a share of everything that arrived since it saturated.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

BACKLOG_SHARE = 0.1  # waiting at the last arrival, of the second half's arrivals
MIN_BACKLOG = 10  # requests (a handful waiting is a burst, not a trend)
MIN_SPAN_SERVICE = 10.0  # arrival window over the median request's own service time


@dataclass(frozen=True)
class Backlog:
    """The queue when the last request arrived.

    Attributes:
        last_arrival_s: the last request's arrival time (simulated s).
        waiting: requests that had arrived and were not yet scheduled then.
        second_half: requests that arrived in the second half of the arrival window.
    """

    last_arrival_s: float
    waiting: int
    second_half: int

    @property
    def share(self) -> float:
        """``waiting`` over ``second_half`` (0 to 1 and more)."""
        return self.waiting / max(self.second_half, 1)


def backlog(requests: Mapping[str, Any]) -> Backlog | None:
    """The run's queue at its last arrival where it shows saturation, else ``None``.

    Saturated: at least ``MIN_BACKLOG`` requests, and ``BACKLOG_SHARE`` of those that arrived
    in the second half of the arrival window, were still waiting (not yet scheduled) when the
    last request arrived. Arrivals that all come at once (an offline batch, whose queue is the
    point) are not judged: the window must span ``MIN_SPAN_SERVICE`` times the median request's
    time in the engine (``request_inference_time_seconds``). Rejected requests (never
    scheduled: NaN) do not count as waiting.

    Args:
        requests: the run's request columns (``Results.request_columns``, or its table):
            ``arrival_time_s``, ``first_scheduled_time_s``, ``request_inference_time_seconds``,
            one value a request.
    """
    arrivals = np.asarray(requests["arrival_time_s"], dtype=float)
    if not len(arrivals):
        return None
    first, last = float(arrivals.min()), float(arrivals.max())
    service = np.asarray(requests["request_inference_time_seconds"], dtype=float)
    ran = service[~np.isnan(service)]
    if not len(ran) or not last - first >= MIN_SPAN_SERVICE * float(np.median(ran)):
        return None
    scheduled = np.asarray(requests["first_scheduled_time_s"], dtype=float)
    waiting = int(np.count_nonzero((arrivals <= last) & (scheduled > last)))  # (NaN: False)
    second_half = int(np.count_nonzero(arrivals > (first + last) / 2))
    found = Backlog(last, waiting, second_half)
    if waiting >= MIN_BACKLOG and found.share >= BACKLOG_SHARE:
        return found
    return None
