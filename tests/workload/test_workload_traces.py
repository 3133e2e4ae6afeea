"""Trace replay checked against the raw files: numbers are computed here with the csv/json
modules or pandas, or by hand from the README and the files' first/last lines."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvsim.config import config_from_dict
from kvsim.engine.build import allocator_from_config
from kvsim.engine.intake import requests_for, split_runnable
from kvsim.workload import WorkloadSpec, generate_requests, load_trace

BIG_MODEL_LEN = 10**7  # keeps every row of a trace


def _gen(spec: WorkloadSpec, max_model_len: int = BIG_MODEL_LEN, seed: int = 0) -> list:
    return generate_requests(spec, np.random.default_rng(seed), max_model_len=max_model_len)


def test_paper_filter_rows_and_means(traces_dir: Path) -> None:
    # Independent computation with the csv module: input+output <= 2048 and both >= 4.
    with (traces_dir / "sharegpt_opt_firstturn_lengths.csv").open() as handle:
        rows = [(int(r["input_len"]), int(r["output_len"])) for r in csv.DictReader(handle)]
    kept = [(i, o) for i, o in rows if i + o <= 2048 and i >= 4 and o >= 4]
    assert len(rows) == 84226  # README
    assert len(kept) == 77543  # README
    mean_in = sum(i for i, _ in kept) / len(kept)
    mean_out = sum(o for _, o in kept) / len(kept)
    assert round(mean_in, 1) == 163.7  # README
    assert round(mean_out, 1) == 346.2  # README

    spec = WorkloadSpec(
        trace="sharegpt_opt",
        sample="replay",
        min_prompt_tokens=4,
        min_output_tokens=4,
        overflow="drop",
    )
    reqs = _gen(spec, max_model_len=2048)
    assert len(reqs) == 77543
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs[:5]] == kept[:5]
    assert np.mean([r.prompt_tokens for r in reqs]) == pytest.approx(mean_in, rel=1e-12)
    assert np.mean([r.output_tokens for r in reqs]) == pytest.approx(mean_out, rel=1e-12)


def test_resample_draws_only_filtered_rows(traces_dir: Path) -> None:
    spec = WorkloadSpec(
        trace="sharegpt_opt",
        rate_per_s=2.0,
        min_prompt_tokens=4,
        min_output_tokens=4,
        num_requests=3000,
        overflow="drop",
    )
    reqs = _gen(spec, max_model_len=2048)
    assert len(reqs) == 3000
    assert all(r.prompt_tokens >= 4 and r.output_tokens >= 4 for r in reqs)
    assert all(r.prompt_tokens + r.output_tokens <= 2048 for r in reqs)
    # Paper-filtered means 163.7 / 346.2 (README); 3000 draws stay within ~10%.
    assert np.mean([r.prompt_tokens for r in reqs]) == pytest.approx(163.7, rel=0.12)
    assert np.mean([r.output_tokens for r in reqs]) == pytest.approx(346.2, rel=0.08)


def test_azure_conv_arrivals(traces_dir: Path) -> None:
    reqs = _gen(WorkloadSpec(trace="azure_conv", arrival="trace"))
    assert len(reqs) == 19366  # README
    # First line: 2023-11-16 18:15:46.6805900,374,44
    assert (reqs[0].arrival_time_s, reqs[0].prompt_tokens, reqs[0].output_tokens) == (0.0, 374, 44)
    # Last line 19:14:08.4025270 minus first 18:15:46.6805900 = 58 min 21.7219370 s.
    assert reqs[-1].arrival_time_s == pytest.approx(58 * 60 + 21.721937, abs=1e-6)
    assert reqs[-1].prompt_tokens == 197
    assert [r.req_id for r in reqs] == list(range(len(reqs)))
    assert np.mean([r.prompt_tokens for r in reqs]) == pytest.approx(1155, abs=1)  # README


def test_azure_code_span(traces_dir: Path) -> None:
    reqs = _gen(WorkloadSpec(trace="azure_code", arrival="trace"))
    assert len(reqs) == 8819  # README
    # 19:14:19.9280160 - 18:17:03.9799600 = 57 min 15.9480560 s.
    assert reqs[-1].arrival_time_s == pytest.approx(57 * 60 + 15.948056, abs=1e-6)


def test_time_scale_halves_span(traces_dir: Path) -> None:
    reqs = _gen(WorkloadSpec(trace="azure_conv", arrival="trace", time_scale=0.5))
    assert reqs[-1].arrival_time_s == pytest.approx((58 * 60 + 21.721937) / 2, abs=1e-6)


def test_window_and_slicing(traces_dir: Path) -> None:
    frame = pd.read_csv(traces_dir / "azure_llm_2023_conv.csv")
    seconds = pd.to_datetime(frame["TIMESTAMP"]) - pd.to_datetime(frame["TIMESTAMP"][0])
    seconds = seconds.dt.total_seconds()
    in_window = frame[(seconds >= 600) & (seconds < 660)]
    spec = WorkloadSpec(trace="azure_conv", arrival="trace", start_s=600, duration_s=60)
    reqs = _gen(spec)
    assert len(reqs) == len(in_window) > 0
    assert all(0 <= r.arrival_time_s < 60 for r in reqs)
    assert [r.prompt_tokens for r in reqs] == in_window["ContextTokens"].tolist()
    first = seconds[in_window.index[0]] - 600
    assert reqs[0].arrival_time_s == pytest.approx(first, abs=1e-6)

    head = _gen(spec.model_copy(update={"num_requests": 7}))
    assert [r.prompt_tokens for r in head] == in_window["ContextTokens"].tolist()[:7]


def test_mooncake_hash_ids(traces_dir: Path) -> None:
    reqs = _gen(WorkloadSpec(trace="mooncake_conversation", arrival="trace"))
    assert len(reqs) == 12031  # README
    assert all(len(r.prefix_hash_ids) == math.ceil(r.prompt_tokens / 512) for r in reqs)
    # First line: timestamp 0, input 6758, output 500, hash_ids 0..13.
    assert reqs[0].prefix_hash_ids == tuple(range(14))
    assert (reqs[0].prompt_tokens, reqs[0].output_tokens) == (6758, 500)
    # Timestamps are ms: the last is 3,536,999 ms (README).
    assert reqs[-1].arrival_time_s == pytest.approx(3536.999)
    total_refs = sum(len(r.prefix_hash_ids) for r in reqs)
    assert total_refs == 288500  # README: 288,500 block references


def test_mooncake_truncate_cuts_hashes(traces_dir: Path) -> None:
    spec = WorkloadSpec(trace="mooncake_synthetic", arrival="trace", overflow="truncate")
    reqs = _gen(spec, max_model_len=4096)
    with (traces_dir / "mooncake_synthetic.jsonl").open() as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    assert len(reqs) == len(rows) == 3993
    assert all(r.prompt_tokens + r.output_tokens <= 4096 for r in reqs)
    assert all(len(r.prefix_hash_ids) == math.ceil(r.prompt_tokens / 512) for r in reqs)
    assert max(r.prompt_tokens for r in reqs) == 4095  # some prompt exceeds 4096 (max 191,378)


def test_mooncake_drop_filter_and_default_reject_count(traces_dir: Path) -> None:
    with (traces_dir / "mooncake_conversation.jsonl").open() as handle:
        rows = [json.loads(line) for line in handle if line.strip()]
    too_long = sum(1 for r in rows if r["input_length"] + r["output_length"] > 32768)
    assert too_long > 0
    spec = WorkloadSpec(trace="mooncake_conversation", arrival="trace", overflow="drop")
    assert len(_gen(spec, max_model_len=32768)) == len(rows) - too_long
    # the default keeps every row; the run rejects the long ones and counts them
    config = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h200",
            "scheduler": {"max_model_len": 32768},
            "workload": {"trace": "mooncake_conversation", "arrival": "trace"},
        }
    )
    requests = requests_for(config)
    assert len(requests) == len(rows)
    runnable, rejected = split_runnable(requests, config, allocator_from_config(config))
    assert len(rejected.max_model_len) == too_long
    assert len(runnable) == len(rows) - too_long


def test_vidur_format_lengths(traces_dir: Path) -> None:
    frame = pd.read_csv(traces_dir / "arxiv_summarization_llama2_lengths.csv")
    reqs = _gen(WorkloadSpec(trace="arxiv", sample="replay", num_requests=50))
    assert [r.prompt_tokens for r in reqs] == frame["num_prefill_tokens"].tolist()[:50]
    assert [r.output_tokens for r in reqs] == frame["num_decode_tokens"].tolist()[:50]


def test_reader_is_cached(traces_dir: Path) -> None:
    path = traces_dir / "azure_llm_2023_code.csv"
    first = load_trace(path)
    assert load_trace(path) is first
    assert not first.prompt_tokens.flags.writeable
