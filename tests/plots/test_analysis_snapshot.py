"""Extra metrics, capacity planning answers and KV-pool snapshots, checked by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from kvsim.config import config_from_dict
from kvsim.config.layers import KVCacheGroup, KVCacheGroups
from kvsim.core.kv.contiguous import FirstFitAllocator
from kvsim.core.kv.hybrid import HybridPagedAllocator
from kvsim.core.kv.paged import PagedAllocator
from kvsim.engine import simulate
from kvsim.engine.frames import pool_ownership
from kvsim.results.metrics import latency_stats
from kvsim.study.load import row_labels, smallest_budget
from kvsim.workload.request import Request


def test_p95_by_hand() -> None:
    # 21 values 0..20: the 95th percentile (linear) is 0.95 * 20 = 19
    values = np.arange(21, dtype=float)
    frame = pd.DataFrame(
        {
            "time_to_first_token_seconds": values,
            "request_time_per_output_token_seconds": values / 10,
        }
    )
    out = latency_stats(frame)
    assert out["time_to_first_token_seconds_p95"] == 19.0
    assert out["request_time_per_output_token_seconds_p95"] == 1.9


def test_smallest_budget_needs_every_larger_budget_to_hold() -> None:
    table = pd.DataFrame(
        {
            "label": ["c"] * 4 + ["p"] * 4,
            "gib": [2, 4, 8, 16] * 2,
            "time_to_first_token_seconds_p95": [
                9,
                1,
                3,
                1,
                9,
                1,
                1,
                1,
            ],  # c: 4 GiB holds but 8 does not -> 16
            "request_time_per_output_token_seconds_p95": [0.1] * 8,
        }
    )
    out = smallest_budget(
        table,
        budget="gib",
        targets={
            "time_to_first_token_seconds_p95": 2,
            "request_time_per_output_token_seconds_p95": 0.2,
        },
        by=["label"],
    )
    assert out.to_dict("records") == [
        {"label": "c", "gib": 16.0, "holds_at_max": True},
        {"label": "p", "gib": 4.0, "holds_at_max": True},
    ]
    none = smallest_budget(
        table,
        budget="gib",
        targets={"request_time_per_output_token_seconds_p95": 0.05},
        by=["label"],
    )
    assert none["gib"].isna().all()
    assert not none["holds_at_max"].any()


def test_row_labels() -> None:
    t = pd.DataFrame({"label": ["a", "a"], "cache.block_size_tokens": [8, 16]})
    assert row_labels(t, ["label", "cache.block_size_tokens"]) == [
        "a block_size_tokens=8",
        "a block_size_tokens=16",
    ]
    assert row_labels(t, ["cache.block_size_tokens"]) == [
        "block_size_tokens=8",
        "block_size_tokens=16",
    ]
    # a size whose name has no unit is in GiB, a budget named in GiB is not said twice
    sizes = pd.DataFrame({"offload.kv_offloading_size": [64], "cache.kv_cache_gib": [4.5]})
    assert row_labels(sizes, list(sizes.columns)) == ["kv_offloading_size=64 GiB, kv_cache_gib=4.5"]
    # bandwidths in GB/s (decimal), not bytes/s; fields zipped to the same values named once
    drive = [3.2e9, 6.4e9]
    t = pd.DataFrame(
        {
            "offload.disk_offloading_size": [0, 0],
            "offload.disk_read_bandwidth_bytes_per_s": drive,
            "offload.disk_write_bandwidth_bytes_per_s": drive,
        }
    )
    assert row_labels(t, list(t.columns)) == [
        "disk_offloading_size=0 GiB, disk_read/write_bandwidth=3.2 GB/s",
        "disk_offloading_size=0 GiB, disk_read/write_bandwidth=6.4 GB/s",
    ]
    # one value each: equal by chance, not zipped
    one = t.iloc[:1]
    assert row_labels(one, list(t.columns)) == [
        "disk_offloading_size=0 GiB, disk_read_bandwidth=3.2 GB/s, disk_write_bandwidth=3.2 GB/s"
    ]


def _req(req_id: int, prompt: int) -> Request:
    return Request(req_id, 0.0, prompt, 10, 10)


def test_pool_ownership_paged_by_hand() -> None:
    alloc = PagedAllocator(capacity_tokens=32, block_size_tokens=4)
    alloc.allocate(_req(7, 10), 10)  # blocks 0, 1, 2 (cdiv(10, 4) = 3)
    alloc.allocate(_req(9, 3), 3)  # block 3
    frame = pool_ownership(alloc, {7: 10, 9: 3})
    assert frame.values.tolist() == [
        [7, 0, 4, 4],
        [7, 4, 4, 4],
        [7, 8, 4, 2],  # 10 tokens: 4 + 4 + 2
        [9, 12, 4, 3],
    ]


def test_pool_ownership_contiguous_by_hand() -> None:
    alloc = FirstFitAllocator(capacity_tokens=100, reservation="max", max_model_len=30)
    alloc.allocate(_req(1, 5), 6)  # Max rule: slab of 30 at slot 0
    alloc.allocate(_req(2, 5), 6)  # next slab at slot 30
    frame = pool_ownership(alloc, {2: 6, 1: 6})
    assert frame.values.tolist() == [[1, 0, 30, 6], [2, 30, 30, 6]]


def test_pool_ownership_hybrid_by_hand() -> None:
    # groups full, sliding (window 8) and state, 4-token blocks, 20 blocks (block 0: null)
    kinds = (KVCacheGroup("full", 1), KVCacheGroup("sliding", 1, 8), KVCacheGroup("state", 1))
    alloc = HybridPagedAllocator(capacity_tokens=80, kv_groups=KVCacheGroups(kinds, 1, 4, 1))
    req = _req(3, 10)
    # prefill of 10: cdiv(10, 4) = 3 blocks for full (1 2 3) and sliding (4 5 6), 1 for state (7)
    alloc.allocate(req, 10)
    # at 12 computed, room for 13: the sliding group skips (12 - 8 + 1) // 4 = 1 block, so
    # block 4 goes back to the front of the free queue and its entry becomes the null block;
    # full needs cdiv(13, 4) = 4 blocks (takes 4), sliding 4 entries (takes 8)
    req.num_computed_tokens = 12
    alloc.allocate(req, 13)
    assert alloc.group_tables(3) == [[1, 2, 3, 4], [0, 5, 6, 8], [7]]
    frame = pool_ownership(alloc, {3: 13})
    # block k starts at slot 4k; entry i of an attention table holds min(13 - 4i, 4) tokens
    # (entries 0-2: 4, entry 3: 1); the state block counts whole; the null block never
    assert frame.values.tolist() == [
        [3, 4, 4, 4],  # block 1: full entry 0
        [3, 8, 4, 4],  # block 2: full entry 1
        [3, 12, 4, 4],  # block 3: full entry 2
        [3, 16, 4, 1],  # block 4: full entry 3 (token 12)
        [3, 20, 4, 4],  # block 5: sliding entry 1
        [3, 24, 4, 4],  # block 6: sliding entry 2
        [3, 28, 4, 4],  # block 7: the state block
        [3, 32, 4, 1],  # block 8: sliding entry 3 (token 12)
    ]


def test_hybrid_run_frames_agree_with_the_recorder() -> None:
    # a hybrid model's run with --out used to refuse its memory map: the map's held slots and
    # token states at each frame are the recorder's at that moment (one row a step: a row of
    # a decode span holds the mean over its steps), and the run is unchanged
    config = config_from_dict(
        {
            "model": "gemma-3-27b",
            "gpu": "h100-80gb",
            "workload": {"num_requests": 20, "rate_per_s": 4.0},
            "memory_resolution": "step",
        }
    )
    res = simulate(config, map_every_s=1.0)
    assert res.mapframes is not None
    assert res.frames is not None
    assert len(res.frames) > 2
    mem = res.memory
    row = np.searchsorted(mem["time_s"].to_numpy(), res.frames["time_s"].to_numpy(), "right") - 1
    sums = res.mapframes.groupby("frame")[["num_slots", "num_tokens"]].sum()
    sums = sums.reindex(res.frames["frame"], fill_value=0)
    assert sums["num_slots"].tolist() == mem["held"].to_numpy()[row].tolist()
    assert sums["num_tokens"].tolist() == mem["token_states"].to_numpy()[row].tolist()
    pd.testing.assert_frame_equal(simulate(config).requests, res.requests)
    assert res.summary["kv_cache_block_size_tokens"] == 16  # no state group: as configured


def test_frames_taken_during_the_run_match_its_tokens() -> None:
    config = config_from_dict(
        {
            "cache": {"allocator": "paged", "kv_cache_gib": 2.0, "block_size_tokens": 16},
            "workload": {
                "lengths": "fixed",
                "fixed_prompt_tokens": 100,
                "fixed_output_tokens": 50,
                "num_requests": 5,
                "rate_per_s": 100.0,
            },
        }
    )
    res = simulate(config, map_at_s=(0.5, 1e6))
    assert res.mapframes is not None
    assert res.frames is not None
    assert res.frames["time_s"].tolist() == [0.5, 1e6]
    snap = res.mapframes[res.mapframes["frame"] == 0]
    per_req = snap.groupby("req_id").agg(blocks=("num_slots", "size"), tokens=("num_tokens", "sum"))
    # every live request holds its prompt (100) + up to 49 computed outputs (the last sampled
    # token never gets a slot), in cdiv(tokens, 16) blocks
    assert per_req["tokens"].between(100, 149).all()
    assert (per_req["blocks"] == -(-per_req["tokens"] // 16)).all()
    assert res.frames.loc[0, "num_requests_running"] == len(per_req)
    assert res.mapframes[res.mapframes["frame"] == 1].empty  # after the last finish: empty
    # the frames do not change the run
    plain = simulate(config)
    assert plain.summary["num_steps"] == res.summary["num_steps"]
    pd.testing.assert_frame_equal(plain.requests, res.requests)


def test_periodic_frames_thin_out_to_stay_within_their_bound() -> None:
    from kvsim.engine.frames import FrameRecorder

    # every 1 s, at most 4 kept: 0 1 2 3 4 -> a fifth keeps 0 2 4 (period 2); 6 8 -> 0 4 8
    # (period 4); 12 16 -> 0 8 16 (period 8); the next would be 24, past the run's 20.5 s
    pool = PagedAllocator(capacity_tokens=64, block_size_tokens=16)
    recorder = FrameRecorder(every_s=1.0, max_every_frames=4)
    for until in np.arange(0.5, 21.0, 0.5):
        for t in recorder.pop_due(float(until)):
            recorder.capture(t, pool, {}, 0, [], 0)
    _, frames = recorder.frames()
    assert frames["time_s"].tolist() == [0.0, 8.0, 16.0]
    assert frames["frame"].tolist() == [0, 1, 2]
    assert recorder.next_time() == 24.0


def test_a_long_drain_keeps_the_frames_bounded() -> None:
    # 40 requests arrive in about 10 s on a small pool and drain for much longer: 10 frames over
    # the arrivals, at most 20 over the run (unbounded, the period would give one per 0.25 s)
    config = config_from_dict(
        {"cache": {"kv_cache_gib": 2}, "workload": {"rate_per_s": 4.0, "num_requests": 40}}
    )
    res = simulate(config, map_every_s=0.25, map_max_frames=20)
    assert res.frames is not None
    assert 10 <= len(res.frames) <= 20
    assert res.frames["time_s"].iloc[-1] >= res.summary["duration_s"] / 2  # the whole run
    plain = simulate(config).summary  # frames cut spans: sums may differ in their last bits
    assert res.summary["num_steps"] == plain["num_steps"]
    assert res.summary["duration_s"] == pytest.approx(plain["duration_s"], rel=1e-12)
