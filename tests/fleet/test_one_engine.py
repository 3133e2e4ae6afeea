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


# one config a feature whose counters a fleet must add up from its replicas' (engine_counters)
COUNTED = {
    # Gemma 3's 6 KV cache groups (a share each) and EAGLE drafts (spec_decode_*)
    "hybrid groups, spec decoding": (
        {
            "model": "gemma-3-27b",
            "gpu": "h100-80gb",
            "workload": {"num_requests": 150, "rate_per_s": 15.0, "lengths": "lognormal"},
            "cache": {"kv_cache_gib": 3},
            "scheduler": {"max_model_len": 4096},
            "speculative": {"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.7},
        },
        ("spec_decode_num_drafts", "group1_sliding_held_pct"),
    ),
    # vLLM v0: swap preemption and n = 2 samples sharing their prompt (copy-on-write)
    "v0 swap, parallel sampling": (
        {
            "workload": {"num_requests": 300, "rate_per_s": 15.0, "lengths": "lognormal", "n": 2},
            "cache": {"kv_cache_gib": 1},
            "scheduler": {"max_model_len": 2048, "engine": "vllm-v0", "preemption_mode": "swap"},
        },
        ("num_swap_outs", "num_cow_copies"),
    ),
    # a CPU tier and a disk tier under a tight GPU pool
    "KV offload": (
        {
            "workload": {
                "num_requests": 300,
                "rate_per_s": 30.0,
                "shared_prefix_tokens": 300,
                "num_tenants": 3,
            },
            "cache": {"kv_cache_gib": 1},
            "scheduler": {"max_model_len": 2048},
            "offload": {"kv_offloading_size": 1, "disk_offloading_size": 4},
        },
        ("kv_offload_bytes_gpu_to_cpu", "external_prefix_cache_hits", "disk_tier_written_blocks"),
    ),
}
FLEET_ONLY = {"router", "num_replicas", "num_prefill_replicas", "num_gpus"}


@pytest.mark.parametrize("case", COUNTED)
def test_a_fleet_of_one_reports_every_counter_of_the_lone_engine(case):
    overrides, counters = COUNTED[case]
    base = {"model": "llama-3.1-8b", "gpu": "a100-80gb", "seed": 3, **overrides}
    lone = simulate_engine(config_from_dict(base)).summary
    fleet = simulate(config_from_dict({**base, "fleet": {"replicas": 1}})).summary
    assert all(lone[key] > 0 for key in counters), {key: lone[key] for key in counters}
    assert set(fleet) - set(lone) == FLEET_ONLY | {"replica_requests_max_share"}
    for key, value in lone.items():
        if isinstance(value, float):
            assert fleet[key] == pytest.approx(value, rel=1e-12, nan_ok=True), key
        elif key != "config_key":  # (the fleet's config has a [fleet] table)
            assert fleet[key] == value, key


def test_requests_only_an_overridden_replica_cannot_hold_are_counted_and_warned(
    tmp_path, caplog: pytest.LogCaptureFixture
) -> None:
    """Three requests of 110, 20,020 and 220 tokens; replica 0 takes max_model_len 4,096,
    replica 1 150. The second is too long for both (replica 0's intake says so); the third
    only for replica 1, which a router may pick: it is skipped too, and replica 1's warning
    says so (it was dropped silently): 2 rejected, 1 run."""
    import logging

    trace = tmp_path / "t.csv"
    trace.write_text(
        "arrival_time_s,prompt_tokens,output_tokens\n0,100,10\n0.5,20000,20\n1,200,20\n"
    )
    cfg = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "scheduler": {"max_model_len": 4096},
            "workload": {"trace": str(trace)},
            "fleet": {
                "replicas": 2,
                "replica_overrides": [{}, {"scheduler": {"max_model_len": 150}}],
            },
        }
    )
    with caplog.at_level(logging.WARNING, logger="kvsim"):
        summary = simulate(cfg).summary
    assert (summary["num_requests_rejected"], summary["num_rejected_max_model_len"]) == (2, 2)
    (message,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("replica 1")]
    assert "1 of 2 requests cannot run" in message
    assert "max_model_len = 150 (first: request 2, prompt 200 + output 20 tokens)" in message


def test_a_fleet_mixing_engine_profiles_is_refused() -> None:
    # the workload is shaped once, by replica 0's engine (v1 fans n > 1 out into samples, v0
    # keeps a sequence group): a v0 replica in a v1 fleet would be handed v1's samples
    with pytest.raises(ValueError, match=r"replica_overrides\[1\]: scheduler.engine = 'vllm-v0'"):
        config_from_dict(
            {
                "model": "opt-13b",
                "fleet": {
                    "replicas": 2,
                    "replica_overrides": [{}, {"scheduler": {"engine": "vllm-v0"}}],
                },
            }
        )
    # the table at fault is named, replica 0's too (the config's own engine is v0 here)
    with pytest.raises(ValueError, match=r"replica_overrides\[0\]: scheduler.engine = 'vllm-v1'"):
        config_from_dict(
            {
                "model": "opt-13b",
                "scheduler": {"engine": "vllm-v0"},
                "fleet": {
                    "replicas": 2,
                    "replica_overrides": [{"scheduler": {"engine": "vllm-v1"}}],
                },
            }
        )


def test_a_fleet_reports_one_replicas_facts_only_where_every_replica_shares_them() -> None:
    """gpt-oss-20b on two replicas, the second with hybrid groups off: the summary said
    "KV cache groups 2" and gave replica 0's group shares as the fleet's (they summed to its
    KV usage, not the fleet's); a fact only some replicas have is left out, as docs/fleet.md
    says."""
    config = config_from_dict(
        {
            "model": "gpt-oss-20b",
            "gpu": "h100-80gb",
            "cache": {"kv_cache_gib": 2},
            "scheduler": {"max_model_len": 8192},
            "workload": {"preset": "sharegpt_like", "num_requests": 40, "rate_per_s": 6},
            "fleet": {
                "replicas": 2,
                "replica_overrides": [{}, {"model": {"attention": {"hybrid_kv_cache": False}}}],
            },
        }
    )
    summary = simulate(config).summary
    assert "kv_cache_groups" not in summary
    assert not [k for k in summary if k.startswith("group")]


def test_a_fleet_of_tiers_of_different_blocks_prints_its_cpu_tier_counters() -> None:
    """Replicas of block sizes 16 and 32 have CPU tiers of different block counts: the summary
    leaves out cpu_tier_blocks, and the printed "CPU offload tier" section, gated on it,
    vanished with every summed counter in it."""
    from kvsim.view.summary import sections

    config = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "cache": {"kv_cache_gib": 2},
            "scheduler": {"max_model_len": 8192},
            "workload": {"preset": "multi_turn_chat", "num_requests": 40},
            "offload": {"kv_offloading_size": 2},
            "fleet": {
                "replicas": 2,
                "replica_overrides": [{}, {"cache": {"block_size_tokens": 32}}],
            },
        }
    )
    summary = simulate(config).summary
    assert "cpu_tier_blocks" not in summary
    assert "CPU offload tier" in [title for title, _ in sections(summary)]
