"""``kvsim.results.saturation.backlog`` on request tables built by hand."""

from __future__ import annotations

import numpy as np

from kvsim.results.saturation import Backlog, backlog

STEP_S = 0.01  # a mean engine step of 10 ms: arrivals over 1 s or more are judged


def _table(arrival: list[float], scheduled: list[float], parents: list[int] | None = None):
    none = parents is None
    return {
        "req_id": np.arange(len(arrival)),
        "parent_id": np.ma.MaskedArray(
            np.zeros(len(arrival), np.int64) if none else np.array(parents),
            np.ones(len(arrival), bool) if none else np.array([p < 0 for p in parents]),
        ),
        "arrival_time_s": np.array(arrival, dtype=float),
        "first_scheduled_time_s": np.array(scheduled, dtype=float),
    }


def test_an_engine_serving_every_other_second_is_saturated() -> None:
    # one arrival a second (0 .. 99), one start every 2 s (request i at 2i). At three quarters
    # (t = 74.25) requests 38 .. 74 wait (2i > 74.25): 37, of the 25 arrived since the middle
    # (49.5 .. 74.25: 50 .. 74); at the end (t = 99) 50 .. 99 wait: 50, of 50 arrived since
    arrival = [float(i) for i in range(100)]
    found = backlog(_table(arrival, [2.0 * i for i in range(100)]), STEP_S)
    assert found == Backlog(last_arrival_s=99.0, waiting=50, second_half=50)
    assert found.share == 1.0


def test_an_engine_keeping_up_is_not() -> None:
    arrival = [float(i) for i in range(100)]  # each starts 0.1 s after it arrives
    assert backlog(_table(arrival, [t + 0.1 for t in arrival]), STEP_S) is None


def test_a_burst_at_the_end_of_a_stable_run_is_not() -> None:
    # 200 arrivals a second apart, each started at once, then 30 at t = 200 started over the
    # next 30 s: 30 wait at the end, but none at three quarters (t = 150)
    arrival = [float(i) for i in range(200)] + [200.0] * 30
    scheduled = [t + 0.1 for t in arrival[:200]] + [200.5 + i for i in range(30)]
    assert backlog(_table(arrival, scheduled), STEP_S) is None


def test_nine_waiting_is_a_burst_not_a_trend() -> None:
    # one arrival a second (0 .. 99); from request 66 on starts are held: at three quarters
    # (t = 74.25) requests 66 .. 74 wait (9), at the end 66 .. 99 (34): too few early on
    arrival = [float(i) for i in range(100)]
    scheduled = [t + 0.1 for t in arrival[:66]] + [200.0] * 34
    assert backlog(_table(arrival, scheduled), STEP_S) is None
    scheduled = [t + 0.1 for t in arrival[:65]] + [200.0] * 35  # 65 .. 74: ten, a trend
    assert backlog(_table(arrival, scheduled), STEP_S) == Backlog(99.0, 35, 50)


def test_an_offline_batch_is_not_judged() -> None:
    # 100 requests within 0.99 s (under 100 steps of 10 ms), served over minutes: a batch's
    # queue is the point; the same over 99 s is judged
    arrival = [i * 0.01 for i in range(100)]
    assert backlog(_table(arrival, [2.0 * i for i in range(100)]), STEP_S) is None


def test_rejected_requests_do_not_wait() -> None:
    # as the saturated case, but requests 50 .. 99 were rejected (never scheduled: NaN)
    arrival = [float(i) for i in range(100)]
    scheduled = [2.0 * i for i in range(50)] + [float("nan")] * 50
    assert backlog(_table(arrival, scheduled), STEP_S) is None


def test_a_parallel_sampling_requests_sequences_are_one_request() -> None:
    # the saturated case's requests, each as 4 sequences (rows) of one parent: 50 requests wait
    # at the end, not 200 rows, of the 50 requests arrived since the middle
    arrival = [float(i) for i in range(100) for _ in range(4)]
    scheduled = [2.0 * i for i in range(100) for _ in range(4)]
    parents = [i for i in range(100) for _ in range(4)]
    assert backlog(_table(arrival, scheduled, parents), STEP_S) == Backlog(99.0, 50, 50)


def test_the_summary_says_whether_a_run_was_past_saturation() -> None:
    # OPT-13B on an A100-40GB, 512-token prompts and 64 output tokens (as tests/test_cli.py):
    # 60 req/s is far past what it serves, 1 req/s well under it; a closed loop is not judged
    from kvsim.config import config_from_dict
    from kvsim.fleet import simulate

    fixed = {"lengths": "fixed", "fixed_prompt_tokens": 512, "fixed_output_tokens": 64}

    def judged(**workload: object) -> object:
        config = config_from_dict({"workload": {**fixed, **workload}})
        return simulate(config).summary["past_saturation"]

    assert judged(rate_per_s=60.0, num_requests=3000) is True
    assert judged(rate_per_s=1.0, num_requests=300) is False
    assert judged(max_concurrency=64, num_requests=300) is None
