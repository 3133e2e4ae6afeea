"""``kvsim.results.saturation.backlog`` on request tables built by hand."""

from __future__ import annotations

import pandas as pd

from kvsim.results.saturation import Backlog, backlog


def _table(arrival: list[float], scheduled: list[float], service_s: float) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "arrival_time_s": arrival,
            "first_scheduled_time_s": scheduled,
            "request_inference_time_seconds": [service_s] * len(arrival),
        }
    )


def test_an_engine_serving_every_other_second_is_saturated() -> None:
    # one arrival a second (0 .. 99), one start every 2 s (request i at 2i): at t = 99 requests
    # 50 .. 99 have arrived (2i > 99) but not started, and 50 .. 99 are the second half's arrivals
    # (after 49.5 s); the window spans 99 s >= 10 x 2 s of service
    arrival = [float(i) for i in range(100)]
    found = backlog(_table(arrival, [2.0 * i for i in range(100)], 2.0))
    assert found == Backlog(last_arrival_s=99.0, waiting=50, second_half=50)
    assert found.share == 1.0


def test_an_engine_keeping_up_is_not() -> None:
    arrival = [float(i) for i in range(100)]  # each starts 0.1 s after it arrives
    assert backlog(_table(arrival, [t + 0.1 for t in arrival], 1.0)) is None


def test_nine_waiting_is_a_burst_not_a_trend() -> None:
    # 20 arrivals over 19 s; the last 9 start after the last arrival (share 9 / 10, count 9)
    arrival = [float(i) for i in range(20)]
    scheduled = [t + 0.1 for t in arrival[:11]] + [30.0 + i for i in range(9)]
    assert backlog(_table(arrival, scheduled, 1.0)) is None
    scheduled = [t + 0.1 for t in arrival[:10]] + [30.0 + i for i in range(10)]  # ten: a trend
    assert backlog(_table(arrival, scheduled, 1.0)) == Backlog(19.0, 10, 10)


def test_an_offline_batch_is_not_judged() -> None:
    # 100 requests within 1 ms, served over minutes: the queue is the point of a batch
    arrival = [i * 1e-5 for i in range(100)]
    assert backlog(_table(arrival, [2.0 * i for i in range(100)], 2.0)) is None


def test_rejected_requests_do_not_wait() -> None:
    # as the saturated case, but requests 50 .. 99 were rejected (never scheduled: NaN)
    arrival = [float(i) for i in range(100)]
    scheduled = [2.0 * i for i in range(50)] + [float("nan")] * 50
    assert backlog(_table(arrival, scheduled, 2.0)) is None
