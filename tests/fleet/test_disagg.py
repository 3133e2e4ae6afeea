"""Disaggregated prefill/decode: a request's TTFT is its prefill, the KV transfer and the decode
replica's first step, the transfer worked out by hand from the link's bandwidth."""

from __future__ import annotations

import pytest

from kvsim import config_from_dict
from kvsim.engine.build import cost_model_from_config
from kvsim.fleet import simulate
from kvsim.workload.request import Request


def _config(**fleet: object) -> object:
    return config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "cost": "lean",  # one roofline, 60 % of peak FLOP/s, 2 ms a step: worked by hand below
            "cache": {"kv_cache_gib": 4},
            "scheduler": {"max_model_len": 4096},
            "fleet": {"replicas": 2, "prefill_replicas": 1, **fleet},
        }
    )


def test_ttft_is_prefill_plus_transfer_plus_first_decode_step():
    cfg = _config(link="infiniband-ndr")
    req = Request(0, 0.0, 1000, 10, 10)
    results = simulate(cfg, [req])
    row = results.requests.iloc[0]
    cost = cost_model_from_config(cfg.replica_configs[0], paged=True)
    # replica 0 prefills the whole 1,000-token prompt in one step (8,192-token budget) and
    # samples the copy's one token: (new tokens, context read, attention pairs, sequences)
    prefill_s = cost.step_s(1000, 0, 1000 * 1000, 1)  # ~ 16 TFLOP at 0.6 x 989 TFLOP/s + 2 ms
    # the transfer: 1,000 tokens x 128 KiB (2 x 32 layers x 8 KV heads x 128 x 2 bytes =
    # 131,072 bytes) over one ConnectX-7 NDR port, 400 Gb/s = 50e9 bytes/s, plus 10 us:
    transfer_s = 10e-6 + 1000 * 131_072 / 50e9
    assert transfer_s == pytest.approx(0.00263144, abs=1e-12)
    # replica 1 then computes the last prompt token over the 999 it received and samples the
    # first output token: one token, 999 read, 2 x 1 x 999 + 1 attention pairs
    first_decode_s = cost.step_s(1, 999, 2 * 999 + 1, 1)
    assert prefill_s == pytest.approx(0.0292, abs=0.002)  # 16.06e12 / 593.4e12 + 2 ms
    ttft = row["time_to_first_token_seconds"]
    assert ttft == pytest.approx(prefill_s + transfer_s + first_decode_s, rel=1e-12)
    assert row["replica"] == 1
    assert row["prefill_replica"] == 0
    assert results.summary["kv_transfer_seconds_mean"] == pytest.approx(transfer_s, rel=1e-12)
    assert results.summary["kv_transfer_bytes_total"] == 1000 * 131_072
    assert row["output_tokens"] == 10  # the decode replica samples every output token


def test_each_side_reports_what_its_vllm_instance_does():
    """metrics.prom labels the prefill replica "0" and the decode replica "1", each with what a
    vLLM 0.34.0 instance counts (``PromptTokenStats``, ``CacheHitSource``, the NIXL connector
    pulling every prompt token the decode side lacks: ``nixl/pull_scheduler.py``); the fleet's
    totals went under "0" alone before. The request of the test above: 1,000 prompt tokens, 10
    output tokens, no prefix hits anywhere."""
    from prometheus_client.parser import text_string_to_metric_families

    from kvsim.results.prometheus import prometheus_snapshot

    cfg = _config(link="infiniband-ndr")
    results = simulate(cfg, [Request(0, 0.0, 1000, 10, 10)])
    text = prometheus_snapshot(results)
    samples = {
        (
            s.name,
            s.labels.get("engine"),
            s.labels.get("source") or s.labels.get("finished_reason"),
        ): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }

    def value(name: str, engine: str, label: str | None = None) -> float:
        return samples[f"vllm:{name}", engine, label]

    # prefill: computes the prompt and samples the copy's one token (max_tokens = 1: length)
    assert value("prompt_tokens_by_source_total", "0", "local_compute") == 1000
    assert value("prompt_tokens_by_source_total", "0", "external_kv_transfer") == 0
    assert value("generation_tokens_total", "0") == 1
    assert value("request_success_total", "0", "length") == 1
    # its connector is asked for the prompt less the local hits, and finds none
    assert value("external_prefix_cache_queries_total", "0") == 1000
    assert value("external_prefix_cache_hits_total", "0") == 0
    assert value("iteration_tokens_total_sum", "0") == 1000 + 1  # one step
    # decode: pulls all 1,000 (computed 0: its recompute of the last token is no prefill),
    # external queries = hits = the 1,000 its connector was asked for, no local hit
    assert value("prompt_tokens_by_source_total", "1", "local_compute") == 0
    assert value("prompt_tokens_by_source_total", "1", "external_kv_transfer") == 1000
    assert value("prompt_tokens_cached_by_source_total", "1", "p2p") == 1000
    assert value("prompt_tokens_cached_total", "1") == 1000
    assert value("external_prefix_cache_queries_total", "1") == 1000
    assert value("external_prefix_cache_hits_total", "1") == 1000
    assert value("prefix_cache_hits_total", "1") == 0
    assert value("generation_tokens_total", "1") == 10
    # one token a step, the first step's computed prompt tokens 0: 10 steps, 10 tokens
    assert value("iteration_tokens_total_count", "1") == 10
    assert value("iteration_tokens_total_sum", "1") == 10
    # from when the proxy sent it on (the idle replica takes its blocks at once): queued while
    # its KV crosses the link (vLLM records SCHEDULED at the step after it arrives), then its
    # first step (worked above); TTFT the two
    cost = cost_model_from_config(cfg.replica_configs[0], paged=True)
    transfer_s, first_s = 10e-6 + 1000 * 131_072 / 50e9, cost.step_s(1, 999, 2 * 999 + 1, 1)
    assert value("request_queue_time_seconds_sum", "1") == pytest.approx(transfer_s, rel=1e-9)
    assert value("request_prefill_time_seconds_sum", "1") == pytest.approx(first_s, rel=1e-9)
    ttft = transfer_s + first_s
    assert value("time_to_first_token_seconds_sum", "1") == pytest.approx(ttft, rel=1e-12)
    replica = results.replicas.set_index("replica")
    assert replica.loc[1, "time_to_first_token_seconds_p50"] == pytest.approx(ttft, rel=1e-12)
    assert results.replica_runs[1].summary["kv_transfer_received_tokens"] == 1000
    # the client's view is kept: queued from its send until the prefill replica scheduled it
    assert results.requests["request_queue_time_seconds"].iloc[0] == 0


def test_a_disaggregated_run_read_back_exports_its_totals_whole(tmp_path):
    """Read back from disk (no replica's own run), the fleet's totals go under engine "0": every
    prompt token once by source and no count below zero (adding the pulled tokens to the fleet's
    cached ones, which are the prefill side's, gave local_cache_hit -1,000)."""
    from prometheus_client.parser import text_string_to_metric_families

    from kvsim.results import Results
    from kvsim.results.prometheus import prometheus_snapshot

    cfg = _config(link="infiniband-ndr")
    simulate(cfg, [Request(0, 0.0, 1000, 10, 10), Request(1, 0.0, 200, 4, 4)]).save(tmp_path)
    text = prometheus_snapshot(Results.load(tmp_path))
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    assert {s.labels.get("engine") for s in samples} == {"0"}
    assert all(s.value >= 0 for s in samples if s.name.startswith("vllm:"))
    by_source = [s.value for s in samples if s.name == "vllm:prompt_tokens_by_source_total"]
    assert sum(by_source) == 1000 + 200


def test_nvlink_moves_the_same_kv_nine_times_faster():
    req = Request(0, 0.0, 1000, 10, 10)
    ib = simulate(_config(link="infiniband-ndr"), [req]).summary["kv_transfer_seconds_mean"]
    nv = simulate(_config(link="nvlink"), [req]).summary["kv_transfer_seconds_mean"]
    # 131,072,000 bytes at 450e9 + 5 us vs at 50e9 + 10 us
    assert nv == pytest.approx(5e-6 + 131_072_000 / 450e9, rel=1e-12)
    assert ib == pytest.approx(10e-6 + 131_072_000 / 50e9, rel=1e-12)


def test_decode_side_holds_the_prompt_blocks_while_it_receives():
    # a 1,000-token prompt in 16-token blocks is 63 blocks on the decode replica from the
    # moment the transfer starts; the decode replica's memory rows then hold >= 1,000 slots
    cfg = _config(link={"bandwidth_bytes_per_s": 1e9, "latency_s": 0.5})  # a slow link
    results = simulate(cfg, [Request(0, 0.0, 1000, 10, 10)])
    memory = results.memory
    decode = memory[memory["replica"] == 1]
    assert decode["held"].min() >= 1008  # 63 x 16 slots, every row of the decode replica
    ttft = results.requests["time_to_first_token_seconds"].iloc[0]
    assert ttft > 0.5 + 1000 * 131_072 / 1e9  # the slow link's latency and bytes


def test_splits_that_do_not_fit_the_fleet_are_one_clear_error():
    with pytest.raises(ValueError, match=r"fleet.prefill_replicas: 2 prefill replica\(s\) leave"):
        _config(prefill_replicas=2)
    with pytest.raises(ValueError, match=r"vllm-v1"):
        config_from_dict(
            {
                "scheduler": {"engine": "vllm-v0"},
                "fleet": {"replicas": 2, "prefill_replicas": 1},
            }
        )


@pytest.mark.parametrize(
    "override",
    [{"model": "gemma-3-27b", "gpu": "h100-80gb"}, {"cache": {"kv_cache_dtype": "fp8"}}],
    ids=["model", "kv-dtype"],
)
def test_prefill_and_decode_replicas_serve_one_model_in_one_kv_dtype(override):
    """A decode replica continues the KV its prefill replica computed: a Gemma prefill for a
    Llama decode (or fp8 KV for bf16) ran and reported KV moved; it is refused. Without
    disaggregation replicas may differ (a router over two pools)."""
    base = {"model": "llama-3.1-8b", "gpu": "h100-80gb", "workload": {"num_requests": 4}}
    fleet = {"replicas": 2, "prefill_replicas": 1, "replica_overrides": [override]}
    with pytest.raises(ValueError, match=r"every replica serves one model in one KV dtype"):
        config_from_dict({**base, "fleet": fleet})
    config_from_dict({**base, "fleet": {"replicas": 2, "replica_overrides": [override]}})


def test_a_replicas_model_that_differs_in_a_field_names_the_field():
    # a replica's table may keep its preset's name and change a field: the error named both
    # replicas "llama-3.1-8b (auto)", not what differs
    override = {"model": {"name": "llama-3.1-8b", "num_layers": 16}}
    base = {"model": "llama-3.1-8b", "gpu": "h100-80gb", "workload": {"num_requests": 4}}
    fleet = {"replicas": 2, "prefill_replicas": 1, "replica_overrides": [{}, override]}
    with pytest.raises(ValueError, match=r"replica 1's differs from replica 0's in "
                       r"model\.num_layers \(32 -> 16\)$"):  # fmt: skip
        config_from_dict({**base, "fleet": fleet})


def test_received_requests_run_before_a_preempted_one_that_cannot_fit():
    # A decode replica with a 1 GiB pool (8,176 slots) takes blocks for every prompt on its
    # way; a request it preempted waits at the front for ~1,600 slots that the received
    # requests hold. vLLM 0.34.0 scans the requests holding blocks first
    # (``kv_holding_waiting``), so they run, finish and free them; with one FCFS queue the
    # preempted head stopped every step and the run failed ("can never be admitted").
    config = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "a100-80gb",
            "seed": 3,
            "workload": {
                "num_requests": 200,
                "rate_per_s": 20.0,
                "shared_prefix_tokens": 300,
                "num_tenants": 3,
            },
            "cache": {"kv_cache_gib": 1},
            "scheduler": {"max_model_len": 2048},
            "fleet": {"replicas": 2, "prefill_replicas": 1},
        }
    )
    results = simulate(config)
    assert results.summary["num_requests"] == 200
    decode = results.replicas[results.replicas["role"] == "decode"]
    assert int(decode["num_preemptions"].iloc[0]) > 0  # (the case has its preempted request)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_decode_replica_waits_for_kv_on_its_way_when_nothing_else_can_run(async_scheduling):
    # Pool: 10 blocks of 16 (block 0 vLLM v1's null block: 9 usable, max_model_len 144). X (40
    # prompt tokens, 60 out) arrives first and decodes on the decode replica, holding
    # cdiv(40, 16) = 3 blocks; Y (90 prompt tokens) arrives as X starts decoding, and the decode
    # replica takes cdiv(90, 16) = 6 blocks for its KV, which crosses a link with 0.5 s of
    # latency: 9 of 9 held. X's 49th token needs a 4th block: X preempts itself (the only
    # request running) and, to recompute 49 tokens, needs 4 blocks of the 3 free. Nothing can
    # run until Y's KV arrives (vLLM steps idle meanwhile); then Y, holding its blocks, runs
    # first (1 token, then 1 decode: 91 tokens in its 6 blocks), finishes and frees them, and
    # X runs again (with async scheduling too: Y is handed over at once, no step running). The
    # engine used to stop with "can never be admitted".
    cfg = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "cost": "lean",
            "cache": {"kv_cache_bytes": 10 * 16 * 131_072},  # 128 KiB a token
            "scheduler": {"max_model_len": 144, "async_scheduling": async_scheduling},
            "fleet": {
                "replicas": 2,
                "prefill_replicas": 1,
                "link": {"bandwidth_bytes_per_s": 50e9, "latency_s": 0.5},
            },
        }
    )
    x, y = Request(0, 0.0, 40, 60, 60), Request(1, 0.517, 90, 2, 2)
    requests = simulate(cfg, [x, y]).requests.set_index("req_id")
    assert requests.loc[0, "num_preemptions"] == 1
    assert requests.loc[1, "num_preemptions"] == 0
    assert requests.loc[0, "finish_time_s"] > requests.loc[1, "finish_time_s"]


def test_the_busiest_replica_share_is_taken_within_its_role():
    # P/D 1:2, round robin, 4 requests: the one prefill replica gets all 4 (its role has no
    # other replica), the two decode replicas 2 each: the busiest one's share of its role's
    # requests is 2 / 4 = 0.5, not the prefill replica's 4 / 4.
    cfg = _config(replicas=3, router="round_robin")
    requests = [Request(i, 0.01 * i, 100, 5, 5) for i in range(4)]
    results = simulate(cfg, requests)
    assert list(results.replicas["num_routed"]) == [4, 2, 2]
    assert results.summary["replica_requests_max_share"] == 0.5


def test_a_link_slower_than_any_network_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    """A prefill-to-decode link of 1 byte/s ran without a word (its p99 TTFT 84 years), where
    the CPU offload link warns; below 1e8 bytes/s (1 Gb Ethernet moves 1.25e8) it is said, and
    not for a fleet that never splits prefill from decode (the link unread)."""
    import logging

    from tests.conftest import forget_warnings

    forget_warnings(caplog)
    with caplog.at_level(logging.WARNING, logger="kvsim"):
        config_from_dict({"fleet": {"replicas": 2, "link": {"bandwidth_bytes_per_s": 5e9}}})
        config_from_dict(
            {"fleet": {"replicas": 2, "prefill_replicas": 1, "link": {"bandwidth_bytes_per_s": 1}}}
        )
    said = [r.getMessage() for r in caplog.records if "bytes/s is slower" in r.getMessage()]
    assert len(said) == 1
    assert "1 bytes/s is slower than any link" in said[0]


def test_a_hybrid_models_transfer_moves_the_blocks_its_groups_hold():
    """Gemma-3-27B: 10 full layers and 52 sliding (1,024 tokens), 2 x 16 KV heads x 128 x 2 B =
    8,192 B a token and layer. vLLM 0.34.0's NIXL connector sends a sliding group's last
    cdiv(1,024, 16) + 1 = 65 blocks (1,040 tokens; get_exchange_clipped_blocks): one GPU sends
    (10 x 4,000 + 52 x 1,040) x 8,192 = 770,703,360 bytes, not one 10-layer group's
    4,000 x 81,920 (the time was) nor every layer's 4,000 x 507,904 (the bytes were)."""
    cfg = config_from_dict(
        {
            "model": "gemma-3-27b",
            "gpu": "h100-80gb",
            "cost": "lean",
            "scheduler": {"max_model_len": 8192},
            "fleet": {"replicas": 2, "prefill_replicas": 1, "link": "infiniband-ndr"},
        }
    )
    results = simulate(cfg, [Request(0, 0.0, 4000, 10, 10)])
    sent = (10 * 4000 + 52 * 1040) * 8192
    assert sent == 770_703_360
    assert results.summary["kv_transfer_bytes_total"] == sent
    assert results.summary["kv_transfer_seconds_mean"] == pytest.approx(
        10e-6 + sent / 50e9, rel=1e-12
    )


def test_a_drafters_kv_crosses_with_the_targets():
    # EAGLE's one draft layer beside Llama-3.1-8B's 32: 33 x 4,096 = 135,168 bytes a token, in
    # the bytes counted as in the time (the bytes left the drafter out)
    cfg = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "cost": "lean",
            "cache": {"kv_cache_gib": 4, "enable_prefix_caching": False},
            "scheduler": {"max_model_len": 4096},
            "speculative": {"num_speculative_tokens": 3, "acceptance_rate": 0.7},
            "fleet": {"replicas": 2, "prefill_replicas": 1, "link": "infiniband-ndr"},
        }
    )
    results = simulate(cfg, [Request(0, 0.0, 1000, 10, 10)])
    assert results.summary["kv_transfer_bytes_total"] == 1000 * 135_168
    assert results.summary["kv_transfer_seconds_mean"] == pytest.approx(
        10e-6 + 1000 * 135_168 / 50e9, rel=1e-12
    )


def test_a_one_token_prompt_received_keeps_its_prompt_cached():
    """A received 1-token prompt has 0 tokens computed (the last is recomputed), which the
    decode side's admission read as a fresh request: it set the request's cached tokens to
    its local hit, 0, and metrics.prom's local hits (cached - pulled) came out -1. vLLM's
    decode side counts the whole prompt as pulled (``nixl/pull_scheduler.py``): 1 + 100
    tokens cached, all of them external, none local."""
    from prometheus_client.parser import text_string_to_metric_families

    from kvsim.results.prometheus import prometheus_snapshot

    results = simulate(_config(), [Request(0, 0.0, 1, 5, 5), Request(1, 0.0, 100, 5, 5)])
    decode = {}
    for family in text_string_to_metric_families(prometheus_snapshot(results)):
        for sample in family.samples:
            if sample.labels.get("engine") == "1":
                decode[(sample.name, sample.labels.get("source", ""))] = sample.value
    assert decode[("vllm:prompt_tokens_cached_total", "")] == 101
    assert decode[("vllm:prefix_cache_hits_total", "")] == 0
    assert decode[("vllm:prompt_tokens_by_source_total", "external_kv_transfer")] == 101
    assert decode[("vllm:prompt_tokens_by_source_total", "local_cache_hit")] == 0


def test_a_decode_replica_reports_the_prefill_sides_hits_as_the_requests_cached_tokens():
    """Two 100-token prompts of the same tokens, 5 s apart: the prefill replica computes the
    first whole and finds 6 full blocks of the second cached (96 tokens; never its last
    token). vLLM's decode frontend takes ``remote_prefill_cached_tokens`` as each request's
    cached tokens (``vllm/v1/engine/output_processor.py``), so its
    ``request_prefill_kv_computed_tokens`` observes 100 and 4, as the prefill side's does;
    the decode replica observed 0 and 0 (every token cached there)."""
    from prometheus_client.parser import text_string_to_metric_families

    from kvsim.results.prometheus import prometheus_snapshot

    prompt = ((("p", 0), 100),)
    requests = [
        Request(0, 0.0, 100, 5, 5, token_segments=prompt),
        Request(1, 5.0, 100, 5, 5, token_segments=prompt),
    ]
    results = simulate(_config(), requests)
    observed = {}
    for family in text_string_to_metric_families(prometheus_snapshot(results)):
        for sample in family.samples:
            if sample.name.startswith("vllm:request_prefill_kv_computed_tokens_"):
                observed[(sample.name.rsplit("_", 1)[1], sample.labels["engine"])] = sample.value
    assert observed[("sum", "0")] == observed[("sum", "1")] == 100 + 4
    assert observed[("count", "0")] == observed[("count", "1")] == 2


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_decode_replica_sees_a_handed_over_request_as_its_scheduler_would(async_scheduling):
    """Async scheduling on the decode side (docs/engine.md: a request arriving while step N runs
    is scheduled in step N + 2; vLLM's engine core adds it, then plans, only after the step in
    flight, having planned the next already). r1 (1,000 prompt tokens) is handed to the decode
    replica at its prefill's end h while r0 decodes there. Its blocks are taken when the
    scheduler first sees it, at the first step start after h (the second, async); its KV then
    crosses the link in 10 us + 1,000 x 131,072 / 50e9 = 2.63144 ms, and it is scheduled when
    the scheduler sees it arrived: the first step start after that (the second, async). The
    step starts are the decode replica's memory rows (step resolution); the rule is checked
    against them. Async used to be as sync: r1's arrival read as its client's, long before."""
    cfg = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "cost": "lean",
            "cache": {"kv_cache_gib": 4},
            "memory_resolution": "step",
            "scheduler": {"max_model_len": 4096, "async_scheduling": async_scheduling},
            "fleet": {"replicas": 2, "prefill_replicas": 1, "link": "infiniband-ndr"},
        }
    )
    result = simulate(cfg, [Request(0, 0.0, 100, 200, 200), Request(1, 0.05, 1000, 5, 5)])
    decode = result.replica_runs[1]
    starts = decode.memory["time_s"].to_numpy()
    r1 = decode.requests.set_index("req_id").loc[1]
    handed = r1["arrival_time_s"]  # (the decode replica's arrival: the prefill's end)
    k = 2 if async_scheduling else 1

    def kth_start_after(t: float) -> float:
        return float(starts[starts > t][k - 1])

    arrived = kth_start_after(handed) + 1e-5 + 1000 * 131_072 / 50e9
    assert r1["first_scheduled_time_s"] == pytest.approx(kth_start_after(arrived), abs=1e-9)


def test_a_prefill_replica_with_a_cpu_tier_counts_its_connector_queries_once():
    """vLLM records the connector's prefix-cache stats once an admission (``Scheduler.
    schedule``): with NIXL and a CPU tier behind one multi-connector, a prefill replica's
    queries are its prompt tokens less its GPU hits, once (they were counted once for the CPU
    tier and again as tokens asked of NIXL). Two prompts on the prefill replica, 2 GiB of CPU
    tier: the first's 300 tokens find nothing; the second's 400 share its first 300, whose 18
    full blocks of 16 (288 tokens) its prefill left cached on the GPU. Queries: 300 + (400 -
    288) = 412 (counted twice: 300 + 112 for the tier, and the same asked of NIXL)."""
    from kvsim.results.prometheus import prometheus_snapshot

    cfg = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "scheduler": {"max_model_len": 4096},
            "fleet": {"replicas": 2, "prefill_replicas": 1},
            "offload": {"kv_offloading_size": 2},
        }
    )
    first = Request(0, 0.0, 300, 20, 20, token_segments=(("a", 300),))
    second = Request(1, 5.0, 400, 20, 20, token_segments=(("a", 300), ("b", 100)))
    result = simulate(cfg, [first, second])
    assert int(result.replica_runs[0].summary["prefix_cache_hits"]) == 288
    text = prometheus_snapshot(result)
    line = next(
        ln for ln in text.splitlines() if ln.startswith("vllm:external_prefix_cache_queries_total")
    )
    assert 'engine="0"' in line
    assert float(line.rsplit(" ", 1)[1]) == 412
