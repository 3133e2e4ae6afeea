"""Engine runs: conservation, fast-forward equivalence, determinism, a hand-worked blocked run,
the requests table written as requests finish."""

from __future__ import annotations

import copy
import gc

import numpy as np
import pandas as pd
import pytest
import simpy

from kvsim.config import config_from_dict
from kvsim.engine import prepare_requests, simulate
from kvsim.engine.loop import Engine
from kvsim.results.columns import CATEGORIES
from kvsim.results.tables import request_frame, request_frame_from_columns, request_table_columns
from kvsim.workload.request import Request

TINY_MODEL = {
    "name": "tiny",
    "num_layers": 1,
    "num_attention_heads": 1,
    "num_kv_heads": 1,
    "head_dim": 1,
    "dtype_bytes": 1,
    "num_params": 1_000_000,
}  # 2 bytes per token


def tiny_config(engine: str = "vllm-v0", **cache):
    return config_from_dict(
        {
            "model": TINY_MODEL,
            "gpu": "a100-40gb",
            "cache": {"kv_cache_bytes": 64, **cache},  # 32 slots
            "scheduler": {"engine": engine, "max_model_len": 17},
        }
    )


@pytest.mark.parametrize("engine", ["vllm-v0", "vllm-v1"])
def test_hand_worked_external_fragmentation_and_blocked_steps(engine):
    # first-fit, oracle slabs (prompt + output - 1 slots) on 32 slots. A [0,8) and C [16,24)
    # (3 + 6 - 1 = 8) run 6 steps; B [8,16) and D [24,32) (8 + 1 - 1 = 8) finish after their
    # prefill step. E (9 + 8 - 1 = 16) waits: from step 1 to step 5 the 16 free slots are two
    # 8-slot holes -> 5 blocked steps with 16 slots of external fragmentation.
    reqs = [
        Request(0, 0.0, 3, 6, 6),
        Request(1, 0.0, 8, 1, 1),
        Request(2, 0.0, 3, 6, 6),
        Request(3, 0.0, 8, 1, 1),
        Request(4, 0.0, 9, 8, 8),
    ]
    res = simulate(tiny_config(engine, allocator="first_fit", reservation="oracle"), reqs)
    mem = res.memory
    assert res.summary["num_blocked_steps"] == 5
    blocked = mem[mem["num_blocked_steps"] > 0]
    assert blocked["num_steps"].sum() == 5
    assert (blocked["external_fragmentation"] == 16).all()
    assert (blocked["free"] == 0).all()
    # E is admitted in step 6, after A and C finish at the end of step 5
    durations = mem["duration_s"].to_numpy()
    steps = mem["num_steps"].to_numpy()
    end_of_step5 = durations[np.cumsum(steps) <= 6].sum()
    assert res.requests.loc[4, "first_token_time_s"] > end_of_step5
    assert res.requests.loc[0, "finish_time_s"] == pytest.approx(end_of_step5)


@pytest.mark.parametrize(
    ("engine", "allocator", "reservation", "sharing"),
    [
        ("vllm-v1", "paged", "max", {}),
        ("vllm-v0", "paged", "max", {}),
        ("vllm-v1", "buddy", "pow2", {}),
        ("vllm-v0", "first_fit", "oracle", {}),
        ("vllm-v1", "best_fit", "max", {}),
        ("vllm-v0", "paged", "max", {"n": 4, "lengths": "alpaca_like"}),
        ("vllm-v0", "paged", "max", {"beam_width": 4, "lengths": "alpaca_like"}),
        ("vllm-v1", "paged", "max", {"n": 4, "lengths": "alpaca_like"}),
        ("vllm-v1", "radix", "max", {"shared_prefix_tokens": 100}),
        ("vllm-v0", "first_fit", "oracle", {"n": 2, "lengths": "alpaca_like"}),
    ],
)
def test_categories_sum_to_capacity_every_event(engine, allocator, reservation, sharing):
    cfg = config_from_dict(
        {
            "cache": {
                "allocator": allocator,
                "reservation": reservation,
                "kv_cache_gib": 2,
                "block_size_tokens": 16,
            },
            "scheduler": {"engine": engine},
            "workload": {"rate_per_s": 20.0, "num_requests": 300, **sharing},
            "debug_invariants": True,
        }
    )
    res = simulate(cfg)
    total = res.memory[list(CATEGORIES)].sum(axis=1)
    np.testing.assert_allclose(total, cfg.capacity_tokens, rtol=1e-12)
    assert (res.memory[list(CATEGORIES)] >= -1e-9).all().all()
    assert res.requests["finish_time_s"].notna().all()


FAST_FORWARD_CASES = [
    ("vllm-v1", "paged", {}),
    ("vllm-v1", "buddy", {}),
    ("vllm-v1", "radix", {}),
    ("vllm-v1", "paged", {"n": 2, "lengths": "alpaca_like", "rate_per_s": 20.0}),
    ("vllm-v1", "paged", {"shared_prefix_tokens": 40, "num_turns": 3, "turn_gap_s": 2.0}),
    ("vllm-v1", "radix", {"shared_prefix_tokens": 40, "num_turns": 3, "turn_gap_s": 2.0}),
    ("vllm-v1", "first_fit", {"lengths": "uniform", "max_total_tokens": 2048}),
    ("vllm-v0", "paged", {}),
    ("vllm-v0", "buddy", {}),
    ("vllm-v0", "radix", {}),
    ("vllm-v0", "paged", {"n": 3, "lengths": "alpaca_like", "rate_per_s": 20.0}),
    ("vllm-v0", "paged", {"beam_width": 3, "lengths": "alpaca_like", "rate_per_s": 20.0}),
    ("vllm-v0", "buddy", {"n": 2, "lengths": "alpaca_like", "rate_per_s": 20.0}),
]


@pytest.mark.parametrize(("engine", "allocator", "sharing"), FAST_FORWARD_CASES)
def test_fast_forward_matches_step_by_step(engine, allocator, sharing):
    # chunked prefill (v1, small budget on long prompts), preemptions (2 GiB of KV), groups
    # with copy-on-write and beams (v0), prefix hits (shared prefixes, multi-turn)
    scheduler = {"engine": engine}
    if engine == "vllm-v1":
        scheduler["max_num_batched_tokens"] = 512
    cfg = config_from_dict(
        {
            "cache": {"allocator": allocator, "reservation": "pow2", "kv_cache_gib": 2},
            "scheduler": scheduler,
            "workload": {"rate_per_s": 4.0, "num_requests": 80 if sharing else 150, **sharing},
        }
    )
    fast = simulate(cfg)
    slow = simulate(cfg.model_copy(update={"memory_resolution": "step"}))
    assert (slow.memory["num_steps"] == 1).all()
    assert fast.summary["num_preemptions"] == slow.summary["num_preemptions"]
    assert fast.summary["num_steps"] == slow.summary["num_steps"]
    if "beam_width" not in sharing:  # beam groups branch every step: never fast-forwarded
        assert len(fast.memory) < len(slow.memory)
    pd.testing.assert_frame_equal(fast.requests, slow.requests, rtol=1e-9)
    keys = [
        "token_states_pct",
        "reservation_pct",
        "external_fragmentation_pct",
        "num_requests_running_mean",
        "num_requests_waiting_mean",
        "kv_saved_by_sharing_pct",
        "kv_cache_usage_perc",
    ]
    for counter in ("prefix_cache_hits", "prefix_cache_queries", "num_cow_copies"):
        assert fast.summary.get(counter) == slow.summary.get(counter)
    for key in keys:
        assert fast.summary[key] == pytest.approx(slow.summary[key], rel=1e-9)


def test_same_seed_same_results_other_seed_differs():
    cfg = config_from_dict({"workload": {"rate_per_s": 5.0, "num_requests": 200}, "seed": 7})
    a, b = simulate(cfg), simulate(cfg)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.memory, b.memory)
    c = simulate(cfg.model_copy(update={"seed": 8}))
    assert not a.requests["prompt_tokens"].equals(c.requests["prompt_tokens"])


def test_requests_that_cannot_run_are_counted_named_and_skipped(caplog):
    # max_model_len 17: 10 + 10 = 20 and 12 + 9 = 21 tokens are too long; 3 + 4 fits
    reqs = [Request(0, 0.0, 10, 10, 10), Request(1, 0.0, 3, 4, 4), Request(2, 0.0, 12, 9, 9)]
    res = simulate(tiny_config(), reqs)
    assert res.summary["num_requests_rejected"] == 2
    assert res.summary["num_rejected_max_model_len"] == 2
    assert res.summary["num_requests"] == 1
    assert "2 of 3 requests cannot run" in caplog.text
    assert "first: request 0, prompt 10 + output 10 tokens" in caplog.text
    with pytest.raises(ValueError, match="1 of 1 requests cannot run"):  # none left to run
        simulate(tiny_config(), reqs[:1])
    with pytest.raises(ValueError, match="1 of 2 requests cannot run"):
        simulate(tiny_config(), reqs[:2], strict=True)


def test_the_advice_for_requests_that_cannot_run_fits_their_reason():
    from kvsim.engine.intake import Rejected

    long, wide = Request(0, 0.0, 10, 10, 10), Request(1, 0.0, 3, 4, 4)
    only_long = Rejected(max_model_len=[long]).message(2, 17, 32)
    assert only_long.endswith("(raise scheduler.max_model_len or filter the workload)")
    only_pool = Rejected(kv_pool=[wide]).message(2, 17, 32)
    assert "the empty pool's 32 usable slots cannot hold" in only_pool
    assert only_pool.endswith("(raise the KV budget or filter the workload)")
    both = Rejected(max_model_len=[long], kv_pool=[wide]).message(2, 17, 32)
    assert both.endswith(
        "(raise scheduler.max_model_len, raise the KV budget, or filter the workload)"
    )
    # the field that sets the budget, where the run knows it (it named no field)
    named = Rejected(kv_pool=[wide], budget_field="cache.kv_cache_gib").message(2, 17, 32)
    assert named.endswith("(raise the KV budget (cache.kv_cache_gib) or filter the workload)")


def test_the_budgets_field_is_the_one_the_config_sets():
    from kvsim.config import config_from_dict
    from kvsim.engine.intake import budget_field

    assert budget_field(config_from_dict({"cache": {"kv_cache_gib": 2}})) == "cache.kv_cache_gib"
    assert budget_field(config_from_dict({"cache": {"kv_cache_bytes": 2**31}})) == (
        "cache.kv_cache_bytes"
    )
    assert budget_field(config_from_dict({})) == "cache.gpu_memory_utilization"


def test_results_round_trip(tmp_path):
    cfg = config_from_dict({"workload": {"num_requests": 50}})
    res = simulate(cfg)
    res.save(tmp_path)
    back = type(res).load(tmp_path)
    pd.testing.assert_frame_equal(res.requests, back.requests)
    assert back.config == cfg
    assert back.summary == res.summary


def test_paged_preemptions_under_pressure_are_counted():
    # 32-slot pool, 4-token blocks, 4 requests that each grow to 15 tokens -> must preempt
    reqs = [Request(i, 0.0, 3, 12, 12) for i in range(4)]
    res = simulate(tiny_config(allocator="paged", block_size_tokens=4), copy.deepcopy(reqs))
    assert res.summary["num_preemptions"] > 0
    assert res.requests["num_preemptions"].sum() == res.summary["num_preemptions"]
    assert res.requests["finish_time_s"].notna().all()


@pytest.mark.parametrize("engine", ["vllm-v0", "vllm-v1"])
def test_one_workload_replayed_into_two_runs_gives_the_same_results(engine):
    # each run serves fresh requests made from the workload's facts (RequestSpec): the second
    # run must not start from the first one's finished requests
    from kvsim.engine.intake import requests_for

    cfg = config_from_dict(
        {"scheduler": {"engine": engine}, "workload": {"rate_per_s": 5.0, "num_requests": 60}}
    )
    workload = requests_for(cfg)
    first, second = simulate(cfg, workload), simulate(cfg, workload)
    pd.testing.assert_frame_equal(first.requests, second.requests)
    assert first.summary["num_steps"] == second.summary["num_steps"]
    specs = [r.spec for r in workload]
    assert all(r.num_computed_tokens == 0 and r.finish_time_s is None for r in workload)
    pd.testing.assert_frame_equal(simulate(cfg, specs).requests, first.requests)
    with pytest.raises(AttributeError):
        specs[0].prompt_tokens = 3  # frozen: a spec is never written


def _run(engine: Engine) -> None:
    engine.env.process(engine.engine_loop())
    engine.env.run()


LOGGED_CASES = {
    # int arrival times (an int64 column), a parent on some rows only, preemptions
    "hand-made": (
        tiny_config(allocator="paged", block_size_tokens=4),
        [
            Request(0, 0, 3, 12, 12),
            Request(1, 0, 3, 12, 12, parent_id=0),
            Request(2, 1, 3, 12, 12),
            Request(3, 2, 3, 1, 1, parent_id=2),
        ],
    ),
    "v1 samples": (
        config_from_dict({"workload": {"n": 2, "lengths": "alpaca_like", "num_requests": 40}}),
        None,
    ),
    "prefix hits": (
        config_from_dict(
            {
                "cache": {"enable_prefix_caching": True, "kv_cache_gib": 2},
                "workload": {"shared_prefix_tokens": 64, "num_requests": 80, "rate_per_s": 20.0},
            }
        ),
        None,
    ),
}


@pytest.mark.parametrize("case", LOGGED_CASES)
def test_requests_table_written_as_requests_finish_is_their_request_frame(case):
    # the engine forgets a finished request and keeps its row (RequestLog): the table it gives
    # must be request_frame of the served requests, values and dtypes
    cfg, requests = LOGGED_CASES[case]
    served = prepare_requests(cfg, requests)[0]
    engine = Engine(simpy.Environment(), cfg, served)
    _run(engine)  # served stays with us: request_frame reads it
    logged = request_frame_from_columns(request_table_columns(engine.log.columns()))
    pd.testing.assert_frame_equal(logged, request_frame(served), check_exact=True)
    if case == "hand-made":
        assert logged["arrival_time_s"].dtype == np.int64
        assert logged["num_preemptions"].sum() > 0


def test_engine_keeps_no_finished_request():
    # a million-request run must not hold every request to its end: once the caller lets go
    # of its list, a request lives only while it waits or runs
    def alive() -> int:
        gc.collect()
        return sum(type(o) is Request for o in gc.get_objects())

    before = alive()  # other tests' requests
    cfg = config_from_dict({"workload": {"num_requests": 200, "rate_per_s": 20.0}})
    engine = Engine(simpy.Environment(), cfg, prepare_requests(cfg)[0])
    assert alive() == before + 200
    _run(engine)
    assert len(engine.log) == engine.num_requests == 200
    # the lazy cohort's heaps let go of a member's stale entries when the clock passes them:
    # the last few requests to leave may still be there
    assert alive() - before <= 5


def test_kv_cache_usage_of_a_full_span_is_exactly_1():
    """A span's row holds duration-weighted means over its steps: seven steps of 0.1 s weigh
    0.1 / 0.7 each, and 4,096 x those seven weights add up to 4,096.000000000001 in floats. The
    pool is full at every step (4,080 slots held + vLLM v1's 16-slot null block = 4,096), so its
    kv_cache_usage_perc is 4,080 / 4,080 = 1 at every step: mean and peak exactly 1."""
    from kvsim.engine.recorder import MemoryRecorder, SpanSlots
    from kvsim.results.metrics import memory_shares

    durations = [0.1] * 7
    recorder = MemoryRecorder(capacity_slots=4096, usable_slots=4080)
    # 4,080 slots held, all token states, the 16-slot null block as overhead; no step adds any
    slots = SpanSlots(
        4080,
        4080,
        0,
        overhead=16,
        slots_per_block=16,
        blocks=[0] * 7,
        internal_steps=[0] * 7,
        num_seqs=0,
    )
    recorder.record(0.0, durations, sum(durations), slots, None, 255, 0, 0, 0)
    memory = recorder.arrays()
    assert memory["allocated"][0] > 4096  # the rounding this guards against
    shares = memory_shares(memory, 4096, usable_capacity_slots=4080)
    assert shares["kv_cache_usage_perc_max"] == 1.0
    assert shares["kv_cache_usage_perc"] == 1.0
    assert shares["kv_cache_full_time_frac"] == 1.0  # full at every step: the whole 0.7 s
    # a table written before kvsim kept each row's peak and full seconds: read off the means
    old = {k: v for k, v in memory.items() if k not in ("allocated_max", "full_s")}
    assert memory_shares(old, 4096, usable_capacity_slots=4080)["kv_cache_full_time_frac"] == 1.0


@pytest.mark.parametrize("engine", ["vllm-v1", "vllm-v0"])
def test_token_utilization_at_one_token_blocks_is_100_percent(engine: str) -> None:
    """With blocks of one token a request holds exactly the slots of the tokens computed so far
    (a step allocates for the tokens it computes), so token states / allocated is 100 % by hand.
    vLLM v1's null block, which no request holds, is not allocated to anyone: it counted in the
    denominator (99.97 % here), though kv_cache_usage_perc left it out."""
    cfg = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "a100-80gb",
            "scheduler": {"engine": engine, "max_model_len": 2048},
            "cache": {"allocator": "paged", "block_size_tokens": 1, "kv_cache_gib": 0.5},
            "workload": {"preset": "sharegpt_like", "num_requests": 40, "rate_per_s": 20.0},
        }
    )
    summary = simulate(cfg).summary
    assert summary["reservation_pct"] == 0.0
    assert summary["internal_fragmentation_pct"] == 0.0
    assert summary["token_utilization_perc"] == pytest.approx(100.0, abs=1e-9)


def test_the_watermark_rejects_at_intake_only_where_admission_keeps_it_alone():
    """OPT-13B: 40 layers x K and V x 5,120 x 2 B = 800 KiB a token, 12.5 MiB a 16-token
    block; 0.5 GiB holds 40 blocks (640 slots). A 400-token prompt (+ 8 output: 26 blocks)
    fits the empty pool, but vLLM v0 admits a whole prompt only with the watermark free:
    25 + int(0.5 x 40) = 45 > 40 blocks, never, so it is rejected; v1 keeps the watermark only
    while another request runs (KVCacheManager.allocate_slots), so alone it is admitted."""
    from kvsim.config import config_from_dict
    from kvsim.engine import simulate

    def run(engine: str) -> dict:
        config = config_from_dict(
            {
                "cache": {"kv_cache_gib": 0.5, "watermark": 0.5},
                "scheduler": {"engine": engine, "max_model_len": 512},
                "workload": {
                    "lengths": "fixed",
                    "fixed_prompt_tokens": 400,
                    "fixed_output_tokens": 8,
                    "num_requests": 1,
                },
            }
        )
        return simulate(config).summary

    with pytest.raises(ValueError, match=r"640 usable slots .* 1 of them only because admission"):
        run("vllm-v0")
    summary = run("vllm-v1")
    assert summary["num_rejected_kv_pool"] == 0
    assert summary["num_requests"] == 1
