"""Hybrid KV cache groups through the one engine: the vllm-v1 profile runs a model with sliding
and full layers on ``HybridPagedAllocator``, and the per-group columns add up to the pool's."""

from __future__ import annotations

import numpy as np

from kvsim import SimConfig, simulate
from kvsim.base.units import cdiv
from kvsim.workload.request import Request

WINDOW, BLOCK = 64, 16


def config(hybrid: bool = True, **extra: object) -> SimConfig:
    """A 4-layer model: 2 full + 2 sliding (window 64): 2 groups of 2 layers."""
    model = {
        "num_layers": 4,
        "num_attention_heads": 4,
        "num_kv_heads": 2,
        "head_dim": 8,
        "num_params": 1_000_000,
        "max_position_embeddings": 4096,
        "attention": {
            "num_sliding_layers": 2,
            "sliding_window_tokens": WINDOW,
            "hybrid_kv_cache": hybrid,
        },
    }
    return SimConfig.model_validate(
        {
            "model": model,
            "gpu": "a100-40gb",
            # one slot: 2 layers x 2 x 2 heads x 8 x 2 bytes = 128 bytes; 400 blocks of 16
            "cache": {"kv_cache_bytes": 400 * BLOCK * 128, "block_size_tokens": BLOCK},
            "scheduler": {"max_model_len": 1024},
            "debug_invariants": True,
            **extra,
        }
    )


def test_engine_runs_hybrid_groups_and_their_columns_add_up():
    requests = [Request(i, 0.1 * i, 300 + 40 * i, 200, 200) for i in range(12)]
    cfg = config()
    assert cfg.bytes_per_token == 128
    result = simulate(cfg, requests)
    assert result.summary["num_requests"] == 12
    assert result.summary["kv_cache_groups"] == 2
    mem = result.memory
    held = mem["group0_full_held"] + mem["group1_sliding_held"]
    token = mem["group0_full_token_states"] + mem["group1_sliding_token_states"]
    # one step an event (no decode spans): the groups' totals are the pool's (no sharing)
    assert (mem["num_steps"] == 1).all()
    np.testing.assert_allclose(held, mem["held"])
    np.testing.assert_allclose(token, mem["token_states"])
    categories = ["token_states", "reservation", "internal_fragmentation"]
    categories += ["external_fragmentation", "free"]
    np.testing.assert_allclose(mem[categories].sum(axis=1), cfg.capacity_tokens)
    # a decoding request's window group holds at most cdiv(64, 16) + 1 = 5 blocks
    decoding = mem["num_prefills"] == 0
    per_request = mem["group1_sliding_held"] / mem["num_requests_running"].clip(lower=1)
    assert per_request[decoding].max() <= (cdiv(WINDOW, BLOCK) + 1) * BLOCK
    assert (mem["group1_sliding_outside_window"] < BLOCK * mem["num_requests_running"] + 1)[
        decoding
    ].all()


def test_hybrid_holds_fewer_slots_than_every_layer_full():
    requests = [Request(i, 0.0, 600, 100, 100) for i in range(4)]
    hybrid = simulate(config(True), requests).summary
    full = simulate(config(False), requests).summary
    # all-full: one group of 4 layers, a slot of 256 bytes: 200 blocks of 16 (same bytes)
    assert full["capacity_tokens"] == 200 * BLOCK
    assert full["num_gpu_blocks"] == 200
    assert hybrid["num_gpu_blocks"] == 400
    # 4 requests of 700 tokens: hybrid 44 full + <= 5 window blocks of 400 (<= 49 %), all-full
    # 44 of 200 blocks each (88 % at the end); the mean share of the pool in use is lower
    assert hybrid["kv_cache_usage_perc"] < full["kv_cache_usage_perc"]
