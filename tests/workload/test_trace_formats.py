"""One small example file per trace format, written here and replayed through the engine and the
CLI. Expected values are read off the files by hand; prefix-cache hits follow vLLM's rules (full
16-token blocks, at most prompt - 1 tokens, the first request's blocks cached when it is done)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from kvsim.cli import app
from kvsim.config import config_from_dict
from kvsim.engine import simulate
from kvsim.engine.intake import requests_for
from kvsim.results import Results

CACHING = {"enable_prefix_caching": True, "block_size_tokens": 16}
OWN_CSV = (
    "arrival_time_s,prompt_tokens,output_tokens,session_id,prefix_group,prefix_tokens\n"
    "0,40,10,chat-a,,\n"  # turn 0 of chat-a
    "100,64,5,chat-a,,\n"  # turn 1: 40 + 10 history + 14 new tokens
    "200,40,4,,sys,32\n"  # a 32-token system prompt, then 8 own tokens
    "300,50,4,,sys,32\n"
)
AZURE_2023 = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:47.1805900,100,10\n"
)
AZURE_2024 = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2024-05-10 00:00:00.009930+00:00,1808,10\n"
    "2024-05-10 00:00:01.509930+00:00,1180,8\n"
    "2024-05-10 02:00:03.009930+02:00,1000,5\n"  # 00:00:03.009930 UTC
)
VIDUR = "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,374,44\n4.314579,396,109\n"
BURSTGPT = (
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
    "5,ChatGPT,472,18,490,Conversation log\n"
    "45,GPT-4,1087,0,1087,Conversation log\n"  # a failed request (0 response tokens)
    "46,ChatGPT,200,30,230,API log\n"
)
MOONCAKE = (
    '{"timestamp": 0, "input_length": 1024, "output_length": 4, "hash_ids": [7, 8]}\n'
    '{"timestamp": 20000, "input_length": 1024, "output_length": 4, "hash_ids": [7, 8]}\n'
)
BAILIAN = (
    '{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0.5, "input_length": 64, '
    '"output_length": 3, "type": "text", "turn": 1, "hash_ids": [1, 2, 3, 4]}\n'
    '{"chat_id": 2, "parent_chat_id": 1, "timestamp": 100.5, "input_length": 64, '
    '"output_length": 3, "type": "text", "turn": 2, "hash_ids": [1, 2, 3, 4]}\n'
    '{"chat_id": 9, "parent_chat_id": 5, "timestamp": 150.0, "input_length": 20, '
    '"output_length": 2, "type": "search", "turn": 3, "hash_ids": [11, 12]}\n'
)


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _run(workload: dict, cache: dict | None = None) -> Results:
    return simulate(config_from_dict({"workload": workload, "cache": cache or CACHING}))


def _rows(results: Results) -> list[tuple]:
    df = results.requests.sort_values("req_id")
    cols = ["arrival_time_s", "prompt_tokens", "output_tokens", "num_cached_tokens"]
    return [tuple(r) for r in df[cols].itertuples(index=False)]


def test_own_csv_sessions_and_prefix_groups(tmp_path: Path) -> None:
    results = _run({"trace": _write(tmp_path, "own.csv", OWN_CSV), "arrival": "trace"})
    assert _rows(results) == [
        (0.0, 40, 10, 0),
        # turn 1 (64 tokens) starts with turn 0's 40 prompt + 10 output tokens; turn 0 computed
        # KV for 40 + 10 - 1 = 49 tokens, i.e. 3 full blocks (48 tokens), all cached; turn 1 may
        # hit at most floor((64 - 1) / 16) = 3 blocks: 48 tokens
        (100.0, 64, 5, 48),
        (200.0, 40, 4, 0),
        # the shared 32-token prefix is 2 full blocks; the third block differs: 32 tokens
        (300.0, 50, 4, 32),
    ]
    reqs = requests_for(
        config_from_dict({"workload": {"trace": str(tmp_path / "own.csv"), "arrival": "trace"}})
    )
    assert [r.session_id for r in reqs] == [0, 0, None, None]  # "chat-a" numbered 0


def test_session_ids_with_leading_zeros_are_their_own_sessions(tmp_path: Path) -> None:
    """``01`` and ``1`` are two labels: two sessions, numbered by first appearance (as int they
    were one, and the second turn's prompt did not hold the first's: no hit either way, but one
    conversation where the file has two); plain integers stay as written."""
    text = "prompt_tokens,output_tokens,arrival_time_s,session_id\n40,5,0,01\n40,5,10,1\n"
    trace = _write(tmp_path, "zeros.csv", text)
    reqs = requests_for(config_from_dict({"workload": {"trace": trace, "arrival": "trace"}}))
    assert [r.session_id for r in reqs] == [0, 1]
    text = "prompt_tokens,output_tokens,arrival_time_s,session_id\n40,5,0,7\n40,5,10,-3\n"
    trace = _write(tmp_path, "ints.csv", text)
    reqs = requests_for(config_from_dict({"workload": {"trace": trace, "arrival": "trace"}}))
    assert [r.session_id for r in reqs] == [7, -3]


def test_own_parquet_with_hash_ids(tmp_path: Path) -> None:
    path = tmp_path / "own.parquet"
    pd.DataFrame(
        {
            "arrival_time_s": [10.0, 60.0],
            "prompt_tokens": [64, 64],
            "output_tokens": [3, 3],
            "hash_ids": [[1, 2, 3, 4], [1, 2, 3, 4]],
        }
    ).to_parquet(path)
    workload = {"trace": str(path), "arrival": "trace", "hash_block_size_tokens": 16}
    # arrivals as written (10 s, 60 s); 4 equal 16-token blocks: hits 3 blocks
    assert _rows(_run(workload)) == [(10.0, 64, 3, 0), (60.0, 64, 3, 48)]


def test_own_csv_lengths_only_is_sampled(tmp_path: Path) -> None:
    path = _write(tmp_path, "lens.csv", "prompt_tokens,output_tokens\n30,5\n40,6\n")
    results = _run({"trace": path, "sample": "replay", "rate_per_s": 10.0})
    assert _rows(results)[0][1:3] == (30, 5)
    assert len(results.requests) == 2


def test_own_csv_parallel_samples_fan_out_under_v1(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "n.csv", "arrival_time_s,prompt_tokens,output_tokens,n\n0,20,5,2\n1,30,4,\n"
    )
    results = _run({"trace": path, "arrival": "trace"})
    # vLLM v1 serves n = 2 as two requests of the same prompt; the blank n is 1
    assert results.requests["parent_id"].iloc[:2].tolist() == [0, 0]
    assert results.requests["prompt_tokens"].tolist() == [20, 20, 30]
    assert pd.isna(results.requests["parent_id"].iloc[2])


def test_own_csv_beams_need_the_v0_engine(tmp_path: Path) -> None:
    text = "arrival_time_s,prompt_tokens,output_tokens,beam_width\n0,20,5,2\n1,30,4,1\n"
    path = _write(tmp_path, "beam.csv", text)
    with pytest.raises(ValueError, match=r"beam\.csv\): 1 request\(s\) with beam_width > 1"):
        _run({"trace": path, "arrival": "trace"})
    results = simulate(
        config_from_dict(
            {
                "workload": {"trace": path, "arrival": "trace"},
                "scheduler": {"engine": "vllm-v0"},
            }
        )
    )
    assert results.requests["output_tokens"].tolist() == [5, 4]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # 18:15:47.1805900 - 18:15:46.6805900 = 0.5 s
        (AZURE_2023, [(0.0, 374, 44), (0.5, 100, 10)]),
        # 2024 rows carry +00:00; 02:00:03.009930+02:00 is 00:00:03.009930 UTC: 3.0 s
        (AZURE_2024, [(0.0, 1808, 10), (1.5, 1180, 8), (3.0, 1000, 5)]),
    ],
    ids=["2023", "2024"],
)
def test_azure(tmp_path: Path, text: str, expected: list[tuple]) -> None:
    results = _run({"trace": _write(tmp_path, "azure.csv", text), "arrival": "trace"}, {})
    got = [row[:3] for row in _rows(results)]
    assert [(pytest.approx(t, abs=1e-9), p, o) for t, p, o in expected] == got


SPACED = "arrival_time_s,prompt_tokens,output_tokens\n100,11,5\n200,22,5\n300,33,5\n"


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        # no window: the file's times, 100 s before the first arrival
        ({}, [(100.0, 11), (200.0, 22), (300.0, 33)]),
        # [150, inf): rows at 200 and 300, replayed from 150: 200 - 150 = 50, 300 - 150 = 150
        ({"start_s": 150}, [(50.0, 22), (150.0, 33)]),
        # [50, 250): rows at 100 and 200, at 100 - 50 = 50 and 200 - 50 = 150
        ({"start_s": 50, "duration_s": 200}, [(50.0, 11), (150.0, 22)]),
        # [0, 150) at half speed: the row at 100 arrives at 100 * 0.5 = 50
        ({"duration_s": 150, "time_scale": 0.5}, [(50.0, 11)]),
    ],
    ids=["all", "start", "start_duration", "time_scale"],
)
def test_start_s_selects_on_the_files_time_axis(
    tmp_path: Path, window: dict, expected: list[tuple]
) -> None:
    path = _write(tmp_path, "spaced.csv", SPACED)
    results = _run({"trace": path, "arrival": "trace", **window})
    assert [row[:2] for row in _rows(results)] == expected


def test_unix_times_count_from_the_earliest_row(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # 1,700,000,000 s is 2023-11-14: every row a Unix time, so a wall clock; 2.5 and 60 s later
    text = "arrival_time_s,prompt_tokens,output_tokens\n1700000002.5,22,5\n1700000000,11,5\n"
    text += "1700000060,33,5\n"
    with caplog.at_level(logging.WARNING):
        results = _run({"trace": _write(tmp_path, "unix.csv", text), "arrival": "trace"})
    assert sorted(row[:2] for row in _rows(results)) == [(0.0, 11), (2.5, 22), (60.0, 33)]
    assert any("Unix times" in r.getMessage() for r in caplog.records)


def test_vidur_trace_replay(tmp_path: Path) -> None:
    path = _write(tmp_path, "vidur.csv", VIDUR)
    results = _run({"trace": path, "arrival": "trace"}, {})
    assert [row[:3] for row in _rows(results)] == [(0.0, 374, 44), (4.314579, 396, 109)]
    lengths = _write(tmp_path, "lens.csv", "num_prefill_tokens,num_decode_tokens\n5,6\n")
    with pytest.raises(ValueError, match=r"lens\.csv has no arrival times"):
        _run({"trace": lengths, "arrival": "trace"})


def test_burstgpt_drops_failed_requests_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _write(tmp_path, "burst.csv", BURSTGPT)
    with caplog.at_level(logging.WARNING):
        results = _run({"trace": path, "arrival": "trace"}, {})
    # Timestamp kept as written: 5 and 46 s; the 0-token response is dropped
    assert [row[:3] for row in _rows(results)] == [(5.0, 472, 18), (46.0, 200, 30)]
    assert any("dropped 1 of 3 rows" in r.getMessage() for r in caplog.records)


def test_mooncake_512_token_blocks(tmp_path: Path) -> None:
    results = _run({"trace": _write(tmp_path, "mc.jsonl", MOONCAKE), "arrival": "trace"})
    # 20,000 ms = 20 s; two equal 512-token hash blocks: 1,024 tokens shared, at most
    # floor(1023 / 16) = 63 blocks hit: 1,008 tokens
    assert _rows(results) == [(0.0, 1024, 4, 0), (20.0, 1024, 4, 1008)]


def test_bailian_16_token_blocks_and_sessions(tmp_path: Path) -> None:
    path = _write(tmp_path, "qwen_traceA_blksz_16.jsonl", BAILIAN)
    results = _run({"trace": path, "arrival": "trace"})
    # timestamps in seconds, kept; 4 equal 16-token blocks: 3 hit (48 tokens)
    assert _rows(results) == [(0.5, 64, 3, 0), (100.5, 64, 3, 48), (150.0, 20, 2, 0)]
    reqs = requests_for(config_from_dict({"workload": {"trace": path, "arrival": "trace"}}))
    # chat 2's parent is chat 1 (a root); chat 9's parent 5 is not in the file
    assert [r.session_id for r in reqs] == [1, 1, 5]


def test_jsonl_with_a_utf8_bom_is_read_as_csv_is(tmp_path: Path) -> None:
    path = tmp_path / "qwen.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + BAILIAN.encode())
    reqs = requests_for(config_from_dict({"workload": {"trace": str(path), "arrival": "trace"}}))
    # detected as bailian (chat_id on line 1, past the BOM): timestamps in seconds, as written
    assert [(r.arrival_time_s, r.prompt_tokens) for r in reqs] == [
        (0.5, 64),
        (100.5, 64),
        (150.0, 20),
    ]
    assert [r.session_id for r in reqs] == [1, 1, 5]


def test_sessions_under_synthetic_arrivals(tmp_path: Path) -> None:
    text = "prompt_tokens,output_tokens,session_id\n10,5,a\n30,5,a\n12,4,b\n40,5,a\n"
    path = _write(tmp_path, "chat.csv", text)
    config = config_from_dict(
        {"workload": {"trace": path, "sample": "replay", "rate_per_s": 0.5, "turn_gap_s": 7.0}}
    )
    reqs = requests_for(config)
    turns_a = [r.arrival_time_s for r in reqs if r.session_id == 0]
    start_b = next(r.arrival_time_s for r in reqs if r.session_id == 1)
    # conversation a starts at the first drawn time: turns 7 s apart
    assert turns_a == [0.0, 7.0, 14.0]
    assert start_b > 0.0
    assert sorted(r.prompt_tokens for r in reqs) == [10, 12, 30, 40]


def test_short_turns_and_unknown_columns_are_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = (
        "arrival_time_s,prompt_tokens,output_tokens,session_id,note\n"
        "0,40,10,7,x\n"
        "50,20,5,7,y\n"  # shorter than the 40 + 10 history: shares none of it
    )
    path = _write(tmp_path, "warn.csv", text)
    with caplog.at_level(logging.WARNING, logger="kvsim.workload"):
        reqs = requests_for(config_from_dict({"workload": {"trace": path, "arrival": "trace"}}))
    messages = [r.getMessage() for r in caplog.records]
    assert any("ignored 1 column(s)" in m and "'note'" in m for m in messages)
    assert any("1 turn(s) have a prompt shorter" in m for m in messages)
    assert reqs[1].token_segments == ((("prompt", 1), 20),)


def test_resampled_hash_ids_are_warned(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # two rows sharing blocks 7, 8: drawn with replacement, a row drawn twice hits its whole
    # prompt, so the hits are not the trace's (said; the rows keep their ids, as documented)
    path = _write(tmp_path, "mc.jsonl", MOONCAKE)
    workload = {"trace": path, "arrival": "poisson", "rate_per_s": 1.0, "num_requests": 4}
    with caplog.at_level(logging.WARNING, logger="kvsim.workload"):
        reqs = requests_for(config_from_dict({"workload": workload}))
    assert all(r.prefix_hash_ids == (7, 8) for r in reqs)
    assert any("resampled rows keep their hash_ids" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kvsim.workload"):  # replayed: its own sharing
        requests_for(config_from_dict({"workload": {"trace": path, "arrival": "trace"}}))
    assert not any("keep their hash_ids" in r.getMessage() for r in caplog.records)


def test_resampled_sessions_are_warned(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _write(tmp_path, "rs.csv", "prompt_tokens,output_tokens,session_id\n10,5,1\n20,5,1\n")
    with caplog.at_level(logging.WARNING, logger="kvsim.workload"):
        reqs = requests_for(config_from_dict({"workload": {"trace": path, "num_requests": 5}}))
    assert len(reqs) == 5
    assert all(r.session_id is None for r in reqs)
    assert any("session_id ignored" in r.getMessage() for r in caplog.records)


CLI_CASES = {
    "own.csv": (OWN_CSV, ["workload.arrival=trace"], 4),
    "azure_2023.csv": (AZURE_2023, ["workload.arrival=trace"], 2),
    "azure_2024.csv": (AZURE_2024, ["workload.arrival=trace"], 3),
    "vidur.csv": (VIDUR, ["workload.arrival=trace"], 2),
    "burst.csv": (BURSTGPT, ["workload.arrival=trace"], 2),
    "mc.jsonl": (MOONCAKE, ["workload.arrival=trace"], 2),
    "bailian.jsonl": (BAILIAN, ["workload.arrival=trace"], 3),
    "lens.csv": ("prompt_tokens,output_tokens\n30,5\n40,6\n", ["workload.sample=replay"], 2),
}


@pytest.mark.parametrize("name", sorted(CLI_CASES))
def test_cli_replays_each_format(tmp_path: Path, name: str) -> None:
    text, sets, num_requests = CLI_CASES[name]
    path = _write(tmp_path, name, text)
    out = tmp_path / "out"
    args = ["run", "--no-progress", "--set", f"workload.trace={path}"]
    for pair in sets:
        args += ["--set", pair]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert json.loads((out / "summary.json").read_text())["num_requests"] == num_requests
    assert (out / "request_metrics.csv").is_file()
    assert (out / "metrics.prom").is_file()


def test_trace_format_can_be_forced(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # a Mooncake-schema file whose timestamps are seconds: named bailian, read in seconds
    path = _write(tmp_path, "x.jsonl", MOONCAKE.replace("20000", "20"))
    workload = {"trace": path, "arrival": "trace", "trace_format": "bailian"}
    with caplog.at_level(logging.WARNING, logger="kvsim.workload"):
        reqs = requests_for(config_from_dict({"workload": workload}))
    # 1,024 tokens are cdiv(1024, 16) = 64 blocks of 16, not the 2 ids each row gives
    assert any(
        "2 of 2 rows have a number of hash_ids other than cdiv(prompt tokens, 16)" in r.getMessage()
        for r in caplog.records
    )
    assert [r.arrival_time_s for r in reqs] == [0.0, 20.0]
    # bailian blocks are 16 tokens: [7, 8] name the first 32 tokens of the 1,024
    assert np.sum([n for _, n in reqs[0].token_segments or ()]) == 32
