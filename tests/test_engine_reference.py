"""The engine against the step-by-step reference (``tests/reference/stepwise.py``): the same
per-request times, preemptions and prefix hits, and at every step the same queue sizes and the
same slots in every category, for every allocator and both engine profiles, on workloads with
preemptions, sequence groups and beams, prefix hits, chunked prefill and swap.

The engine runs its decode cohort and fast-forwarded spans; the reference handles every request
at every step and counts the slots from the pool's tables. Times agree to 1e-9 (a span adds
its steps' durations before the clock moves); everything counted agrees exactly.
"""

from __future__ import annotations

import math

import pytest

from kvsim.config import config_from_dict
from kvsim.engine import prepare_requests, simulate
from kvsim.workload.request import fresh_requests
from tests.reference.stepwise import Reference

MULTI_TURN = {"shared_prefix_tokens": 48, "num_turns": 3, "turn_gap_s": 1.5}
GROUPS = {"lengths": "alpaca_like", "rate_per_s": 16.0}

# (engine, cache, scheduler, workload, events the case exists to exercise). A paged pool of
# 2,621 slots (2 GiB of OPT-13B's 800 KiB per token) under the default ShareGPT-like load at
# 6 req/s preempts; shared prompts and multi-turn histories hit; v0 groups copy on write and
# swap (v0 never recomputes a group); slabs block the head of the queue when free slots lie
# in holes.
CASES = [
    ("vllm-v1", {"allocator": "paged"}, {"max_num_batched_tokens": 384}, {}, {"preempt"}),
    ("vllm-v1", {"allocator": "paged", "block_size_tokens": 1}, {}, {}, {"preempt"}),
    (
        "vllm-v1",
        {"allocator": "paged", "enable_prefix_caching": True},
        {"long_prefill_token_threshold": 96},
        MULTI_TURN,
        {"preempt", "hit"},
    ),
    ("vllm-v1", {"allocator": "paged"}, {"enable_chunked_prefill": False}, {}, {"preempt"}),
    ("vllm-v1", {"allocator": "paged"}, {}, {"n": 3, **GROUPS}, {"preempt", "hit"}),
    ("vllm-v1", {"allocator": "first_fit", "reservation": "pow2"}, {}, {}, {"block"}),
    ("vllm-v1", {"allocator": "best_fit", "reservation": "oracle"}, {}, {}, {"block"}),
    ("vllm-v1", {"allocator": "buddy", "reservation": "pow2"}, {}, {}, {"block"}),
    (
        "vllm-v1",
        {"allocator": "radix"},
        {"max_num_batched_tokens": 512},
        MULTI_TURN,
        {"preempt", "hit"},
    ),
    ("vllm-v1", {"allocator": "radix"}, {}, {"shared_prefix_tokens": 48}, {"preempt", "hit"}),
    ("vllm-v0", {"allocator": "paged"}, {}, {}, {"preempt"}),
    ("vllm-v0", {"allocator": "paged"}, {"preemption_mode": "swap"}, {}, {"preempt", "swap"}),
    (
        "vllm-v0",
        {"allocator": "paged", "enable_prefix_caching": True},
        {},
        MULTI_TURN,
        {"preempt", "hit"},
    ),
    ("vllm-v0", {"allocator": "paged"}, {}, {"n": 4, **GROUPS}, {"preempt", "cow", "swap"}),
    ("vllm-v0", {"allocator": "paged"}, {}, {"beam_width": 3, **GROUPS}, {"cow", "swap"}),
    ("vllm-v0", {"allocator": "first_fit", "reservation": "oracle"}, {}, {}, {"block"}),
    ("vllm-v0", {"allocator": "buddy", "reservation": "pow2"}, {}, {"n": 2, **GROUPS}, {"block"}),
    ("vllm-v0", {"allocator": "radix"}, {}, MULTI_TURN, {"preempt", "hit"}),
    # vAttention: OPT-13B's 10 KiB per token and tensor, 64 KiB pages of 6 tokens, 409 rows
    ("vllm-v1", {"allocator": "vattention", "page_size_bytes": 65536}, {}, {}, {"preempt"}),
    ("vllm-v0", {"allocator": "vattention", "page_size_bytes": 2 << 20}, {}, {}, {"preempt"}),
]
EVENT_COUNTERS = {
    "preempt": "num_preemptions",
    "hit": "prefix_cache_hits",
    "cow": "num_cow_copies",
    "swap": "num_swap_outs",
    "block": "num_blocked_steps",
}
COUNTED = (
    "num_running",
    "num_waiting",
    "num_prefills",
    "num_preempted",
    "blocked",
    "token_states",
    "reservation",
    "internal",
    "external",
    "free",
    "allocated",
    "held",
    "unshared",
)
MEMORY_COLUMN = {
    "num_running": "num_requests_running",
    "num_waiting": "num_requests_waiting",
    "num_preempted": "num_preempted",
    "num_prefills": "num_prefills",
    "blocked": "num_blocked_steps",
    "internal": "internal_fragmentation",
    "external": "external_fragmentation",
}


def _config(engine, cache, scheduler, workload, seed, **extra):
    return config_from_dict(
        {
            "cache": {"kv_cache_gib": 2, **cache},
            "scheduler": {"engine": engine, **scheduler},
            "workload": {"rate_per_s": 6.0, "num_requests": 120, **workload},
            "seed": seed,
            **extra,
        }
    )


# make test runs these; make test-full runs every case with both seeds
# v1 paged, prefix hits, first-fit, radix; v0 groups and beams; vAttention
QUICK = {0, 2, 5, 9, 13, 14, 18}


def _cases() -> list[object]:
    return [
        pytest.param(*case, seed, marks=() if seed == 0 and i in QUICK else pytest.mark.full)
        for seed in (0, 1)
        for i, case in enumerate(CASES)
    ]


@pytest.mark.parametrize(("engine", "cache", "scheduler", "workload", "events", "seed"), _cases())
def test_engine_matches_the_step_by_step_reference(
    engine, cache, scheduler, workload, events, seed
):
    cfg = _config(engine, cache, scheduler, workload, seed)
    ref = Reference(cfg, fresh_requests(prepare_requests(cfg)[0])).run()
    steps = simulate(cfg.model_copy(update={"memory_resolution": "step", "debug_invariants": True}))
    fast = simulate(cfg)
    for event in events:  # the case is only worth its name if the run shows it
        assert steps.summary[EVENT_COUNTERS[event]] > 0, event
    # per request
    mine = {r.req_id: r for r in ref.requests}
    for results in (steps, fast):
        table = results.requests.set_index("req_id")
        assert sorted(table.index) == sorted(mine)
        for req_id, row in table.iterrows():
            r = mine[req_id]
            assert (row.num_preemptions, row.num_cached_tokens) == (
                r.num_preemptions,
                r.num_cached_tokens,
            ), req_id
            for name in ("first_scheduled_time_s", "first_token_time_s", "finish_time_s"):
                assert math.isclose(row[name], getattr(r, name), rel_tol=1e-9), (req_id, name)
        assert results.summary["num_preemptions"] == ref.num_preemptions
    # per step
    memory = steps.memory
    assert len(memory) == len(ref.rows)
    for i, row in enumerate(ref.rows):
        for name in COUNTED:
            assert memory[MEMORY_COLUMN.get(name, name)].iat[i] == getattr(row, name), (i, name)
        assert math.isclose(memory["time_s"].iat[i], row.time_s, rel_tol=1e-9, abs_tol=1e-12)
        assert math.isclose(memory["duration_s"].iat[i], row.duration_s, rel_tol=1e-9)
    # the fast-forwarded run's time-weighted shares are the same means
    assert fast.summary["num_steps"] == steps.summary["num_steps"] == len(ref.rows)
    # vLLM's tokens a step, counted by the reference at each of its steps
    for results in (steps, fast):
        assert results.iteration_tokens == dict(ref.iteration_tokens)
    for share in ("token_states_pct", "external_fragmentation_pct", "kv_cache_usage_perc"):
        assert fast.summary[share] == pytest.approx(steps.summary[share], rel=1e-9), share
    # the time full and the peak from the reference's own steps (kv_cache_usage_perc's rule:
    # allocated slots past those no request can hold, over those it can; full at 0.99), the
    # same whether rows are steps or spans (a span's mean once hid its full steps: 0.025 of
    # the run for 0.087 in the first case)
    usable = steps.summary["usable_capacity_tokens"]
    unusable = cfg.capacity_tokens - usable
    usage = [min(1.0, max(0.0, (row.allocated - unusable) / usable)) for row in ref.rows]
    seconds = sum(row.duration_s for row in ref.rows)
    full = sum(row.duration_s for row, u in zip(ref.rows, usage, strict=True) if u >= 0.99)
    for results in (steps, fast):
        summary = results.summary
        assert summary["kv_cache_full_time_frac"] == pytest.approx(full / seconds, rel=1e-9)
        assert summary["kv_cache_usage_perc_max"] == pytest.approx(max(usage), rel=1e-12)
