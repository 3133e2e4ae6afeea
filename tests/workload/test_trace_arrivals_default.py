"""A trace that carries arrival times replays them, every row, unless the config asks otherwise.

It used to be replayed as Poisson arrivals at the default 1 req/s unless ``arrival = "trace"``
was set: a trace of 400 rows at 4 req/s became 1,000 resampled Poisson requests.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from kvsim.config import config_from_dict
from kvsim.workload import WorkloadSpec, generate_requests
from kvsim.workload.request import Request
from tests.conftest import forget_warnings

# 400 rows, one every 0.25 s (4 req/s): row i arrives at i / 4 s with a 100 + i % 50 token
# prompt and 20 + i % 30 output tokens
ROWS = 400
TIMED = "arrival_time_s,prompt_tokens,output_tokens\n" + "".join(
    f"{i / 4},{100 + i % 50},{20 + i % 30}\n" for i in range(ROWS)
)


@pytest.fixture
def timed(tmp_path: Path) -> str:
    path = tmp_path / "timed.csv"
    path.write_text(TIMED)
    return str(path)


def _run(caplog: pytest.LogCaptureFixture, **fields: object) -> tuple[list[Request], list[str]]:
    with caplog.at_level(logging.WARNING, logger="kvsim.workload"):
        reqs = generate_requests(
            WorkloadSpec.model_validate(fields), np.random.default_rng(0), max_model_len=4096
        )
    return reqs, [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_timed_trace_replays_its_own_arrivals_by_default(
    timed: str, caplog: pytest.LogCaptureFixture
) -> None:
    reqs, warnings = _run(caplog, trace=timed)
    assert len(reqs) == ROWS  # its own row count, not 1,000 draws
    assert [r.arrival_time_s for r in reqs] == [i / 4 for i in range(ROWS)]
    assert [r.prompt_tokens for r in reqs[:3]] == [100, 101, 102]
    assert warnings == []
    # the same as saying arrival = "trace"
    spelled, _ = _run(caplog, trace=timed, arrival="trace")
    assert [(r.arrival_time_s, r.prompt_tokens) for r in spelled] == [
        (r.arrival_time_s, r.prompt_tokens) for r in reqs
    ]
    # a window and a count apply to the replay
    reqs, _ = _run(caplog, trace=timed, num_requests=10)
    assert [r.arrival_time_s for r in reqs] == [i / 4 for i in range(10)]
    reqs, _ = _run(caplog, trace=timed, start_s=50.0, duration_s=10.0)
    assert len(reqs) == 40  # rows at 50, 50.25, ..., 59.75 s
    assert reqs[0].arrival_time_s == 0.0


def test_a_config_asking_for_synthetic_arrivals_gets_them(
    timed: str, caplog: pytest.LogCaptureFixture
) -> None:
    # explicit arrival: quiet, 1,000 requests by default (as before)
    reqs, warnings = _run(caplog, trace=timed, arrival="poisson", sample="resample")
    assert len(reqs) == 1000
    assert warnings == []
    # a rate without arrival asks for Poisson arrivals at that rate, and is told what it gets
    forget_warnings(caplog)
    reqs, warnings = _run(caplog, trace=timed, rate_per_s=2.0, num_requests=50)
    assert len(reqs) == 50
    assert reqs[-1].arrival_time_s != 49 / 4  # drawn, not the file's
    assert warnings == [
        f"{timed} has arrival times, but workload.rate_per_s without workload.arrival asks for "
        "synthetic arrivals: its rows give lengths only, at poisson arrivals at "
        "workload.rate_per_s; set workload.arrival = 'poisson' to say so, or leave rate_per_s "
        "out to replay its arrivals"
    ]


def test_a_lengths_only_trace_still_gets_poisson_arrivals(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "lengths.csv"
    path.write_text("prompt_tokens,output_tokens\n10,5\n12,6\n14,7\n")
    reqs, _ = _run(caplog, trace=str(path), sample="replay")
    assert len(reqs) == 3
    assert [r.arrival_time_s for r in reqs] != [0.0, 0.0, 0.0]  # Poisson gaps at 1 req/s


def test_the_default_is_resolved_alike_for_catalogued_traces_and_reloaded_configs(
    timed: str,
) -> None:
    # a catalogued trace's arrival times are known without its file: resolved on validation
    assert WorkloadSpec(trace="azure_conv").arrival == "trace"
    assert WorkloadSpec(trace="azure_conv", rate_per_s=5.0).arrival == "poisson"
    assert WorkloadSpec(trace="sharegpt_opt").arrival == "poisson"  # lengths only
    assert WorkloadSpec().arrival == "poisson"
    # a trace file's are known once it is read: its canonical form leaves arrival, rate and cv
    # out, so a reloaded config (a sweep point's config.json) replays it too
    config = config_from_dict({"workload": {"trace": timed}})
    assert config.workload.arrival is None
    again = config_from_dict(json.loads(config.canonical_json()))
    assert again.workload.arrival is None
    assert again.key() == config.key()


def test_synthetic_turns_are_refused_on_a_replayed_trace(
    timed: str, caplog: pytest.LogCaptureFixture
) -> None:
    # num_turns chains drawn rows into conversations: on a replay it moved row 2 (0.5 s) to
    # 30 s, a turn gap after row 1, and prepended row 1's prompt and output to its own
    with pytest.raises(
        ValueError, match=r"trace .*timed.csv, replayed at its arrivals\): num_turns"
    ):
        _run(caplog, trace=timed, num_turns=2)
    with pytest.raises(ValueError, match=r"num_turns \(2\) chains drawn rows"):  # (said so)
        WorkloadSpec.model_validate({"trace": timed, "arrival": "trace", "num_turns": 2})
    # drawn at synthetic arrivals, the trace's lengths make conversations as asked: a second
    # turn's prompt holds the first's (the rows' prompts are 100 to 149 tokens)
    reqs, _ = _run(caplog, trace=timed, num_turns=2, arrival="poisson", rate_per_s=1.0)
    assert max(r.prompt_tokens for r in reqs) > 149
