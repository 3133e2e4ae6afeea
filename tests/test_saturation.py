"""``kvsim.results.saturation`` on request tables built by hand, and on runs."""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvsim.results.saturation import Backlog, growing_queue, past_saturation


def _table(arrival: list[float], finish: list[float], parents: list[int] | None = None):
    none = parents is None
    return {
        "req_id": np.arange(len(arrival)),
        "parent_id": np.ma.MaskedArray(
            np.zeros(len(arrival), np.int64) if none else np.array(parents),
            np.ones(len(arrival), bool) if none else np.array([p < 0 for p in parents]),
        ),
        "arrival_time_s": np.array(arrival, dtype=float),
        "finish_time_s": np.array(finish, dtype=float),
    }


def test_an_engine_finishing_every_other_second_is_saturated() -> None:
    # one arrival a second (0 .. 99), request i finishing at 2i + 1. Unfinished (arrived by t,
    # finishing after it): at the middle (t = 49.5) requests 25 .. 49, 25; at three quarters
    # (74.25) 37 .. 74, 38: 13 more, over the 25 arrived meanwhile (50 .. 74); at the end (99)
    # 50 .. 99, 50: 25 more, over the 50 arrived (50 .. 99), of which 25 finished (25 .. 49)
    arrival = [float(i) for i in range(100)]
    found = growing_queue(_table(arrival, [2.0 * i + 1 for i in range(100)]))
    assert found == Backlog(
        middle_s=49.5, last_arrival_s=99.0, unfinished=50, growth=25, arrived=50
    )
    assert found.finished == 25


def test_an_engine_keeping_up_is_not() -> None:
    arrival = [float(i) for i in range(100)]  # each finishes 0.2 s after it arrives
    assert growing_queue(_table(arrival, [t + 0.2 for t in arrival])) is None


def test_a_long_running_batch_that_holds_level_is_not() -> None:
    # each request runs 30 s: 30 are unfinished at any time after the first 30 s, a batch that
    # holds level (finishes keep pace with arrivals), however many run at once
    arrival = [float(i) for i in range(200)]
    assert growing_queue(_table(arrival, [t + 30.0 for t in arrival])) is None


def test_a_burst_at_the_end_of_a_stable_run_is_not() -> None:
    # 200 arrivals a second apart, each finished 0.2 s later, then 30 at t = 200 finished over
    # the next 30 s: 30 more unfinished at the end, none more at three quarters (t = 150)
    arrival = [float(i) for i in range(200)] + [200.0] * 30
    finish = [t + 0.2 for t in arrival[:200]] + [201.0 + i for i in range(30)]
    assert growing_queue(_table(arrival, finish)) is None


def test_nine_more_is_a_burst_not_a_trend() -> None:
    # one arrival a second (0 .. 99); from request 66 on nothing finishes before t = 200: at
    # three quarters (74.25) 66 .. 74 are unfinished, 9 more than the middle's none
    arrival = [float(i) for i in range(100)]
    finish = [t + 0.2 for t in arrival[:66]] + [200.0] * 34
    assert growing_queue(_table(arrival, finish)) is None
    finish = [t + 0.2 for t in arrival[:65]] + [200.0] * 35  # 65 .. 74: ten, a trend
    assert growing_queue(_table(arrival, finish)) == Backlog(49.5, 99.0, 35, 35, 50)


def test_an_offline_batch_is_not_judged() -> None:
    # 100 requests within 0.99 s, finishing one every 2 s over 200 s in 20,000 steps (10 ms
    # each): under 100 steps of arrivals, a batch, whose queue is the point; over 99 s, judged
    served = [2.0 * i + 1 for i in range(100)]
    batch = _table([i * 0.01 for i in range(100)], served)
    assert past_saturation(batch, 200.0, 20_000, closed_loop=False) is False
    spread = _table([float(i) for i in range(100)], served)
    assert past_saturation(spread, 200.0, 20_000, closed_loop=False) is True
    assert past_saturation(spread, 200.0, 20_000, closed_loop=True) is None
    assert past_saturation(spread, 200.0, 0, closed_loop=False) is False  # (no step ran)


def test_rejected_requests_are_not_unfinished() -> None:
    # as the saturated case, but requests 50 .. 99 were rejected (never finished: NaN)
    arrival = [float(i) for i in range(100)]
    finish = [2.0 * i + 1 for i in range(50)] + [float("nan")] * 50
    assert growing_queue(_table(arrival, finish)) is None


def test_a_parallel_sampling_requests_sequences_are_one_request() -> None:
    # the saturated case's requests, each as 4 sequences (rows) of one parent: 50 requests
    # unfinished at the end, not 200 rows
    arrival = [float(i) for i in range(100) for _ in range(4)]
    finish = [2.0 * i + 1 for i in range(100) for _ in range(4)]
    parents = [i for i in range(100) for _ in range(4)]
    assert growing_queue(_table(arrival, finish, parents)) == Backlog(49.5, 99.0, 50, 25, 50)


def test_the_summary_says_whether_a_run_was_past_saturation() -> None:
    # OPT-13B on an A100-40GB, 512-token prompts and 64 output tokens (as tests/test_cli.py):
    # 60 req/s is far past what it serves, 1 req/s well under it; a closed loop is not judged
    from kvsim.config import config_from_dict
    from kvsim.fleet import simulate

    fixed = {"lengths": "fixed", "fixed_prompt_tokens": 512, "fixed_output_tokens": 64}

    def judged(extra: dict | None = None, **workload: object) -> object:
        config = config_from_dict({"workload": {**fixed, **workload}, **(extra or {})})
        return simulate(config).summary["past_saturation"]

    assert judged(rate_per_s=60.0, num_requests=3000) is True
    assert judged(rate_per_s=1.0, num_requests=300) is False
    assert judged(max_concurrency=64, num_requests=300) is None
    # no memory rows: the engine still counts its steps (the summary said false)
    assert judged({"record_memory": False}, rate_per_s=60.0, num_requests=3000) is True
    # two replicas at twice the rate: the fleet is as far past saturation
    assert judged({"fleet": {"replicas": 2}}, rate_per_s=120.0, num_requests=6000) is True


def test_a_built_tables_nullable_parents_read_as_the_columns_do() -> None:
    # a run's columns hold parent_id masked; its built table holds pandas' nullable Int64
    # (read back as NaN): the same queue either way, n = 2 sequences a request
    from kvsim.config import config_from_dict
    from kvsim.fleet import simulate

    workload = {"lengths": "fixed", "fixed_prompt_tokens": 512, "fixed_output_tokens": 64}
    workload |= {"rate_per_s": 60.0, "num_requests": 1500, "n": 2}
    results = simulate(config_from_dict({"workload": workload}))
    names = ("req_id", "parent_id", "arrival_time_s", "finish_time_s")
    from_columns = growing_queue(results.request_columns(*names))
    assert isinstance(results.requests, pd.DataFrame)  # (built now)
    from_table = growing_queue(results.request_columns(*names))
    assert from_columns is not None
    assert from_columns == from_table
    assert from_columns.unfinished <= 1500  # requests, not their 3,000 sequences


def _fleet_table() -> dict:
    # replica 0: the saturated case (one arrival a second, request i finishing at 2i + 1);
    # replica 1: the same arrivals, each finished 0.2 s later (keeping up)
    arrival = [float(i) for i in range(100)]
    saturated = _table(arrival, [2.0 * i + 1 for i in range(100)])
    keeping_up = _table(arrival, [t + 0.2 for t in arrival])
    table = {
        name: np.ma.concatenate([saturated[name], keeping_up[name]])
        if name == "parent_id"
        else np.concatenate([saturated[name], keeping_up[name]])
        for name in saturated
    }
    table["req_id"] = np.arange(200)
    table["replica"] = np.repeat([0, 1], 100)
    return table


def test_each_replicas_growth_over_the_fleets_window() -> None:
    from kvsim.results.saturation import replica_growth

    table = _fleet_table()
    # replica 0: unfinished at the middle (49.5) 25 .. 49, 25; at the last arrival (99) 50 ..
    # 99, 50: +25. Replica 1: none at the middle (request 49 finished at 49.2), request 99
    # (finishing at 99.2) at the end: +1
    assert replica_growth(table, 2) == [25, 1]
    assert replica_growth(table, 3) == [25, 1, 0]  # (a replica that served nothing: 0)
    table["replica"] = np.tile([0, 1], 100)  # every other request to each
    # replica 0 holds the even saturated requests and keeping-up ones 100, 102, ..: middle 26
    # .. 48 (12), end 50 .. 98 (25) and none of its keeping-up ones (198 arrives at 98, done
    # 98.2): +13; replica 1 the odd: middle 25 .. 49 (13), end 51 .. 99 (25) and 199 (arrived
    # 99, unfinished): 26, +13
    assert replica_growth(table, 2) == [13, 13]


def test_a_fleets_warning_gives_each_replicas_growth(caplog) -> None:
    # the fleet of two above: together 25 unfinished at the middle (49.5: replica 0's 25 ..
    # 49; replica 1's request 49 finished at 49.2) and 51 at the last arrival (99: replica 0's
    # 50 .. 99 and replica 1's request 99, finishing at 99.2), a growth of 26
    from kvsim.cli.run import note_saturation
    from kvsim.config import config_from_dict
    from kvsim.results import Results

    table = _fleet_table()
    frame = pd.DataFrame({k: v for k, v in table.items() if k != "parent_id"})
    frame["parent_id"] = pd.array([None] * 200, dtype="Int64")
    summary = {"past_saturation": True, "num_replicas": 2}
    results = Results(config_from_dict({}), frame, pd.DataFrame(), summary)
    with caplog.at_level("WARNING", logger="kvsim"):
        note_saturation(results, "poisson")
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "the unfinished requests grew by 26, to 51" in said
    assert "grew by 26, to 51 (by replica: 0 +25, 1 +1)" in said
