"""The ten examples of the v1-engine issue, each worked out from vLLM's rules.

Covered here: 1 (chunked prefill admits a budget below max_model_len), 2 (prefix hits are not
computed), 3 (same-step hits), 5 (tensor parallelism), 7 (prefix caching and sampling share on
``paged``), 9 (vLLM's latency intervals). Covered beside the code they test: 4 in
``scheduler/test_v1.py`` (80-token prompt, the paper's Fig. 6) and ``scheduler/test_swap.py``
(swap-in blocks); 6 in ``test_config.py`` and ``test_engine.py`` (defaults, counted rejections,
a KV budget above the GPU); 7's free order and pure queries in ``allocators/``; 8 in
``allocators/test_paged_sharing.py`` (copy-on-write at the first decode); 10 in
``scheduler/test_v1.py`` (v0's prefill-only steps and append check).
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvsim.cli import app
from kvsim.config import config_from_dict
from kvsim.core.kv.paged import PagedAllocator
from kvsim.core.scheduler import V1Scheduler
from kvsim.engine import simulate
from kvsim.workload.request import Request
from tests.scheduler.conftest import engine_args, step, tokens

SHARED = (("system prompt", 0), 1000)


def with_prompt(req_id: int, own: int, output: int = 4) -> Request:
    """A request of the 1,000-token shared prompt plus ``own`` tokens of its own."""
    segs = (SHARED, (("own", req_id), own))
    return Request(req_id, 0.0, 1000 + own, output, output, token_segments=segs)


def test_1_budget_below_max_model_len_runs_with_chunked_prefill():
    result = CliRunner().invoke(
        app,
        [
            "run",
            "--no-progress",
            "--set",
            "scheduler.max_num_batched_tokens=2048",
            "--set",
            "scheduler.max_model_len=8192",
            "--set",
            "workload.num_requests=20",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "vllm-v1" in result.output


@pytest.mark.parametrize("caching", [True, False])
def test_2_prefix_hits_are_neither_computed_nor_charged_to_the_budget(caching):
    # budget 64 tokens. A (1,000 shared + 24 own) runs alone and finishes; then B (1,000 shared
    # + 24 own). With caching B hits the 1000 // 16 = 62 full blocks of the shared prompt
    # (992 tokens) and computes 1,024 - 992 = 32 tokens: its whole prefill in one step.
    # Without, it computes all 1,024 tokens in 1,024 / 64 = 16 chunks.
    alloc = PagedAllocator(
        capacity_tokens=200 * 16, block_size_tokens=16, enable_prefix_caching=caching
    )
    args = engine_args(max_num_batched_tokens=64, max_num_seqs=8, enable_prefix_caching=caching)
    sched = V1Scheduler(alloc, args)
    sched.add_request(with_prompt(0, 24, output=2))
    while sched.has_work():
        step(sched)
    b = with_prompt(1, 24)
    sched.add_request(b)
    chunks = []
    while b.num_output_tokens == 0:
        plan, _ = step(sched)
        chunks.append(tokens(plan)[1])
    assert chunks == ([32] if caching else [64] * 16)
    assert b.num_cached_tokens == (992 if caching else 0)


def test_3_a_request_admitted_in_the_same_step_as_an_identical_one_hits():
    # both arrive together; blocks are cached inside A's allocation, so B, admitted right
    # after A in the same step, hits its 62 full shared blocks and computes 1,024 - 992 = 32
    alloc = PagedAllocator(
        capacity_tokens=200 * 16, block_size_tokens=16, enable_prefix_caching=True
    )
    sched = V1Scheduler(alloc, engine_args(enable_prefix_caching=True))
    a, b = with_prompt(0, 24), with_prompt(1, 24)
    sched.add_request(a)
    sched.add_request(b)
    plan, _ = step(sched)
    assert tokens(plan) == {0: 1024, 1: 32}
    summary = alloc.prefix_cache_summary()
    assert (summary["prefix_cache_queries"], summary["prefix_cache_hits"]) == (2048, 992)
    assert alloc.block_tables[0][:62] == alloc.block_tables[1][:62]


def test_5_llama_70b_runs_on_four_h100s():
    cfg = config_from_dict(
        {
            "model": "llama-3.1-70b",
            "gpu": "h100-80gb",
            "parallel": {"tensor_parallel_size": 4},
            "workload": {"num_requests": 50, "rate_per_s": 5.0},
        }
    )
    res = simulate(cfg)
    assert res.summary["tensor_parallel_size"] == 4
    assert res.summary["bytes_per_token"] == 2 * 80 * 2 * 128 * 2  # 2 of 8 KV heads per GPU
    assert res.requests["finish_time_s"].notna().all()


def test_7_prefix_caching_on_paged_hits_and_v1_samples_share_the_prompt():
    # the default paged pool under v1 caches prefixes: 30 requests of a 1,000-token system
    # prompt + 64 own tokens hit (1064 - 1) // 16 = 66 > 62 -> 62 full shared blocks each, but
    # the first: 29 x 992 hit tokens of 30 x 1,064 looked up
    base = {
        "cache": {"kv_cache_gib": 4},
        "workload": {
            "lengths": "fixed",
            "fixed_prompt_tokens": 64,
            "fixed_output_tokens": 8,
            "shared_prefix_tokens": 1000,
            "rate_per_s": 1.0,
            "num_requests": 30,
        },
    }
    summary = simulate(config_from_dict(base)).summary
    assert summary["prefix_cache_queries"] == 30 * 1064
    assert summary["prefix_cache_hits"] == 29 * 992
    off = config_from_dict(base, {"cache.enable_prefix_caching": False})
    assert "prefix_cache_hits" not in simulate(off).summary


def test_9_queue_prefill_decode_ttft_itl_and_e2e_by_hand():
    # every step costs 0.1 s (a GPU so fast that only step_overhead_s counts). A pool of 7
    # blocks of 4 tokens (6 usable beside v1's null block) holds one request at a time: A and B
    # (prompt 20 = 5 blocks, 3 output tokens: 22 KV tokens = 6 blocks) arrive at t = 0.
    # A: its prefill step [0, 0.1) samples its first token, two decode steps finish it at 0.3.
    # B is first scheduled at 0.3 (queue 0.3 s), samples its first token at 0.4 (prefill
    # 0.1 s, TTFT 0.4 s) and finishes at 0.6 (decode 0.2 s, 0.1 s per output token after the
    # first, E2E 0.6 s)
    cfg = config_from_dict(
        {
            "model": {
                "num_layers": 1,
                "num_attention_heads": 1,
                "num_kv_heads": 1,
                "head_dim": 1,
                "num_params": 1,
                "dtype_bytes": 1,
                "max_position_embeddings": 24,
            },
            "gpu": {
                "memory_bytes": 10**9,
                "hbm_bandwidth_bytes_per_s": 1e18,
                "fp16_flops_per_s": 1e18,
            },
            "cost": {"step_overhead_s": 0.1},
            "cache": {"kv_cache_bytes": 2 * 28, "block_size_tokens": 4},  # 28 slots: 7 blocks
        }
    )
    reqs = [Request(0, 0.0, 20, 3, 3), Request(1, 0.0, 20, 3, 3)]
    df = simulate(cfg, reqs).requests.set_index("req_id")
    b = df.loc[1]
    assert b["first_scheduled_time_s"] == pytest.approx(0.3)
    assert b["request_queue_time_seconds"] == pytest.approx(0.3)
    assert b["request_prefill_time_seconds"] == pytest.approx(0.1)
    assert b["time_to_first_token_seconds"] == pytest.approx(0.4)
    assert b["request_decode_time_seconds"] == pytest.approx(0.2)
    assert b["request_time_per_output_token_seconds"] == pytest.approx(0.1)
    assert b["e2e_request_latency_seconds"] == pytest.approx(0.6)
    assert df.loc[0, "request_queue_time_seconds"] == 0.0
