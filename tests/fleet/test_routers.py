"""Each router's choices on two replicas and four requests, worked out by hand.

The setup (``_config``, ``_requests``): Llama-3.1-8B on H100s, one GPU a replica, 256-token
blocks, a KV pool of exactly 101 blocks per replica (101 x 256 tokens x 128 KiB a token =
3,388,997,632 bytes; vLLM v1 keeps block 0 as its null block, so 100 blocks hold requests and
one held block is 0.01 of ``kv_cache_usage_perc``). Prompts and outputs are chosen so that no
request grows a block while it decodes, so a replica's usage is its requests' prompt blocks:

    r0  t=0.0  prompt 1,100 tokens of run "p"                      5 blocks (1,100+149 < 1,280)
    r1  t=0.1  prompt   300 tokens of run "q"  output   2 tokens   2 blocks; done by ~0.13 s
    r2  t=0.2  prompt   300: "q" x 290 then "y" x 10               2 blocks (300+149 < 512)
    r3  t=0.3  prompt   800: "p" x 520 then "x" x 280              4 blocks (800+149 < 1,024)

r0, r2, r3 decode 150 tokens (>= 150 steps of >= 6 ms: still running at 0.3 s). r1's prefill
(~12 ms) and one decode step end long before 0.2 s; its first block (q[0:256]) stays cached in
the free queue. r2 can hit that block where r1 ran (its cache cap is (300 - 1) // 256 = 1
block); r3 can hit r0's first two blocks (p[0:512]; cap (800 - 1) // 256 = 3, block 2 differs).
At each arrival, earlier requests are admitted (running, so no replica has a waiting queue).
"""

from __future__ import annotations

import logging

import pytest

from kvsim import config_from_dict
from kvsim.fleet import simulate
from kvsim.fleet.routers import prefix_scores, queue_scores
from kvsim.workload.request import Request

BLOCK = 256
KV_BYTES = 101 * BLOCK * 131_072  # 2 x 32 layers x 8 KV heads x 128 x 2 bytes = 128 KiB/token


def _config(router: str = "round_robin", *, pool: bool = True, **fleet: object) -> object:
    """Llama-3.1-8B on H100s, two replicas unless ``fleet`` says otherwise; ``pool``: the
    101-block pool of the module docstring, else the budget the H100 derives."""
    data: dict = {
        "model": "llama-3.1-8b",
        "gpu": "h100-80gb",
        "scheduler": {"max_model_len": 4096},
        "fleet": {"replicas": 2, "router": router, **fleet},
    }
    if pool:
        data["cache"] = {"block_size_tokens": BLOCK, "kv_cache_bytes": KV_BYTES}
    return config_from_dict(data)


def _requests() -> list[Request]:
    return [
        Request(0, 0.0, 1100, 150, 150, token_segments=(("p", 1100),)),
        Request(1, 0.1, 300, 2, 2, token_segments=(("q", 300),)),
        Request(2, 0.2, 300, 150, 150, token_segments=(("q", 290), ("y", 10))),
        Request(3, 0.3, 800, 150, 150, token_segments=(("p", 520), ("x", 280))),
    ]


# Ties go round robin: to the first tied replica after the router's last pick (the first pick's
# tie to replica 0).
#
# round_robin: each in turn -> 0, 1, 0, 1.
#
# least_requests (routed, not finished):
#   r0: [0, 0] tie -> 0;  r1: [1, 0] -> 1;  r2: r1 finished -> [1, 0] -> 1;
#   r3: [1, 1] tie, last pick 1 -> 0.
#
# least_kv (held blocks / 100):
#   r0: [0, 0] -> 0;  r1: [0.05, 0] -> 1;  r2: r1 freed its blocks -> [0.05, 0] -> 1;
#   r3: [0.05, 0.02] (r2: its cached block taken again + 1 new) -> 1.
#
# prefix (llm-d: 2 x prefix score + 1 x (1 - usage) + 1 x queue score; no queue anywhere, so
# every queue score is 1):
#   r0: nothing cached: [0 + 1 + 1, 0 + 1 + 1] = [2, 2] tie -> 0.
#   r1: "q" cached nowhere: [0 + 0.95 + 1, 0 + 1 + 1] = [1.95, 2] -> 1.
#   r2: cached blocks [0, 1] -> prefix scores [0, 1]: [0 + 0.95 + 1, 2 + 1 + 1] = [1.95, 4] -> 1.
#   r3: cached blocks [2, 0] -> [1, 0]: [2 + 0.95 + 1, 0 + 0.98 + 1] = [3.95, 1.98] -> 0.
#
# kv_cost (Dynamo: (queued prompt + prompt - cached) / 256 + held blocks + prompt blocks):
#   r0: both 1100/256 + 0 + 5 = 9.296875 -> tie -> 0.
#   r1: [300/256 + 5 + 2, 300/256 + 0 + 2] = [8.171875, 3.171875] -> 1.
#   r2: [8.171875, (300 - 256)/256 + 0 + 2] = [8.171875, 2.171875] -> 1.
#   r3: [(800 - 512)/256 + 5 + 4, 800/256 + 2 + 4] = [10.125, 9.125] -> 1: the decode load on
#       replica 0 outweighs its 2 cached blocks (llm-d's weights send r3 there instead).
EXPECTED = {
    "round_robin": [0, 1, 0, 1],
    "least_requests": [0, 1, 1, 0],
    "least_kv": [0, 1, 1, 1],
    "prefix": [0, 1, 1, 0],
    "kv_cost": [0, 1, 1, 1],
}


@pytest.mark.parametrize("router", sorted(EXPECTED))
def test_each_router_picks_the_replicas_worked_out_by_hand(router):
    results = simulate(_config(router), _requests())
    assert results.requests["replica"].tolist() == EXPECTED[router]
    assert results.summary["num_requests"] == 4


def test_prefix_router_hits_what_round_robin_misses():
    # under round robin r2 goes to replica 0 (no "q" block) and r3 to replica 1 (no "p"
    # block): no hit. The prefix router sends each where its prefix is: r2 hits 256 tokens,
    # r3 512.
    rr = simulate(_config("round_robin"), _requests()).requests["num_cached_tokens"].tolist()
    px = simulate(_config("prefix"), _requests()).requests["num_cached_tokens"].tolist()
    assert rr == [0, 0, 0, 0]
    assert px == [0, 0, 256, 512]


def test_llm_d_normalisations():
    # prefix: min-max over replicas holding blocks; one holder (or equal holders) scores 1
    assert prefix_scores([0, 0]) == [0.0, 0.0]
    assert prefix_scores([3, 0]) == [1.0, 0.0]
    assert prefix_scores([2, 2, 0]) == [1.0, 1.0, 0.0]
    assert prefix_scores([1, 3, 2]) == [0.0, 1.0, 0.5]
    # queue: (max - q) / (max - min); equal queues score 1
    assert queue_scores([4, 4]) == [1.0, 1.0]
    assert queue_scores([0, 2, 4]) == [1.0, 0.5, 0.0]


def test_ties_go_round_robin_not_all_to_replica_zero():
    # four requests at t=0 on three replicas: each is routed before any engine steps, so every
    # pool is empty at each pick (usage [0, 0, 0]): least_kv's ties go 0, 1, 2, then 0 again
    cfg = _config("least_kv", pool=False, replicas=3)
    reqs = [Request(i, 0.0, 100, 5, 5) for i in range(4)]
    assert simulate(cfg, reqs).requests["replica"].tolist() == [0, 1, 2, 0]


def test_the_fleet_sums_its_replicas_prefix_cache_and_usage_worked_by_hand():
    # The prefix router (EXPECTED above) sends r0 and r3 to replica 0, r1 and r2 to replica 1.
    # Queries are prompt tokens looked up at admission (vLLM's PrefixCacheStats: a request's
    # num_tokens): replica 0 1,100 + 800 = 1,900, replica 1 300 + 300 = 600; hits r3's 512 and
    # r2's 256. The fleet's are the sums, its rate the sums' ratio: 768 / 2,500 = 0.3072.
    result = simulate(_config("prefix"), _requests())
    table, summary = result.replicas, result.summary
    assert table["prefix_cache_queries"].tolist() == [1900, 600]
    assert table["prefix_cache_hits"].tolist() == [512, 256]
    assert (summary["prefix_cache_queries"], summary["prefix_cache_hits"]) == (2500, 768)
    assert summary["prefix_cache_hit_rate"] == pytest.approx(768 / 2500)
    assert summary["prefix_cached_tokens_total"] == 768
    assert summary["generation_tokens_total"] == 150 + 2 + 150 + 150
    assert summary["replica_requests_max_share"] == 0.5  # two of four each
    # Peak usage: replica 0 holds r0's 5 blocks and r3's 2 new ones beside the 2 it shares:
    # 7 / 100; replica 1 holds 2 (r1's, then r2's cached one and 1 new) throughout, 0.02
    assert table["kv_cache_usage_perc"][1] == pytest.approx(0.02)
    assert summary["kv_cache_usage_perc_max"] == pytest.approx(0.07)
    # the fleet's mean usage weighs each replica's by its busy seconds
    busy, usage = table["busy_s"], table["kv_cache_usage_perc"]
    assert summary["kv_cache_usage_perc"] == pytest.approx((usage * busy).sum() / busy.sum())
    assert summary["num_preemptions"] == 0


@pytest.mark.parametrize("router", ["round_robin", "least_requests"])
def test_the_samples_of_an_n_gt_1_request_go_where_the_first_went(router):
    # two client requests of n = 3, at t = 0 and t = 1, on two replicas: vLLM's router sends
    # each client request once and that server's engine fans it out, so the router picks
    # twice. round_robin: 0, then 1. least_requests: request 0 -> tie, replica 0; at t = 1 its
    # samples are done (30 tokens, well under 1 s), a tie again, after the last pick -> 1.
    # (Routed one sample at a time, round_robin gave 0, 1, 0, 1, 0, 1, least_requests
    # 0, 1, 0 for request 0's samples.)
    cfg = _config(router, pool=False)
    reqs = [Request(i, float(i), 100, 30, 30, n=3) for i in range(2)]
    assert simulate(cfg, reqs).requests["replica"].tolist() == [0, 0, 0, 1, 1, 1]


def test_a_fleets_metrics_prom_labels_each_replicas_own_metrics_by_engine():
    # the prefix router's fleet above: replica 0 served r0 and r3, replica 1 r1 and r2, with
    # prefix-cache queries 1,900 and 600 and hits 512 and 256; as a data-parallel vLLM server
    # labels its engines, metrics.prom carries one sample an engine (engine = the replica's
    # index), each engine's cache_config_info too, and the fleet's sums are sum() over them
    from prometheus_client.parser import text_string_to_metric_families

    from kvsim.results.prometheus import prometheus_snapshot

    text = prometheus_snapshot(simulate(_config("prefix"), _requests()))
    samples = {
        (s.name, s.labels.get("engine")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples["vllm:prefix_cache_queries_total", "0"] == 1900
    assert samples["vllm:prefix_cache_queries_total", "1"] == 600
    assert samples["vllm:prefix_cache_hits_total", "0"] == 512
    assert samples["vllm:prefix_cache_hits_total", "1"] == 256
    assert samples["vllm:e2e_request_latency_seconds_count", "0"] == 2
    assert samples["vllm:e2e_request_latency_seconds_count", "1"] == 2
    assert samples["vllm:cache_config_info", "0"] == samples["vllm:cache_config_info", "1"] == 1


def test_an_idle_replica_reports_its_pool_as_an_idle_server_does():
    # three replicas, one request: replicas 1 and 2 serve nothing, yet a vLLM server reports
    # its cache config from startup; each has the pool of 101 blocks above (100 usable and
    # vLLM's null block: num_gpu_blocks counts it)
    from prometheus_client.parser import text_string_to_metric_families

    from kvsim.results.prometheus import prometheus_snapshot

    cfg = _config(replicas=3)
    text = prometheus_snapshot(simulate(cfg, _requests()[:1]))
    (info,) = [
        f for f in text_string_to_metric_families(text) if f.name == "vllm:cache_config_info"
    ]
    blocks = {s.labels["engine"]: s.labels["num_gpu_blocks"] for s in info.samples}
    assert blocks == {"0": "101", "1": "101", "2": "101"}


def test_least_requests_counts_a_client_request_of_n_samples_once():
    # vLLM's router counts the HTTP requests it has outstanding: an n = 3 request is one.
    # A (n = 3) at t = 0 -> tie, replica 0; B at 0.1 -> [1, 0] -> 1; C at 0.2 -> [1, 1] tie,
    # after the last pick (1) -> 0; D at 0.3 -> [2, 1] -> 1 (all still decoding their 300
    # tokens, >= 300 steps of >= 5 ms). Counting samples, C and D saw [3, 1] and [3, 2]: both 1
    cfg = _config("least_requests", pool=False)
    reqs = [Request(0, 0.0, 100, 300, 300, n=3)]
    reqs += [Request(i, 0.1 * i, 100, 300, 300) for i in (1, 2, 3)]
    assert simulate(cfg, reqs).requests["replica"].tolist() == [0, 0, 0, 1, 0, 1]


def test_an_idle_replica_of_another_gpu_leaves_the_pool_to_the_replica_table():
    # replica 1 (an A100-80GB) serves nothing while replica 0 (an H100) serves the one
    # request: the replicas' pools differ (the A100's 80 GB against the H100's 79.2 GiB CUDA
    # total), so the fleet's summary leaves num_gpu_blocks out, as when both serve (the idle
    # replica reported nothing before, and the H100's count read as the fleet's)
    cfg = _config(pool=False, replica_overrides=[{}, {"gpu": "a100-80gb"}])
    result = simulate(cfg, _requests()[:1])
    assert result.requests["replica"].tolist() == [0]
    assert "num_gpu_blocks" not in result.summary


@pytest.mark.parametrize("router", ["prefix", "kv_cost"])
def test_a_prefix_scoring_router_without_prefix_caching_is_warned(router, caplog):
    # llm-d's and Dynamo's scores read the blocks each replica caches: with no prefix cache
    # every score is 0 and the router balances load alone (a trial saw it route as least_kv)
    from kvsim.config import config_from_dict
    from tests.conftest import forget_warnings

    fleet = {"replicas": 2, "router": router}
    forget_warnings(caplog)
    with caplog.at_level(logging.WARNING):
        config_from_dict({"cache": {"enable_prefix_caching": False}, "fleet": fleet})
        config_from_dict({"cache": {"enable_prefix_caching": True}, "fleet": fleet})
    assert [r.getMessage() for r in caplog.records] == [
        f"fleet.router = {router!r} scores the prefix each replica caches, but no replica "
        "caches prefixes (cache.enable_prefix_caching is off): every score is 0, so it routes "
        "by load alone"
    ]


@pytest.mark.parametrize(
    ("summary", "warned"),
    [
        ({"num_replicas": 3, "replica_requests_max_share": 1.0, "router": "prefix"}, True),
        ({"num_replicas": 3, "replica_requests_max_share": 0.5, "router": "prefix"}, False),
        # one prefill and one decode replica: no role has a choice, the share is 1 by rule
        ({"num_replicas": 2, "num_prefill_replicas": 1, "replica_requests_max_share": 1.0}, False),
        ({"num_replicas": 3, "num_prefill_replicas": 1, "replica_requests_max_share": 0.95}, True),
        ({"replica_requests_max_share": 1.0}, False),  # (one engine)
    ],
)
def test_a_fleet_whose_one_replica_served_nearly_all_is_warned(summary, warned, caplog):
    # a prefix router on a workload sharing one prefix sent every request to replica 0, the
    # rest idle, and nothing in the run said so (docs/fleet.md did)
    from kvsim.cli.run import note_one_busy_replica

    with caplog.at_level(logging.WARNING, logger="kvsim.cli"):
        note_one_busy_replica(summary)
    said = [r.getMessage() for r in caplog.records]
    assert bool(said) is warned, said
    if warned:
        assert said[0].startswith("one replica served ")


# Under async scheduling a request handed to a replica reaches its scheduler at the end of the
# next step; the router still sees it there, as the engine's own num_requests_waiting does. Two
# requests at t=0 (r0 300 prompt tokens and r1 800, 400 outputs each: by 0.05 s they hold 2 and
# 4 blocks), then three of 600 tokens at t=0.05, routed at the same instant (none scheduled):
#   kv_cost: r2 [600/256 + 2 + 3, 600/256 + 4 + 3] = [7.34, 9.34] -> 0;
#            r3 [(600 + 600)/256 + 2 + 3, 9.34] = [9.69, 9.34] -> 1;
#            r4 [9.69, (600 + 600)/256 + 4 + 3] = [9.69, 11.69] -> 0.
#   prefix (no shared tokens; usage [0.98, 0.96]): r2 queues [0, 0] -> scores [1, 1]:
#            [1.98, 1.96] -> 0; r3 queues [1, 0] -> [0, 1]: [0.98, 1.96] -> 1;
#            r4 queues [1, 1]: [1.98, 1.96] -> 0.
# The same as without async scheduling; async, r3 and r4 went to replica 0 (it looked empty).
@pytest.mark.parametrize("router", ["kv_cost", "prefix"])
@pytest.mark.parametrize("async_scheduling", [False, True])
def test_a_router_sees_requests_an_async_scheduler_has_not_yet(router, async_scheduling):
    cfg = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "scheduler": {"max_model_len": 4096, "async_scheduling": async_scheduling},
            "fleet": {"replicas": 2, "router": router},
            "cache": {"block_size_tokens": BLOCK, "kv_cache_bytes": KV_BYTES},
        }
    )
    reqs = [
        Request(0, 0.0, 300, 400, 400, token_segments=(("a", 300),)),
        Request(1, 0.0, 800, 400, 400, token_segments=(("b", 800),)),
        *(Request(i, 0.05, 600, 5, 5, token_segments=((f"c{i}", 600),)) for i in (2, 3, 4)),
    ]
    assert simulate(cfg, reqs).requests["replica"].tolist() == [0, 1, 0, 1, 0]


def test_kv_cost_counts_the_prompt_a_running_request_has_still_to_prefill():
    """Dynamo's router counts a request's prefill work from its routing until its prefill ends.
    512-token chunks: r1 (4,000 tokens at 0.2 s) on replica 1 is in its first chunk when r2
    (600) arrives at 0.21 s, holding 2 blocks with 0 tokens computed; replica 0's r0 (2,000
    tokens at 0 s) decodes in 8 blocks (2,000 + its outputs by then <= 2,048):
        r2: [600/256 + 8 + 3, (4,000 + 600)/256 + 2 + 3] = [13.34, 22.97] -> 0
    (counting only waiting requests, replica 1 read 600/256 + 2 + 3 = 7.34: r2 went there).
    r0: tie -> 0; r1: [4,000/256 + 8 + 16, 4,000/256 + 0 + 16] = [39.6, 31.6] -> 1."""
    data = {
        "model": "llama-3.1-8b",
        "gpu": "h100-80gb",
        "cache": {"block_size_tokens": BLOCK, "kv_cache_bytes": 2 * 2**30},
        "scheduler": {
            "max_model_len": 4096,
            "max_num_batched_tokens": 512,
            "max_num_seqs": 64,
        },
        "fleet": {"replicas": 2, "router": "kv_cost"},
    }
    reqs = [
        Request(0, 0.0, 2000, 400, 400, token_segments=(("a", 2000),)),
        Request(1, 0.2, 4000, 5, 5, token_segments=(("b", 4000),)),
        Request(2, 0.21, 600, 5, 5, token_segments=(("c", 600),)),
    ]
    assert simulate(config_from_dict(data), reqs).requests["replica"].tolist() == [0, 1, 0]
