"""Exports: Vidur's request_metrics.csv and a Prometheus snapshot under vLLM's metric names.

A hand-made run of three requests (times chosen as exact binary fractions) gives every expected
value by hand; a simulated run checks that the exports agree with its summary."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvsim.config import config_from_dict
from kvsim.engine import simulate
from kvsim.results import Results
from kvsim.results.exporters import vidur_request_metrics, write_exports
from kvsim.results.prometheus import prometheus_snapshot
from kvsim.results.tables import request_frame
from kvsim.workload.request import Request

# Vidur's request_metrics.csv columns, in its order (microsoft/vidur vidur/metrics/constants.py:
# RequestMetricsTimeDistributions, then RequestMetricsHistogram, merged on "Request Id")
VIDUR_COLUMNS = [
    "Request Id",
    "request_e2e_time",
    "request_e2e_time_normalized",
    "request_execution_time",
    "request_execution_time_normalized",
    "request_model_execution_time",
    "request_model_execution_time_normalized",
    "request_preemption_time",
    "request_scheduling_delay",
    "request_execution_plus_preemption_time",
    "request_execution_plus_preemption_time_normalized",
    "prefill_e2e_time",
    "prefill_time_execution_plus_preemption",
    "prefill_time_execution_plus_preemption_normalized",
    "decode_time_execution_plus_preemption_normalized",
    "request_inter_arrival_delay",
    "request_num_tokens",
    "request_num_prefill_tokens",
    "request_num_decode_tokens",
    "request_pd_ratio",
    "request_num_restarts",
]
# vLLM v0.20.0 vllm/v1/metrics/loggers.py
VLLM_TTFT_BUCKETS = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
]  # fmt: skip
VLLM_REQUEST_LATENCY_BUCKETS = [
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
]  # fmt: skip


def _request(req_id: int, times: tuple[float, ...], sizes: tuple[int, ...]) -> Request:
    arrival, scheduled, first_token, finish = times
    prompt, output, preemptions, cached = sizes
    req = Request(req_id, arrival, prompt, output, output)
    req.first_scheduled_time_s, req.first_token_time_s, req.finish_time_s = (
        scheduled,
        first_token,
        finish,
    )
    req.num_preemptions, req.num_cached_tokens = preemptions, cached
    return req


@pytest.fixture
def hand_run() -> Results:
    requests = [
        # arrival, first scheduled, first token, finish; prompt, output, preemptions, cached
        _request(0, (0.0, 0.0, 0.0625, 0.0625), (30, 1, 0, 0)),
        _request(1, (1.0, 1.5, 1.75, 2.0), (20, 3, 1, 16)),
        _request(2, (2.5, 2.5, 5.5, 7.5), (40, 5, 0, 0)),
    ]
    summary = {
        "num_preemptions": 1,
        "max_model_len": 2048,
        "enable_prefix_caching": True,
        # the engine's count (kvsim.core.kv.base): every admitted prompt, 30 + 20 + 40 tokens
        "prefix_cache_queries": 90,
        "kv_cache_usage_perc": 0.25,
        "kv_cache_usage_perc_max": 0.5,
        "num_requests_running_mean": 1.5,
        "num_requests_running_max": 2,
        "num_requests_waiting_mean": 0.125,
    }
    return Results(config_from_dict({}), request_frame(requests), pd.DataFrame(), summary)


def test_vidur_columns_and_values(hand_run: Results) -> None:
    df = vidur_request_metrics(hand_run)
    assert list(df.columns) == VIDUR_COLUMNS
    expected = {
        "Request Id": [0, 1, 2],
        "request_e2e_time": [0.0625, 1.0, 5.0],  # finish - arrival
        "request_e2e_time_normalized": [0.0625, 1.0 / 3, 1.0],  # / output tokens
        "request_scheduling_delay": [0.0, 0.5, 0.0],  # first scheduled - arrival
        "request_execution_plus_preemption_time": [0.0625, 0.5, 5.0],  # finish - scheduled
        "request_execution_plus_preemption_time_normalized": [0.0625, 0.5 / 3, 1.0],
        "prefill_e2e_time": [0.0625, 0.75, 3.0],  # first token - arrival
        "prefill_time_execution_plus_preemption": [0.0625, 0.25, 3.0],  # first token - sched.
        "prefill_time_execution_plus_preemption_normalized": [0.0625 / 30, 0.0125, 0.075],
        "decode_time_execution_plus_preemption_normalized": [0.0, 0.25 / 3, 0.4],
        "request_num_tokens": [31, 23, 45],
        "request_num_prefill_tokens": [30, 20, 40],
        "request_num_decode_tokens": [1, 3, 5],
        "request_pd_ratio": [30.0, 20 / 3, 8.0],
        "request_num_restarts": [0, 1, 0],
    }
    for column, values in expected.items():
        assert df[column].tolist() == pytest.approx(values, rel=1e-12), column
    # the first arrival has no predecessor (Vidur leaves it out: blank after its merge)
    gaps = df["request_inter_arrival_delay"].tolist()
    assert math.isnan(gaps[0])
    assert gaps[1:] == [1.0, 1.5]
    for column in ("request_execution_time", "request_preemption_time"):
        assert df[column].isna().all()  # kvsim does not split running from preempted time


def _families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def _sample(family, suffix: str = "", **labels: str) -> float:
    for s in family.samples:
        if s.name == family.name + suffix and all(s.labels.get(k) == v for k, v in labels.items()):
            return float(s.value)
    raise AssertionError(f"no sample {family.name}{suffix} {labels}")


def _buckets(family) -> dict[str, float]:
    return {s.labels["le"]: s.value for s in family.samples if s.name.endswith("_bucket")}


def test_prometheus_by_hand(hand_run: Results) -> None:
    families = _families(prometheus_snapshot(hand_run))
    labels = {"model_name": "opt-13b", "engine": "0"}
    counters = {
        "vllm:num_preemptions": 1,
        "vllm:prompt_tokens": 30 + 20 + 40,
        "vllm:generation_tokens": 1 + 3 + 5,
        "vllm:prompt_tokens_cached": 16,
        "vllm:prefix_cache_queries": 90,  # caching on: every prompt is looked up
        "vllm:prefix_cache_hits": 16,
    }
    for name, value in counters.items():
        assert families[name].type == "counter"
        assert _sample(families[name], "_total", **labels) == value
    gauges = {
        "vllm:num_requests_running": 0,
        "vllm:num_requests_waiting": 0,
        "vllm:kv_cache_usage_perc": 0.0,
        "kvsim:kv_cache_usage_perc_mean": 0.25,
        "kvsim:kv_cache_usage_perc_max": 0.5,
        "kvsim:num_requests_running_mean": 1.5,
        "kvsim:num_requests_waiting_mean": 0.125,
    }
    for name, value in gauges.items():
        assert _sample(families[name], **labels) == value
    # preemptions per request 0, 1, 0 in vLLM 0.34.0's buckets (1, 2, 3, 4, 5, 10, 20)
    preempted = families["vllm:request_num_preemptions"]
    assert list(_buckets(preempted)) == ["1.0", "2.0", "3.0", "4.0", "5.0", "10.0", "20.0", "+Inf"]
    assert _buckets(preempted)["1.0"] == 3
    assert (_sample(preempted, "_count"), _sample(preempted, "_sum")) == (3, 1)
    ttft = families["vllm:time_to_first_token_seconds"]
    assert [float(le) for le in _buckets(ttft) if le != "+Inf"] == VLLM_TTFT_BUCKETS
    # TTFT 0.0625, 0.75, 3.0: none <= 0.06, one <= 0.08, two <= 0.75 (inclusive), three <= 5
    ttft_buckets = _buckets(ttft)
    assert (ttft_buckets["0.06"], ttft_buckets["0.08"], ttft_buckets["0.5"]) == (0, 1, 1)
    assert (ttft_buckets["0.75"], ttft_buckets["2.5"], ttft_buckets["5.0"]) == (2, 2, 3)
    assert (_sample(ttft, "_count"), _sample(ttft, "_sum")) == (3, 3.8125)
    e2e = families["vllm:e2e_request_latency_seconds"]
    assert [float(le) for le in _buckets(e2e) if le != "+Inf"] == VLLM_REQUEST_LATENCY_BUCKETS
    e2e_buckets = _buckets(e2e)  # E2E 0.0625, 1.0, 5.0
    assert [e2e_buckets[k] for k in ("0.3", "0.8", "1.0", "2.5", "5.0", "+Inf")] == [
        1,
        1,
        2,
        2,
        3,
        3,
    ]
    # TPOT per request: 0 for a one-token output (vLLM observes 0), 0.25 / 2, 2.0 / 4
    tpot = families["vllm:request_time_per_output_token_seconds"]
    tpot_buckets = _buckets(tpot)
    assert [tpot_buckets[k] for k in ("0.01", "0.1", "0.15", "0.4", "0.5")] == [1, 1, 2, 2, 3]
    assert _sample(tpot, "_sum") == 0.625
    # inter-token gaps: 2 of 0.125 s and 4 of 0.5 s
    itl = families["vllm:inter_token_latency_seconds"]
    itl_buckets = _buckets(itl)
    assert [itl_buckets[k] for k in ("0.1", "0.15", "0.4", "0.5", "+Inf")] == [0, 2, 2, 6, 6]
    assert (_sample(itl, "_count"), _sample(itl, "_sum")) == (6, 2.25)
    # token histograms: vLLM's 1-2-5 buckets up to max_model_len 2,048
    prompts = _buckets(families["vllm:request_prompt_tokens"])
    assert list(prompts) == [
        *("1.0", "2.0", "5.0", "10.0", "20.0", "50.0", "100.0", "200.0", "500.0"),
        *("1000.0", "2000.0", "+Inf"),
    ]
    assert [prompts[k] for k in ("10.0", "20.0", "50.0")] == [0, 1, 3]  # 30, 20, 40
    computed = _buckets(families["vllm:request_prefill_kv_computed_tokens"])  # 30, 4, 40
    assert [computed[k] for k in ("2.0", "5.0", "20.0", "50.0")] == [0, 1, 1, 3]


def test_exports_agree_with_a_simulated_run(tmp_path: Path) -> None:
    config = config_from_dict(
        {
            "workload": {"num_requests": 120, "rate_per_s": 20.0, "shared_prefix_tokens": 64},
            "cache": {"kv_cache_gib": 2.0},
        }
    )
    results = simulate(config)
    summary = results.summary
    assert summary["num_preemptions"] > 0  # the small pool preempts: the counter is exercised
    results.save(tmp_path)  # write_exports runs inside Results.save
    families = _families((tmp_path / "metrics.prom").read_text())
    total = {
        "vllm:prompt_tokens": summary["prompt_tokens_total"],
        "vllm:generation_tokens": summary["generation_tokens_total"],
        "vllm:num_preemptions": summary["num_preemptions"],
        "vllm:prefix_cache_hits": summary["prefix_cached_tokens_total"],
    }
    for name, value in total.items():
        assert _sample(families[name], "_total") == value, name
    assert summary["prefix_cached_tokens_total"] > 0
    n = summary["num_requests"]
    for name, mean_key in [
        ("vllm:time_to_first_token_seconds", "time_to_first_token_seconds_mean"),
        ("vllm:e2e_request_latency_seconds", "e2e_request_latency_seconds_mean"),
        ("vllm:request_queue_time_seconds", "request_queue_time_seconds_mean"),
    ]:
        assert _sample(families[name], "_count") == n
        assert _buckets(families[name])["+Inf"] == n
        assert _sample(families[name], "_sum") / n == pytest.approx(summary[mean_key], rel=1e-9)
    itl = families["vllm:inter_token_latency_seconds"]
    assert _sample(itl, "_count") == summary["generation_tokens_total"] - n  # gaps per request
    assert _sample(itl, "_sum") / _sample(itl, "_count") == pytest.approx(
        summary["inter_token_latency_seconds_mean"], rel=1e-9
    )
    mean_usage = _sample(families["kvsim:kv_cache_usage_perc_mean"])
    assert mean_usage == pytest.approx(summary["kv_cache_usage_perc"], rel=1e-12)
    # Vidur's file reads back with pandas, one row per request
    vidur = pd.read_csv(tmp_path / "request_metrics.csv")
    assert list(vidur.columns) == VIDUR_COLUMNS
    assert len(vidur) == n
    assert vidur["request_e2e_time"].mean() == pytest.approx(
        summary["e2e_request_latency_seconds_mean"], rel=1e-9
    )
    assert vidur["request_num_restarts"].sum() == results.requests["num_preemptions"].sum()
    ttft_buckets = _buckets(families["vllm:time_to_first_token_seconds"])
    ttft = results.requests["time_to_first_token_seconds"].to_numpy()
    for le in ("0.1", "1.0", "10.0"):
        assert ttft_buckets[le] == int(np.sum(ttft <= float(le)))


def test_write_exports_makes_the_folder(hand_run: Results, tmp_path: Path) -> None:
    folder = write_exports(hand_run, tmp_path / "new" / "dir")
    assert sorted(p.name for p in folder.iterdir()) == ["metrics.prom", "request_metrics.csv"]


# vLLM 0.34.0 vllm/v1/spec_decode/metrics.py, SpecDecodingProm: prometheus_client Counters under
# the base labels (model_name, engine), the per-position one with a "position" label after them
SPEC_COUNTERS = {
    "vllm:spec_decode_num_drafts": "spec_decode_num_drafts",
    "vllm:spec_decode_num_draft_tokens": "spec_decode_num_draft_tokens",
    "vllm:spec_decode_num_accepted_tokens": "spec_decode_num_accepted_tokens",
}
SPEC_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos"


def test_prometheus_spec_decode_counters(tmp_path: Path) -> None:
    k = 3
    config = config_from_dict(
        {
            "workload": {"num_requests": 12, "rate_per_s": 20.0},
            "speculative": {"num_speculative_tokens": k, "acceptance_rate": 0.7},
        }
    )
    results = simulate(config)
    summary = results.summary
    results.save(tmp_path)
    families = _families((tmp_path / "metrics.prom").read_text())
    labels = {"model_name": config.model.name, "engine": "0"}
    counts = {}
    for name, key in SPEC_COUNTERS.items():
        assert families[name].type == "counter", name
        counts[name] = _sample(families[name], "_total", **labels)
        assert counts[name] == summary[key], name
    drafts = counts["vllm:spec_decode_num_drafts"]
    accepted = counts["vllm:spec_decode_num_accepted_tokens"]
    assert drafts > 0
    assert accepted > 0
    # every verification proposes k drafts (no request here reaches max_model_len)
    assert counts["vllm:spec_decode_num_draft_tokens"] == k * drafts
    per_pos = families[SPEC_PER_POS]
    assert per_pos.type == "counter"
    samples = [s for s in per_pos.samples if s.name == SPEC_PER_POS + "_total"]
    assert [s.labels for s in samples] == [{**labels, "position": str(i)} for i in range(k)]
    by_pos = [float(s.value) for s in samples]
    # a verification accepting a drafts accepts positions 0..a-1: each accepted token is
    # counted at exactly one position, a later position only after the earlier ones
    assert sum(by_pos) == accepted
    assert drafts >= by_pos[0] >= by_pos[1] >= by_pos[2] > 0
    assert by_pos == [summary[f"spec_decode_num_accepted_tokens_pos{i}"] for i in range(k)]


def test_prometheus_no_spec_decode_without_speculation(hand_run: Results) -> None:
    no_spec = simulate(config_from_dict({"workload": {"num_requests": 5}}))
    for run in (hand_run, no_spec):
        text = prometheus_snapshot(run)
        assert "spec_decode" not in text
        assert not any(name.startswith("vllm:spec_decode") for name in _families(text))


def test_a_one_token_output_counts_in_the_summarys_tpot_as_zero(hand_run: Results) -> None:
    # vLLM records TPOT 0 for a one-token output (IterationStats.update_from_finished_request);
    # the summary left it out: the hand run's mean is (0 + 0.25 / 2 + 2.0 / 4) / 3, not over 2
    from kvsim.results.metrics import latency_stats

    assert hand_run.requests["request_time_per_output_token_seconds"].tolist() == [0.0, 0.125, 0.5]
    stats = latency_stats(hand_run.requests)
    assert stats["request_time_per_output_token_seconds_mean"] == pytest.approx(0.625 / 3)


def test_a_table_written_before_draft_outputs_were_counted_counts_no_drafts() -> None:
    # runs written before requests.parquet had num_draft_outputs: one gap a token after the
    # first (outputs 1, 3 and 5 tokens: 0, 2 and 4 gaps); a request that did not run, none
    from kvsim.results.metrics import output_gaps

    old = {
        "output_tokens": np.array([1, 3, 5, 4]),
        "request_decode_time_seconds": np.array([0.0, 0.25, 2.0, np.nan]),
    }
    assert output_gaps(old).tolist() == [0, 2, 4, 0]
    new = {**old, "num_draft_outputs": np.array([0, 1, 2, 0])}
    assert output_gaps(new).tolist() == [0, 1, 2, 0]


def _finished(req_id: int, prompt: int, output: int, max_tokens: int, cached: int = 0, **kw):
    req = Request(req_id, 0.0, prompt, output, max_tokens, **kw)
    req.first_scheduled_time_s, req.first_token_time_s, req.finish_time_s = 0.0, 0.5, 1.0
    req.num_cached_tokens = cached
    return req


@pytest.fixture
def client_run() -> Results:
    """Five table rows (vLLM requests) from four client requests, max_model_len 2,048: r2 and
    r3 are the two samples of client request 7 (``n = 2``); r1's 16 cached tokens came from
    the CPU tier, r3's 48 from the GPU (32) and the disk tier (16, promoted for it): 32
    external hits, 16 of them the disk's."""
    requests = [
        _finished(0, 30, 1, 1),  # output == max_tokens: length
        _finished(1, 20, 3, 100, cached=16),  # ended before its cap: stop
        _finished(2, 40, 5, 9, parent_id=7),  # stop
        _finished(3, 40, 9, 9, cached=48, parent_id=7),  # length
        _finished(4, 2040, 8, 100),  # 2,040 + 8 reaches max_model_len: length
    ]
    summary = {
        "num_preemptions": 0,
        "max_model_len": 2048,
        "enable_prefix_caching": True,
        "prefix_cache_queries": 2170,
        "num_gpu_blocks": 1000,
        "disk_tier_blocks": 64,
        "external_prefix_cache_queries": 100,
        "external_prefix_cache_hits": 32,
        "external_prefix_cache_hits_disk": 16,
        "kv_offload_bytes_cpu_to_disk": 0,
        "kv_offload_bytes_disk_to_cpu": 0,
    }
    return Results(config_from_dict({}), request_frame(requests), pd.DataFrame(), summary)


def test_prompt_tokens_by_source_and_finish_reasons_by_hand(client_run: Results) -> None:
    # vLLM 0.34.0 PromptTokenStats and CacheHitSource; prompts 30 + 20 + 40 + 40 + 2,040 =
    # 2,170 tokens, 16 + 48 = 64 cached of which 32 came through the KV connector (16 of them
    # promoted from the disk): 2,106 computed, 32 GPU hits, 32 loaded (16 host, 16 disk)
    fams = _families(prometheus_snapshot(client_run))
    by_source = fams["vllm:prompt_tokens_by_source"]
    assert _sample(by_source, "_total", source="local_compute") == 2106
    assert _sample(by_source, "_total", source="local_cache_hit") == 32
    assert _sample(by_source, "_total", source="external_kv_transfer") == 32
    cached = fams["vllm:prompt_tokens_cached_by_source"]
    expected = {"device": 32, "host": 16, "p2p": 0, "disk": 16, "external_unspecified": 0}
    for source, tokens in expected.items():
        assert _sample(cached, "_total", source=source) == tokens
    success = fams["vllm:request_success"]
    reasons = {"stop": 2, "length": 3, "abort": 0, "error": 0, "repetition": 0}
    for reason, count in reasons.items():
        assert _sample(success, "_total", finished_reason=reason) == count


def test_client_request_histograms_by_hand(client_run: Results) -> None:
    # client requests r0, r1, 7 (two samples: 5 and 9 tokens), r4: n = 1, 1, 2, 1 (sum 5);
    # the most tokens a sample generated 1, 3, 9, 8 (sum 21); max_tokens observed a row
    # (vLLM observes it per finished request): 1 + 100 + 9 + 9 + 100 = 219
    fams = _families(prometheus_snapshot(client_run))
    n = fams["vllm:request_params_n"]
    assert _sample(n, "_count") == 4
    assert _sample(n, "_sum") == 5
    assert _buckets(n) == {"1.0": 3, "2.0": 4, "5.0": 4, "10.0": 4, "20.0": 4, "+Inf": 4}
    longest = fams["vllm:request_max_num_generation_tokens"]
    assert (_sample(longest, "_count"), _sample(longest, "_sum")) == (4, 21)
    assert _buckets(longest)["5.0"] == 2  # 1 and 3 tokens
    max_tokens = fams["vllm:request_params_max_tokens"]
    assert (_sample(max_tokens, "_count"), _sample(max_tokens, "_sum")) == (5, 219)


def test_cache_config_info_labels(client_run: Results) -> None:
    # vLLM writes every CacheConfig field as str(value); the defaults of an empty config:
    # 16-token blocks, gpu_memory_utilization 0.9 (kvsim derives the KV as a server given
    # --gpu-memory-utilization 0.9 does; vLLM 0.34 writes None only where it is unset), no KV
    # size or offload given
    fams = _families(prometheus_snapshot(client_run))
    (sample,) = fams["vllm:cache_config_info"].samples
    assert sample.value == 1
    assert sample.labels == {
        "block_size": "16",
        "cache_dtype": "auto",
        "enable_prefix_caching": "True",
        "gpu_memory_utilization": "0.9",
        "kv_cache_memory_bytes": "None",
        "num_gpu_blocks": "1000",
        "kv_cache_size_tokens": "None",  # (not in the hand summary: vLLM's unset field)
        "kv_cache_max_concurrency": "None",
        "kv_offloading_size": "None",
        "kv_offloading_backend": "native",
        "engine": "0",
    }


def test_a_table_without_max_tokens_exports_no_finish_reasons(client_run: Results) -> None:
    # a requests table written before the max_tokens and n columns: no finish reasons or
    # max_tokens (unknown), and every row not a sample of an n > 1 request counts as n = 1
    old = client_run.requests.drop(columns=["max_tokens", "n", "beam_width"])
    run = Results(client_run.config, old, pd.DataFrame(), client_run.summary)
    fams = _families(prometheus_snapshot(run))
    assert "vllm:request_success" not in fams
    assert "vllm:request_params_max_tokens" not in fams
    assert _sample(fams["vllm:request_params_n"], "_sum") == 5


def test_a_v0_sequence_group_counts_each_sequences_tokens_and_finish() -> None:
    # a vLLM v0 group of n = 3 samples of 4 tokens each (max_tokens 4: length) and a plain
    # request of 2 tokens (max_tokens 10: stop). vLLM v0 counted every sequence's tokens and
    # finish reason, the rest once a group: 3 * 4 + 2 = 14 generated tokens, 3 length + 1 stop,
    # request_generation_tokens 4 observations (sum 14), e2e 2, request_params_n 3 and 1
    requests = [_finished(0, 10, 4, 4, n=3), _finished(1, 10, 2, 10)]
    summary = {"num_preemptions": 0, "max_model_len": 2048, "prefix_cache_queries": 0}
    run = Results(config_from_dict({}), request_frame(requests), pd.DataFrame(), summary)
    fams = _families(prometheus_snapshot(run))
    assert _sample(fams["vllm:generation_tokens"], "_total") == 14
    success = fams["vllm:request_success"]
    assert _sample(success, "_total", finished_reason="length") == 3
    assert _sample(success, "_total", finished_reason="stop") == 1
    tokens = fams["vllm:request_generation_tokens"]
    assert (_sample(tokens, "_count"), _sample(tokens, "_sum")) == (4, 14)
    assert _sample(fams["vllm:e2e_request_latency_seconds"], "_count") == 2
    n = fams["vllm:request_params_n"]
    assert (_sample(n, "_count"), _sample(n, "_sum")) == (2, 4)


def test_a_v0_runs_throughput_counts_every_sequence() -> None:
    # vLLM v0 with n = 2 parallel samples: each request's two sequences generate its output
    # tokens each, so the run generated twice the table's output column
    config = config_from_dict(
        {
            "model": "opt-13b",
            "gpu": "a100-40gb",
            "scheduler": {"engine": "vllm-v0"},
            "seed": 3,
            "workload": {"num_requests": 40, "rate_per_s": 4.0, "n": 2},
        }
    )
    results = simulate(config)
    table = results.requests
    assert (table["n"] == 2).all()
    assert results.summary["generation_tokens_total"] == 2 * int(table["output_tokens"].sum())
    summary = results.summary
    rate = summary["throughput_output_tokens_per_s"]
    assert rate == pytest.approx(2 * table["output_tokens"].sum() / summary["duration_s"])
    # the run's price over every sequence's tokens
    per_million = summary["cost_usd"] / (2 * table["output_tokens"].sum() / 1e6)
    assert summary["usd_per_million_output_tokens"] == pytest.approx(per_million)


def test_the_kv_connector_counters_read_zero_without_a_cpu_tier(hand_run: Results) -> None:
    # vLLM 0.34.0 creates vllm:external_prefix_cache_queries and _hits whether or not a KV
    # connector runs (PrometheusStatLogger.__init__): a run without a CPU tier exports 0
    fams = _families(prometheus_snapshot(hand_run))
    assert _sample(fams["vllm:external_prefix_cache_queries"], "_total") == 0
    assert _sample(fams["vllm:external_prefix_cache_hits"], "_total") == 0


def test_a_given_kv_size_leaves_gpu_memory_utilization_unset() -> None:
    # a server given --kv-cache-memory-bytes sizes its KV by it and leaves the share unset
    # (vLLM 0.34.0 CacheConfig.gpu_memory_utilization: None unless set): 2 GiB = 2,147,483,648
    summary = {"num_preemptions": 0, "max_model_len": 2048}
    config = config_from_dict({"cache": {"kv_cache_gib": 2}})
    run = Results(config, request_frame([_finished(0, 10, 2, 10)]), pd.DataFrame(), summary)
    (sample,) = _families(prometheus_snapshot(run))["vllm:cache_config_info"].samples
    assert sample.labels["gpu_memory_utilization"] == "None"
    assert sample.labels["kv_cache_memory_bytes"] == "2147483648"


def test_a_v0_beam_search_generates_every_candidate_and_returns_its_best() -> None:
    # vLLM v0 beam search of width 4 returning n = 1 beam of 5 tokens: the engine generates
    # 4 x 5 = 20 tokens (vLLM's generation_tokens counts every candidate), the client receives
    # 5 (the output throughput and the price per output token count those); request_params_n
    # observes the client's n = 1
    requests = [_finished(0, 10, 5, 5, beam_width=4)]
    summary = {"num_preemptions": 0, "max_model_len": 2048, "prefix_cache_queries": 0}
    run = Results(config_from_dict({}), request_frame(requests), pd.DataFrame(), summary)
    fams = _families(prometheus_snapshot(run))
    assert _sample(fams["vllm:generation_tokens"], "_total") == 20
    assert _sample(fams["vllm:request_params_n"], "_sum") == 1
    from kvsim.results.metrics import generated_tokens, output_tokens

    assert (generated_tokens(run.requests), output_tokens(run.requests)) == (20, 5)


def test_iteration_tokens_histogram_by_hand() -> None:
    # steps of 11, 2, 2 and 1 tokens (the EAGLE case of tests/scheduler/test_spec_decode.py):
    # 4 observations summing to 16; vLLM's buckets 1, 8, 16: 1, 3, 4 at or below each
    run = Results(
        config_from_dict({}),
        request_frame([_finished(0, 10, 6, 6)]),
        pd.DataFrame(),
        {"num_preemptions": 0, "max_model_len": 2048},
    )
    assert "vllm:iteration_tokens_total" not in _families(prometheus_snapshot(run))
    run.iteration_tokens = {11: 1, 2: 2, 1: 1}
    family = _families(prometheus_snapshot(run))["vllm:iteration_tokens_total"]
    assert (_sample(family, "_count"), _sample(family, "_sum")) == (4, 16)
    buckets = _buckets(family)
    assert (buckets["1.0"], buckets["8.0"], buckets["16.0"], buckets["+Inf"]) == (1, 3, 4, 4)


def test_steps_of_prefill_chunks_alone_are_not_iterations_vllm_counts() -> None:
    """1,900-token prompts in chunks of max_num_batched_tokens = 256, 100 s apart: each takes
    7 chunk steps that sample nothing (7 x 256 = 1,792 tokens), then one that computes the
    last 108 and samples its first token (1,900 prompt tokens computed + 1), then 3 decode
    steps of 1. vLLM makes no IterationStats for a step without outputs
    (``vllm/v1/engine/async_llm.py``), so it observes 3 x {1,901} and 9 x {1}; the 21 empty
    steps were observed as 0-token iterations."""
    fixed = {"lengths": "fixed", "fixed_prompt_tokens": 1900, "fixed_output_tokens": 4}
    config = config_from_dict(
        {
            "workload": {**fixed, "num_requests": 3, "rate_per_s": 0.01},
            "scheduler": {"max_num_batched_tokens": 256},
        }
    )
    assert simulate(config).iteration_tokens == {1901: 3, 1: 9}


@pytest.mark.parametrize("spec", [None, {"num_speculative_tokens": 3, "acceptance_rate": 0.7}])
def test_each_step_is_one_observation_and_each_token_counted_once(spec) -> None:
    # every engine step is observed once, fast-forwarded spans (speculative ones too) step by
    # step; each computed prompt token (at its first output) and each sampled token counted
    # once over the run: sum = prompt tokens - cached + generated
    config = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "cache": {"kv_cache_gib": 1},
            "scheduler": {"max_model_len": 4096},
            "workload": {"num_requests": 60, "rate_per_s": 6.0},
            **({"speculative": spec} if spec else {}),
        }
    )
    results = simulate(config)
    steps, summary = results.iteration_tokens, results.summary
    assert steps is not None
    assert sum(steps.values()) == summary["num_steps"]
    computed = summary["prompt_tokens_total"] - summary["prefix_cached_tokens_total"]
    assert sum(v * c for v, c in steps.items()) == computed + summary["generation_tokens_total"]


def test_throughput_counts_client_requests(client_run: Results) -> None:
    """``throughput_requests_per_s`` counts requests as clients sent them (``vllm bench
    serve``'s completed requests): the five rows above are four client requests (r2 and r3 are
    client request 7's two samples). A v1 run of 10 requests of n = 4 fans out into 40 rows and
    still sends 10, as vLLM v0 runs them as 10 sequence groups: 10 / duration_s in both."""
    from kvsim.engine import simulate
    from kvsim.results.metrics import client_request_count

    assert client_request_count(client_run.requests) == 4
    for engine, rows in (("vllm-v1", 40), ("vllm-v0", 10)):
        config = config_from_dict(
            {
                "scheduler": {"engine": engine},
                "workload": {"lengths": "alpaca_like", "n": 4, "num_requests": 10},
            }
        )
        summary = simulate(config).summary
        assert summary["num_requests"] == rows
        assert summary["throughput_requests_per_s"] == pytest.approx(10 / summary["duration_s"])


def test_goodput_counts_client_requests_and_a_fleet_of_one_agrees() -> None:
    """20 requests of n = 4 under vllm-v1 (80 sample rows) with a TTFT target every one meets:
    the throughput and the goodput are both 20 / duration_s (the goodput counted the 80
    samples, four times the throughput), and a fleet of one replica reports the same (its
    throughput counted samples too)."""
    from kvsim.fleet import simulate as fleet_simulate

    data = {
        "model": "llama-3.1-8b",
        "gpu": "h100-80gb",
        "scheduler": {"max_model_len": 4096},
        "workload": {"lengths": "alpaca_like", "n": 4, "num_requests": 20, "rate_per_s": 2.0},
        "slo": {"time_to_first_token_seconds": 60.0},
    }
    for fleet in (None, {"replicas": 1}):
        config = config_from_dict({**data, **({"fleet": fleet} if fleet else {})})
        summary = fleet_simulate(config).summary
        assert summary["slo_attainment"] == 1.0
        assert summary["throughput_requests_per_s"] == pytest.approx(20 / summary["duration_s"])
        assert summary["goodput_requests_per_s"] == pytest.approx(20 / summary["duration_s"])
