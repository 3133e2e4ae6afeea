"""The engine's fast core (steady decoders as one cohort, fast-forwarded spans) against the
step-by-step reference (every running request handled at every step, one memory row per step):
same per-request times, step counts, preemptions, prefix hits and memory shares, for every
allocator, on workloads with preemptions, sequence groups, prefix hits and chunked prefill."""

from __future__ import annotations

import pandas as pd
import pytest

from kvsim.config import config_from_dict
from kvsim.engine import simulate

SHARES = (
    "token_states_pct",
    "reservation_pct",
    "internal_fragmentation_pct",
    "external_fragmentation_pct",
    "kv_cache_usage_perc",
    "num_requests_running_mean",
    "num_requests_waiting_mean",
)
COUNTERS = (
    "num_steps",
    "num_preemptions",
    "num_blocked_steps",
    "prefix_cache_hits",
    "prefix_cache_queries",
    "num_cow_copies",
    "num_swap_outs",
    "num_swap_ins",
)
MULTI_TURN = {"shared_prefix_tokens": 48, "num_turns": 3, "turn_gap_s": 1.5}
GROUPS = {"lengths": "alpaca_like", "rate_per_s": 16.0}

# (engine, cache, scheduler, workload, events the case exists to exercise). The events follow
# from each design: a paged pool of 2,621 slots under this load preempts; shared prompts and
# multi-turn histories hit; v0 groups copy on write and swap (v0 never recomputes a group);
# slabs block the head of the queue when free slots lie in holes.
CASES = [
    ("vllm-v1", {"allocator": "paged"}, {"max_num_batched_tokens": 384}, {}, {"preempt"}),
    ("vllm-v1", {"allocator": "paged", "block_size_tokens": 1}, {}, {}, {"preempt"}),
    (
        "vllm-v1",
        {"allocator": "paged", "enable_prefix_caching": True},
        {},
        MULTI_TURN,
        {"preempt", "hit"},
    ),
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
    # private requests and shared prompts: radix decoders grow in bulk, evicting LRU leaves
    ("vllm-v1", {"allocator": "radix"}, {}, {}, {"preempt"}),
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
    (
        "vllm-v0",
        {"allocator": "paged"},
        {},
        {"beam_width": 3, **GROUPS},
        {"preempt", "cow", "swap"},
    ),
    ("vllm-v0", {"allocator": "first_fit", "reservation": "oracle"}, {}, {}, {"block"}),
    (
        "vllm-v0",
        {"allocator": "best_fit", "reservation": "prompt_max_tokens"},
        {},
        {"max_tokens": 512},
        {"block"},
    ),
    ("vllm-v0", {"allocator": "buddy", "reservation": "pow2"}, {}, {"n": 2, **GROUPS}, {"block"}),
    ("vllm-v0", {"allocator": "radix"}, {}, MULTI_TURN, {"preempt", "hit"}),
    ("vllm-v0", {"allocator": "radix"}, {}, {"shared_prefix_tokens": 48}, {"preempt", "hit"}),
]
# the summary counter that shows each event
EVENT_COUNTERS = {
    "preempt": "num_preemptions",
    "hit": "prefix_cache_hits",
    "cow": "num_cow_copies",
    "swap": "num_swap_outs",
    "block": "num_blocked_steps",
}


def _config(engine, cache, scheduler, workload, seed):
    return config_from_dict(
        {
            # 2 GiB of KV on the default OPT-13B (800 KiB per token) is 2,621 slots: the
            # default ShareGPT-like load at 6 req/s overfills it, so paged cases preempt
            "cache": {"kv_cache_gib": 2, **cache},
            "scheduler": {"engine": engine, **scheduler},
            "workload": {"rate_per_s": 6.0, "num_requests": 120, **workload},
            "seed": seed,
        }
    )


@pytest.mark.parametrize(("engine", "cache", "scheduler", "workload", "events"), CASES)
@pytest.mark.parametrize("seed", [0, 1])
def test_fast_core_matches_step_by_step_reference(engine, cache, scheduler, workload, events, seed):
    cfg = _config(engine, cache, scheduler, workload, seed)
    fast = simulate(cfg)
    reference = simulate(cfg.model_copy(update={"memory_resolution": "step"}), lazy_decodes=False)
    assert (reference.memory["num_steps"] == 1).all()
    for event in events:  # the case is only worth its name if the reference run shows it
        assert reference.summary[EVENT_COUNTERS[event]] > 0, event
    pd.testing.assert_frame_equal(fast.requests, reference.requests, rtol=1e-9)
    for counter in COUNTERS:
        assert (counter in fast.summary) == (counter in reference.summary), counter
        assert fast.summary.get(counter) == reference.summary.get(counter), counter
    for share in SHARES:
        assert fast.summary[share] == pytest.approx(reference.summary[share], rel=1e-9), share
