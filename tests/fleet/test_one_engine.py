"""A fleet runs the one engine: a fleet of one replica, handed each request as it arrives (a
busy engine's span cut when a request reaches it), serves the workload exactly as the lone
engine does, which knows every arrival ahead and cuts its spans up front."""

from __future__ import annotations

import numpy as np
import pytest

from kvsim import config_from_dict
from kvsim.engine import simulate as simulate_engine
from kvsim.fleet import simulate

CASES = {
    # a tight pool: hundreds of recompute preemptions
    "preempting": (
        {"num_requests": 300, "rate_per_s": 15.0, "lengths": "lognormal"},
        {"kv_cache_gib": 1},
    ),
    # shared system prompts in three tenants: prefix hits
    "prefix hits": (
        {"num_requests": 300, "rate_per_s": 30.0, "shared_prefix_tokens": 300, "num_tenants": 3},
        {"kv_cache_gib": 1},
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_fleet_of_one_is_the_lone_engine(case):
    workload, cache = CASES[case]
    base = {
        "model": "llama-3.1-8b",
        "gpu": "a100-80gb",
        "seed": 3,
        "workload": workload,
        "cache": cache,
        "scheduler": {"max_model_len": 2048},
    }
    lone = simulate_engine(config_from_dict(base))
    fleet = simulate(config_from_dict({**base, "fleet": {"replicas": 1}}))
    for column in ("first_scheduled_time_s", "first_token_time_s", "finish_time_s"):
        np.testing.assert_array_equal(fleet.requests[column], lone.requests[column])
    for column in ("num_preemptions", "num_cached_tokens"):
        np.testing.assert_array_equal(fleet.requests[column], lone.requests[column])
    for key in ("num_steps", "num_preemptions", "kv_cache_usage_perc", "token_states_pct"):
        assert fleet.summary[key] == lone.summary[key]
    assert lone.summary["num_preemptions"] > 0 or lone.summary["prefix_cache_hits"] > 0
