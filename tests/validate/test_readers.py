"""The readers of both formats on small files written here (the real runs are not in CI): every
expected value worked out by hand from the files (``synthetic.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsim.validate.catalog import list_runs, resolve_names
from kvsim.validate.h100 import read_h100_run
from kvsim.validate.rtx4090 import block_segments, read_rtx4090_run
from kvsim.validate.runs import Stage

from .synthetic import ERROR_INDEX, TRAIN, VALIDATE, write_h100, write_rtx4090


def test_h100_settings_stages_and_splits(tmp_path: Path) -> None:
    run = read_h100_run(write_h100(tmp_path), TRAIN)
    assert run.split == "train"
    assert (run.tensor_parallel_size, run.num_gpu_blocks, run.block_size_tokens) == (1, 64, 16)
    assert (run.max_num_seqs, run.max_num_batched_tokens, run.max_model_len) == (8, 256, 512)
    assert run.model.name == "Tiny"
    assert run.model.num_layers == 2
    assert run.model.vocab_size == 100
    assert run.clock == "client"
    assert run.async_scheduling
    assert run.enable_prefix_caching
    # 10 req/s for 0.6 s = 6 requests, then 20 req/s for 0.3 s = 6 more
    assert run.stages == [Stage(0, 10.0, 0.6, 6), Stage(1, 20.0, 0.3, 6)]
    assert read_h100_run(tmp_path, VALIDATE).split == "validate"


def test_h100_outputs_are_the_profiles_and_errors_are_load_not_measured(tmp_path: Path) -> None:
    run = read_h100_run(write_h100(tmp_path), TRAIN)
    assert {r.output_tokens for r in run.requests} == {5}  # output_len, not output_tokens
    assert len(run.requests) == 12  # request 9 (has_error) is replayed as load ...
    assert ERROR_INDEX not in set(run.measured["req_id"])  # ... but not measured
    assert run.num_left_out == 1
    errored = next(r for r in run.requests if r.req_id == ERROR_INDEX)
    assert errored.prompt_tokens == 41  # recorded as 0: its cycle slot 9 % 4 = 1 holds 41
    row = run.measured.set_index("req_id").loc[7]
    assert row["ttft_s"] == pytest.approx(0.027)
    assert row["e2e_s"] == pytest.approx(0.17)
    assert row["tpot_s"] == pytest.approx((0.17 - 0.027) / 4)  # 5 outputs: 4 after the first
    assert row["stage"] == 1  # the 7th request is in the second stage


def test_h100_prompts_share_their_groups_system_prompt_and_repeat_each_cycle(
    tmp_path: Path,
) -> None:
    run = read_h100_run(write_h100(tmp_path), TRAIN)
    segments = {r.req_id: r.token_segments for r in run.requests}
    # slot i % 4, group slot // 2; a 16-token system prompt, then the slot's question
    assert segments[0] == ((("system", 0), 16), (("prompt", 0), 24))
    assert segments[3] == ((("system", 1), 16), (("prompt", 3), 27))
    assert segments[4] == segments[0]  # the cycle repeats the text
    assert segments[1][0] == segments[0][0]  # slots 0 and 1 share group 0's system prompt


def test_h100_a_shifted_prompt_keeps_its_own_slot(tmp_path: Path) -> None:
    from .synthetic import h100_requests

    requests = h100_requests()
    # requests 4 and 5 swapped in send order: 4 carries slot 1's 41 tokens, 5 slot 0's 40
    requests[4]["input_tokens"], requests[5]["input_tokens"] = 41, 40
    run = read_h100_run(write_h100(tmp_path, requests=requests), TRAIN)
    segments = {r.req_id: r.token_segments for r in run.requests}
    assert segments[4][1][0] == ("prompt", 1)
    assert segments[5][1][0] == ("prompt", 0)


def test_rtx4090_timestamps_and_settings_by_hand(tmp_path: Path) -> None:
    run = read_rtx4090_run(write_rtx4090(tmp_path))
    assert (run.gpu, run.num_gpu_blocks, run.block_size_tokens, run.clock) == (
        "rtx-4090",
        2588,
        16,
        "engine",
    )
    assert run.vllm_version == "0.19.0"
    assert run.async_scheduling
    assert run.split == "held-out"
    assert [r.arrival_time_s for r in run.requests] == pytest.approx([0.0, 0.2, 0.4])
    m = run.measured.set_index("req_id")
    assert list(m["ttft_s"]) == pytest.approx([0.5, 0.8, 0.9])  # first_token - queued
    assert list(m["e2e_s"]) == pytest.approx([2.0, 2.8, 3.6])  # last_token - queued
    assert list(m["tpot_s"]) == pytest.approx([1.5 / 3, 2.0 / 3, 2.7 / 3])  # 4 outputs
    assert list(m["queue_s"]) == pytest.approx([0.0, 0.5, 0.6])  # scheduled - queued
    # the log's t counts from started_at, 0.1 s before the first request
    assert list(run.kv_usage["time_s"]) == pytest.approx([0.9, 1.9])
    assert list(run.kv_usage["kv_cache_pct"]) == [1.5, 2.0]


def test_rtx4090_settings_the_replay_does_not_model_are_noted(tmp_path: Path, caplog) -> None:
    """vLLM's defaults (chunked prefill on, FCFS, no speculative decoding) are what the replay
    assumes: a run at them gets no extra note; one that sets priority scheduling, an fp8 KV cache,
    quantized weights or a speculative config gets a note (and a warning) for each."""
    import json
    import logging

    root = write_rtx4090(tmp_path)
    folder = root / "rtx4090-llama-3.1-8b"
    assert len(read_rtx4090_run(root).notes) == 2  # the reader's own two
    meta = json.loads((folder / "meta.json").read_text())
    meta["resolved_config"] = {
        "scheduler_config": {"async_scheduling": True, "policy": "priority"},
        "cache_config": {"cache_dtype": "fp8", "sliding_window": None},
        "model_config": {"dtype": "torch.bfloat16", "quantization": "awq"},
        "parallel_config": {"pipeline_parallel_size": 1},
        "speculative_config": {"method": "eagle3", "num_speculative_tokens": 3},
        "kv_transfer_config": None,
    }
    (folder / "meta.json").write_text(json.dumps(meta))
    with caplog.at_level(logging.WARNING, logger="kvsim.validate"):
        notes = read_rtx4090_run(root).notes[2:]
    assert notes == (
        "the run sets scheduler_config.policy = 'priority', which the replay does not model "
        "(it assumes 'fcfs')",
        "the run sets cache_config.cache_dtype = 'fp8', which the replay does not model "
        "(it assumes 'auto')",
        "the run sets model_config.quantization = 'awq', which the replay does not model "
        "(it assumes None)",
        "the run sets speculative_config, which the replay does not model",
    )
    assert len([r for r in caplog.records if "does not model" in r.getMessage()]) == 4


def test_rtx4090_prompts_share_exactly_their_common_full_blocks(tmp_path: Path) -> None:
    run = read_rtx4090_run(write_rtx4090(tmp_path))
    a, b, c = (r.token_segments for r in run.requests)
    assert a is not None
    assert b is not None
    assert c is not None
    # 40 tokens: two full blocks of 16 and a tail of 8; b repeats a's first 32 tokens
    assert [n for _, n in a] == [16, 16, 8]
    assert a[:2] == b[:2]
    assert a[2] != b[2]
    assert c[0] != a[0]
    # a block's key names its whole prefix: the same 16 tokens after another prefix differ
    first = block_segments(list(range(16)) * 2, 16, 0, "x")
    assert first[0][0] != first[1][0]


def test_catalog_names_groups_and_unique_parts(tmp_path: Path) -> None:
    write_h100(tmp_path)
    write_rtx4090(tmp_path)
    assert list_runs(tmp_path) == {
        TRAIN: "train",
        VALIDATE: "validate",
        "rtx4090-llama-3.1-8b": "held-out",
    }
    assert resolve_names(["validate", "rtx4090"], tmp_path) == [VALIDATE, "rtx4090-llama-3.1-8b"]
    with pytest.raises(ValueError, match="matches 2 runs"):
        resolve_names(["tiny"], tmp_path)
    with pytest.raises(ValueError, match="no measured run 'nope'"):
        resolve_names(["nope"], tmp_path)
