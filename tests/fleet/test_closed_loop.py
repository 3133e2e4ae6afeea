"""Closed-loop users (``workload.max_concurrency``, ``vllm bench serve --max-concurrency``): a
user sends its next request ``think_time_s`` after its last one finished."""

from __future__ import annotations

import pytest

from kvsim import config_from_dict
from kvsim.fleet import simulate
from kvsim.fleet.clients import sessions_of
from kvsim.workload.request import Request


def _config(users: int, think_s: float, replicas: int = 1) -> object:
    table: dict[str, object] = {
        "model": "llama-3.1-8b",
        "gpu": "h100-80gb",
        "cache": {"kv_cache_gib": 4},
        "scheduler": {"max_model_len": 4096},
        "workload": {"max_concurrency": users, "think_time_s": think_s},
    }
    if replicas > 1:
        table["fleet"] = {"replicas": replicas}
    return config_from_dict(table)


def test_one_user_sends_each_request_think_time_after_the_last_finished():
    # three requests all due at t=0; one user: request i+1 leaves 0.5 s after request i's
    # last token, so the engine never holds two at once
    reqs = [Request(i, 0.0, 200, 20, 20) for i in range(3)]
    table = simulate(_config(1, 0.5), reqs).requests
    sent, finish = table["arrival_time_s"].tolist(), table["finish_time_s"].tolist()
    assert sent[0] == 0.0
    assert sent[1] == pytest.approx(finish[0] + 0.5, abs=1e-12)
    assert sent[2] == pytest.approx(finish[1] + 0.5, abs=1e-12)
    # alone on the engine, each waits for nothing: scheduled the moment it is sent
    assert table["request_queue_time_seconds"].tolist() == [0.0, 0.0, 0.0]
    # and all three take the same time (same sizes, same empty engine)
    e2e = table["e2e_request_latency_seconds"].tolist()
    assert e2e[1] == pytest.approx(e2e[0], rel=1e-12)


def test_two_users_keep_two_requests_in_flight():
    # four equal requests due at t=0, two users, no think time: requests 0 and 1 go at once;
    # 2 goes when the first of them finishes, 3 when the other does
    reqs = [Request(i, 0.0, 200, 20, 20) for i in range(4)]
    results = simulate(_config(2, 0.0), reqs)
    table = results.requests
    sent, finish = table["arrival_time_s"].tolist(), table["finish_time_s"].tolist()
    assert sent[:2] == [0.0, 0.0]
    assert sorted(sent[2:]) == pytest.approx(sorted(finish[:2]), abs=1e-12)
    assert results.summary["num_requests"] == 4
    assert table["finish_time_s"].max() > 0


def test_a_user_takes_a_whole_session_in_order():
    # rows: session 7 turn 1, session 9 turn 1, session 7 turn 2, session 9 turn 2; one user
    # runs session 7 (rows 0, 2), then session 9 (rows 1, 3)
    reqs = [
        Request(0, 0.0, 100, 5, 5, session_id=7),
        Request(1, 0.0, 100, 5, 5, session_id=9),
        Request(2, 0.0, 100, 5, 5, session_id=7),
        Request(3, 0.0, 100, 5, 5, session_id=9),
    ]
    assert sessions_of(reqs) == [[[0], [2]], [[1], [3]]]
    sent = simulate(_config(1, 0.25), reqs).requests["arrival_time_s"].tolist()
    assert sent[0] < sent[2] < sent[1] < sent[3]


def test_closed_loop_on_a_fleet_routes_every_request():
    reqs = [Request(i, 0.0, 200, 20, 20) for i in range(8)]
    results = simulate(_config(4, 0.1, replicas=2), reqs)
    assert sorted(results.requests["replica"].unique().tolist()) == [0, 1]
    assert results.summary["num_requests"] == 8


def test_think_time_without_users_is_one_clear_error():
    with pytest.raises(ValueError, match=r"think_time_s .* set max_concurrency"):
        config_from_dict({"workload": {"think_time_s": 1.0}})


def test_a_request_of_n_samples_is_one_request_of_its_user():
    """``vllm bench serve --max-concurrency 1`` with ``n = 4``: a user sends a request, vLLM v1
    fans it out into 4 samples that run together, and the user's next request leaves when the
    last sample has finished. Three such requests, all due at t=0, no think time: rows 0-3 go at
    0, rows 4-7 at the end of the first request's samples, rows 8-11 at the end of the second's;
    4 samples run at once at most, and the throughput is 3 client requests over the run
    (its samples were sent one at a time, 12 requests of one user)."""
    table: dict[str, object] = {
        "model": "llama-3.1-8b",
        "gpu": "h100-80gb",
        "cache": {"kv_cache_gib": 4},
        "scheduler": {"max_model_len": 4096},
        "workload": {
            "lengths": "fixed",
            "fixed_prompt_tokens": 200,
            "fixed_output_tokens": 20,
            "n": 4,
            "num_requests": 3,
            "rate_per_s": 100.0,
            "max_concurrency": 1,
        },
    }
    results = simulate(config_from_dict(table))
    rows = results.requests.sort_values("req_id")
    sent, finish = rows["arrival_time_s"].to_numpy(), rows["finish_time_s"].to_numpy()
    assert len(rows) == 12
    for k in range(3):
        assert (sent[4 * k : 4 * k + 4] == sent[4 * k]).all()
    assert sent[0] == 0.0
    assert sent[4] == pytest.approx(finish[0:4].max(), abs=1e-12)
    assert sent[8] == pytest.approx(finish[4:8].max(), abs=1e-12)
    summary = results.summary
    assert summary["num_requests_running_max"] == 4
    assert summary["throughput_requests_per_s"] == pytest.approx(3 / summary["duration_s"])
