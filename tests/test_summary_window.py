"""An ``arrivals`` summary window with no engine step says which metrics it leaves out, and
``summary.json`` stays strict JSON (``null`` where a metric is NaN)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest

from kvsim.base.textfile import json_text
from kvsim.config import config_from_dict
from kvsim.engine import simulate
from kvsim.results import Results, read_summary

HEADER = "arrival_time_s,prompt_tokens,output_tokens\n"


def _run(tmp_path: Path, rows: str, window: str = "arrivals") -> Results:
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + rows)
    workload = {"trace": str(trace), "arrival": "trace"}
    return simulate(config_from_dict({"workload": workload, "summary_window": window}))


def _strict(text: str) -> dict:
    def refuse(constant: str) -> None:
        raise AssertionError(f"not strict JSON: {constant}")

    data: dict = json.loads(text, parse_constant=refuse)
    return data


@pytest.mark.parametrize(
    ("rows", "said"),
    [
        # one request: first = last = 0 s, the window [0, 0) is empty
        ("0,100,10\n", "[0, 0) s, holds no engine step (1 request arriving from 0 to 0 s)"),
        # three at 5 s: [5 + 0.1 * 0, 5) = [5, 5)
        ("5,100,10\n5,50,10\n5,20,3\n", "[5, 5) s, holds no engine step (3 requests arriving"),
    ],
    ids=["one_request", "one_instant"],
)
def test_empty_arrivals_window_warns_and_writes_null(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, rows: str, said: str
) -> None:
    with caplog.at_level(logging.WARNING):
        results = _run(tmp_path, rows)
    assert said in caplog.text
    for metric in ("token_states_pct", "free_pct", "kv_cache_usage_perc", "token_utilization_perc"):
        assert metric in caplog.text
        assert metric not in results.summary
    summary = _strict((results.save(tmp_path / "out", exports=False) / "summary.json").read_text())
    assert summary["num_requests_running_step_mean"] is None
    assert math.isnan(Results.load(tmp_path / "out").summary["num_requests_running_step_mean"])


def test_a_window_with_steps_is_quiet(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # arrivals 0, 0.01, 0.02 s: the window [0.002, 0.02) lies inside the first request's decode
    # (50 steps of about 23 ms each)
    with caplog.at_level(logging.WARNING):
        results = _run(tmp_path, "0,100,50\n0.01,100,50\n0.02,100,50\n")
    assert "summary_window" not in caplog.text
    assert results.summary["kv_cache_usage_perc"] > 0


def test_run_window_is_unaffected(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        results = _run(tmp_path, "0,100,10\n", window="run")
    assert "summary_window" not in caplog.text
    # 100 + 10 - 1 = 109 token slots at the end: ceil(109 / 16) = 7 blocks, the peak usage
    # over the 823 blocks a request can hold (824 less v1's null block)
    assert results.summary["kv_cache_usage_perc_max"] == pytest.approx(7 / 823)


def test_json_text_writes_null_for_nan_and_infinities() -> None:
    value = {"a": math.nan, "b": [math.inf, 1.5], "c": {"d": -math.inf, "e": "x"}, "f": 2}
    assert json_text(value, sort_keys=True) == (
        '{"a": null, "b": [null, 1.5], "c": {"d": null, "e": "x"}, "f": 2}'
    )


def test_read_summary_reads_null_as_nan(tmp_path: Path) -> None:
    path = tmp_path / "summary.json"
    path.write_text('{"ttft": null, "num_requests": 3, "engine": "vllm-v1"}')
    summary = read_summary(path)
    assert math.isnan(summary["ttft"])
    assert (summary["num_requests"], summary["engine"]) == (3, "vllm-v1")
    path.write_text("[1]")
    with pytest.raises(ValueError, match=r"summary\.json: expected a JSON object"):
        read_summary(path)


def test_running_peak_follows_the_window(tmp_path: Path) -> None:
    # arrivals 0, 0.05 and 0.2 s: the window is [0.1 * 0.2, 0.2) = [0.02, 0.2). Each request
    # decodes 50-100 tokens at several ms a step, so the first two still run when the third
    # arrives at 0.2 s: 3 run at once over the run, but only the first two arrived inside the
    # window, so its peak is 2, as its mean and kv_cache_usage_perc_max count only its steps
    rows = "0,40,100\n0.05,40,100\n0.2,30,50\n"
    assert _run(tmp_path, rows, window="run").summary["num_requests_running_max"] == 3
    assert _run(tmp_path, rows).summary["num_requests_running_max"] == 2
