"""Hostile measured-run files: each refused with one error naming the file, the line (or JSON
path), the field and the value; ``kvsim validate`` prints it as one ``error:`` line, status 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsim.cli import app
from kvsim.validate.h100 import read_h100_run
from kvsim.validate.rtx4090 import read_rtx4090_run

from .synthetic import TRAIN, h100_requests, h100_truth, write_h100, write_rtx4090


def _h100_error(tmp_path: Path, **changes: object) -> str:
    write_h100(tmp_path, **changes)
    with pytest.raises(ValueError, match=re.escape(str(tmp_path))) as caught:  # names the file
        read_h100_run(tmp_path, TRAIN)
    return str(caught.value)


def test_negative_arrival_names_the_request_field_and_value(tmp_path: Path) -> None:
    requests = h100_requests()
    requests[3]["arrival_time_us"] = -5
    message = _h100_error(tmp_path, requests=requests)
    assert f"{TRAIN}.json: requests[3]: arrival_time_us must be an integer >= 0, got -5" in message


def test_arrivals_out_of_order_are_refused(tmp_path: Path) -> None:
    requests = h100_requests()
    requests[2]["arrival_time_us"] = 50_000  # before request 1's 100,000
    assert "requests[2]: arrival_time_us 50000 is earlier" in _h100_error(
        tmp_path, requests=requests
    )


def test_a_measured_request_with_no_prompt_is_refused(tmp_path: Path) -> None:
    requests = h100_requests()
    requests[2]["input_tokens"] = 0  # only a has_error request may have 0 (not recorded)
    assert "requests[2]: input_tokens must be an integer >= 1, got 0" in _h100_error(
        tmp_path, requests=requests
    )


def test_nan_in_the_ground_truth_names_the_row(tmp_path: Path) -> None:
    truth = h100_truth()
    write_h100(tmp_path, truth=truth)
    path = tmp_path / "h100" / "replay" / f"{TRAIN}_ground_truth.json"
    path.write_text(path.read_text().replace('"ttft_s": 0.022', '"ttft_s": NaN', 1))
    with pytest.raises(
        ValueError, match=r"_ground_truth.json: \[2\]: ttft_s must be a number .*got nan"
    ):
        read_h100_run(tmp_path, TRAIN)


def test_e2e_shorter_than_ttft_is_refused(tmp_path: Path) -> None:
    truth = h100_truth()
    truth[4]["e2e_s"] = 0.001
    assert "[4]: e2e_s 0.001 is shorter than ttft_s 0.024" in _h100_error(tmp_path, truth=truth)


def test_a_request_sent_twice_is_refused(tmp_path: Path) -> None:
    requests = h100_requests()
    requests.append({**requests[-1], "index": 1})
    message = _h100_error(tmp_path, requests=requests)
    assert f"requests[{len(requests) - 1}]: index 1 is sent twice (requests[1] and" in message


def test_a_request_measured_twice_is_refused(tmp_path: Path) -> None:
    # a second entry for index 2 replaced the first's measurement without a word
    truth = h100_truth()
    truth.append({**truth[2], "ttft_s": 500.0, "e2e_s": 999.0})
    message = _h100_error(tmp_path, truth=truth)
    assert f"[{len(truth) - 1}]: index 2 is measured twice (entries [2] and " in message


def test_a_measurement_of_no_replayed_request_is_warned(tmp_path: Path, caplog) -> None:
    import logging

    truth = h100_truth()
    truth.append({**truth[0], "index": 99_999})
    write_h100(tmp_path, truth=truth)
    with caplog.at_level(logging.WARNING, logger="kvsim.validate"):
        read_h100_run(tmp_path, TRAIN)
    said = [r.getMessage() for r in caplog.records]
    assert any("1 measurement(s) of requests the replay file does not run" in m for m in said)
    assert any("(first: index 99999) are left out" in m for m in said)


def test_a_stage_at_rate_zero_names_the_stage(tmp_path: Path) -> None:
    profile = {
        "data": {"shared_prefix": {"output_len": 5}},
        "load": {"stages": [{"duration": 0.6, "rate": 0}]},
    }
    message = _h100_error(tmp_path, profile=json.dumps(profile))
    assert (
        "profile.yaml: load.stages[0]: rate must be a number from 1e-06 to 1e+06, got 0" in message
    )


def test_malformed_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    message = _h100_error(tmp_path, resolved="data:\n  shared_prefix: [1, 2\n")
    assert "results/config.yaml line" in message
    assert "malformed YAML" in message


def test_an_experiment_split_twice_is_refused(tmp_path: Path) -> None:
    # the last line won: a run split.txt calls validate was fitted on as train, unsaid
    message = _h100_error(tmp_path, split=f"{TRAIN} validate\n\n{TRAIN} train\n")
    assert f"split.txt line 3: {TRAIN} is split again ('train'; line 1 says 'validate')" in (
        message
    )


def test_a_split_file_that_is_not_text_names_the_file(tmp_path: Path) -> None:
    write_h100(tmp_path)
    (tmp_path / "h100" / "split.txt").write_bytes(b"\xff\xfe not text\n")
    with pytest.raises(ValueError, match=r"split\.txt.*UTF-8"):
        read_h100_run(tmp_path, TRAIN)


def test_a_bad_split_line_names_the_line(tmp_path: Path) -> None:
    message = _h100_error(tmp_path, split=f"{TRAIN} train\n{TRAIN} tuning\n")
    assert "split.txt line 2: expected 'EXPERIMENT SPLIT'" in message
    assert "tuning" in message


def _rtx_error(tmp_path: Path, **changes: object) -> str:
    write_rtx4090(tmp_path, **changes)
    with pytest.raises(ValueError, match=re.escape(str(tmp_path))) as caught:  # names the file
        read_rtx4090_run(tmp_path)
    return str(caught.value)


def test_a_broken_json_line_names_file_and_line(tmp_path: Path) -> None:
    lines = [
        json.dumps({"input_toks": 2, "output_toks": 4, "input_tok_ids": [1, 2]}),
        "{oops",
        "{}",
    ]
    message = _rtx_error(tmp_path, workload=lines)
    assert "workload.jsonl line 2: invalid JSON" in message


def test_a_bad_timestamp_names_line_field_and_value(tmp_path: Path) -> None:
    write_rtx4090(tmp_path)
    path = tmp_path / "rtx4090-llama-3.1-8b" / "requests.jsonl"
    lines = path.read_text().splitlines()
    row = json.loads(lines[2])
    row["first_token_ts"] = "soon"
    lines[2] = json.dumps(row)
    message = _rtx_error(tmp_path, requests=lines)
    assert "requests.jsonl line 3: first_token_ts must be a number" in message
    assert "'soon'" in message


def test_token_ids_that_disagree_with_the_count_are_refused(tmp_path: Path) -> None:
    lines = [json.dumps({"input_toks": 3, "output_toks": 4, "input_tok_ids": [1, 2]})] * 3
    assert "workload.jsonl line 1: input_toks is 3, input_tok_ids holds 2" in _rtx_error(
        tmp_path, workload=lines
    )


@pytest.mark.parametrize(("field", "sent"), [("input_toks", 40), ("output_toks", 4)])
def test_requests_that_disagree_with_the_workload_are_refused(
    tmp_path: Path, field: str, sent: int
) -> None:
    """requests.jsonl line 2 says 99 where workload.jsonl line 2 says ``sent`` (synthetic.py's
    second prompt has 32 + 8 = 40 token ids; every output is 4 tokens)."""
    write_rtx4090(tmp_path)
    path = tmp_path / "rtx4090-llama-3.1-8b" / "requests.jsonl"
    lines = path.read_text().splitlines()
    row = json.loads(lines[1])
    assert row[field] == sent
    row[field] = 99
    lines[1] = json.dumps(row)
    message = _rtx_error(tmp_path, requests=lines)
    assert f"requests.jsonl line 2: {field} is 99, workload.jsonl line 2 has {sent}" in message


def test_a_token_id_that_is_not_one_names_its_place(tmp_path: Path) -> None:
    lines = [json.dumps({"input_toks": 2, "output_toks": 4, "input_tok_ids": [1, -7]})] * 3
    assert "line 1: input_tok_ids[1] must be a token id in [0, 2^31), got -7" in _rtx_error(
        tmp_path, workload=lines
    )


def test_kv_usage_over_100_names_the_csv_line(tmp_path: Path) -> None:
    series = "t,running,waiting,kv_cache_pct\n1.0,1,0,50\n2.0,1,0,140\n"
    message = _rtx_error(tmp_path, series=series)
    assert (
        "timeseries.csv line 3: kv_cache_pct must be a number from 0 to 100, got '140'" in message
    )


def test_the_cli_prints_one_error_line_with_status_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = h100_requests()
    requests[3]["arrival_time_us"] = "soon"
    write_h100(tmp_path, requests=requests)
    monkeypatch.setenv("KVSIM_REAL_VLLM", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["validate", "tiny-tp1-general"])
    assert result.exit_code == 2
    assert result.output.count("error:") == 1
    assert "Traceback" not in result.output
    assert "requests[3]: arrival_time_us must be an integer >= 0, got 'soon'" in result.output


def test_an_unknown_run_lists_the_known_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_h100(tmp_path)
    monkeypatch.setenv("KVSIM_REAL_VLLM", str(tmp_path))
    result = CliRunner().invoke(app, ["validate", "nope"])
    assert result.exit_code == 2
    assert "no measured run 'nope'" in result.output
    assert TRAIN in result.output


def test_server_settings_kvsim_cannot_replay_name_the_run(tmp_path: Path, monkeypatch) -> None:
    # 2 blocks of 16 tokens cannot hold a 512-token max_model_len request: pydantic's
    # "1 validation error for SimConfig ... For further information visit ..." named no run
    write_h100(tmp_path)
    replay = tmp_path / "h100" / "replay" / f"{TRAIN}.json"
    data = json.loads(replay.read_text())
    data["config"]["kv_blocks_total_gpu"] = 2
    replay.write_text(json.dumps(data))
    monkeypatch.setenv("KVSIM_REAL_VLLM", str(tmp_path))
    result = CliRunner().invoke(app, ["validate", TRAIN, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert errors[0].startswith(f"error: run {TRAIN}: the server settings in its replay file's")
    assert "2 blocks of 16 tokens" in errors[0]
    assert "validation error for SimConfig" not in result.output


def test_stages_sending_another_count_than_the_replay_holds_are_warned(
    tmp_path: Path, caplog
) -> None:
    # a first stage of 1 request a second for 10 s (10 requests) beside 12 replayed: the
    # stages' counts assign the requests, so its per-stage errors mixed stages, unsaid
    import logging

    profile = {
        "data": {"shared_prefix": {"output_len": 5}},
        "load": {"stages": [{"duration": 10, "rate": 1}, {"duration": 0.3, "rate": 20}]},
    }
    write_h100(tmp_path, profile=json.dumps(profile))
    with caplog.at_level(logging.WARNING, logger="kvsim.validate"):
        read_h100_run(tmp_path, TRAIN)
    said = [r.getMessage() for r in caplog.records]
    assert any("its load stages send 16 requests (rate x duration each)" in m for m in said)
    assert any("holds 12: requests are assigned to stages" in m for m in said)


def test_a_system_prompt_as_long_as_the_prompts_is_warned(tmp_path: Path, caplog) -> None:
    # system_prompt_len 100,000 beside 40-43-token prompts: every prompt became all system
    # prompt, shared whole by its group (prefix hits inflated), without a word
    import logging

    resolved = (
        "data:\n  type: shared_prefix\n  shared_prefix:\n    num_groups: 2\n"
        "    num_prompts_per_group: 2\n    system_prompt_len: 100000\n    output_len: 5\n"
    )
    write_h100(tmp_path, resolved=resolved)
    with caplog.at_level(logging.WARNING, logger="kvsim.validate"):
        read_h100_run(tmp_path, TRAIN)
    said = " ".join(r.getMessage() for r in caplog.records)
    # 12 requests, all of them (request 9, whose prompt is not recorded, takes its slot's)
    assert "12 of 12 prompts are no longer than the system prompt (system_prompt_len 100000" in said


def test_an_exp_config_that_disagrees_with_the_replay_file_is_warned(
    tmp_path: Path, caplog
) -> None:
    # tensor_parallelism 4 and another model beside the replay file's 1 and org/Tiny: taken
    # silently (the replay file's are replayed)
    import logging

    write_h100(tmp_path)
    exp = tmp_path / "h100" / "default_args" / TRAIN / "exp-config.yaml"
    exp.write_text("model: org/Other\nmax_model_len: 512\nmax_num_seqs: 8\ntensor_parallelism: 4\n")
    with caplog.at_level(logging.WARNING, logger="kvsim.validate"):
        read_h100_run(tmp_path, TRAIN)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "disagree: tensor_parallelism 4 against 1; model 'org/Other' against model_id" in said


def test_timestamps_the_run_outlasts_many_times_are_warned(tmp_path: Path, caplog) -> None:
    # queued_ts in ms (x 1,000): arrivals spanning 400 s of a run that lasted 10 s gave errors
    # of -100 % without a word
    import logging

    from .synthetic import RTX_IDS, RTX_TIMES

    requests = [
        json.dumps(
            {
                "request_id": f"bench-{k}",
                "input_toks": len(RTX_IDS[k]),
                "output_toks": 4,
                "arrival_time": 1_787_267_980.0,
                "queued_ts": t[0] * 1000,
                "scheduled_ts": t[1] * 1000,
                "first_token_ts": t[2] * 1000,
                "last_token_ts": t[3] * 1000,
            }
        )
        for k, t in enumerate(RTX_TIMES)
    ]
    write_rtx4090(tmp_path, requests=requests)
    meta_path = tmp_path / "rtx4090-llama-3.1-8b" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["finished_at"] = "2026-08-20T23:19:49.900000Z"  # 10 s after started_at
    meta_path.write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING, logger="kvsim.validate"):
        read_rtx4090_run(tmp_path)
    said = " ".join(r.getMessage() for r in caplog.records)
    # queued_ts 1,000,000 to 1,000,400 ms: a 400 "s" span against the 10 s run
    assert "the requests' queued_ts span 400 s, but the run lasted 10 s" in said


def test_a_kv_usage_logged_as_a_share_is_warned(tmp_path: Path, caplog) -> None:
    # kv_cache_pct 0.97 read as 0.97 % of the pool: a difference of 95 points, unsaid
    import logging

    series = "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n1.0,80,2,2,1,0.5\n"
    write_rtx4090(tmp_path, series=series)
    with caplog.at_level(logging.WARNING, logger="kvsim.validate"):
        read_rtx4090_run(tmp_path)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "kv_cache_pct is at most 0.5 while requests run: a share (0-1)" in said


def test_send_times_in_another_unit_are_warned(tmp_path: Path, caplog) -> None:
    # arrival_time_us given in ms (/ 1,000): 12 requests sent within 1 ms of stages lasting
    # 0.9 s, replayed as one burst (TTFT errors in the thousands of percent), without a word
    import logging

    requests = h100_requests()
    for row in requests:
        row["arrival_time_us"] //= 1000
    write_h100(tmp_path, requests=requests)
    with caplog.at_level(logging.WARNING, logger="kvsim.validate"):
        read_h100_run(tmp_path, TRAIN)
    said = " ".join(r.getMessage() for r in caplog.records)
    # the last request at 850,000 us -> 850 "us": sent over 0.00085 s against 0.6 + 0.3 s
    assert "the requests are sent over 0.00085 s, but profile.yaml's load stages last 0.9 s" in said


def test_latencies_past_the_clients_timeout_are_warned(tmp_path: Path, caplog) -> None:
    # ground truth in ms: E2E of 24,000 "s" where the client gives up at 300 s; errors of
    # -99.9 % without a word
    import logging

    truth = h100_truth()
    for row in truth:
        if not row["has_error"]:  # (E2E of 1-12 s written in ms: 11 of them past 300)
            row["ttft_s"] = 100.0 * (row["index"] + 1)
            row["e2e_s"] = 1000.0 * (row["index"] + 1)
    write_h100(tmp_path, truth=truth)
    with caplog.at_level(logging.WARNING, logger="kvsim.validate"):
        read_h100_run(tmp_path, TRAIN)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "11 measured e2e_s exceed the client's 300 s timeout" in said
