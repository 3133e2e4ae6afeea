"""A store the CPU tier finds no room for is offered again at every step its request runs, as
vLLM 0.34.0 offers every scheduled request's unstored blocks after each step
(``OffloadingConnectorScheduler._build_store_jobs`` walks ``num_scheduled_tokens``; a
``prepare_store`` that returns ``None`` counts ``vllm:kv_offload_allocation_failure`` and leaves
the request's stored index where it was).

OPT-13B, 16-token blocks of 13,107,200 bytes; a 41-block GPU pool; a CPU tier of 0.1 GiB =
107,374,182 bytes -> 8 blocks (107,374,182 // 13,107,200 = 8.19); a link of 1,000 bytes/s, so
a store of 8 blocks (104,857,600 bytes) takes 104,857.6 s, far past the run's end.

- A and B arrive together: prompts of 128 distinct tokens (8 full blocks each), 40 outputs.
- Step 1 prefills both. After it A's 8 blocks take the whole tier, storing (not evictable);
  B's 8 find no room: a failure.
- A's blocks stay storing to the end, so every later offer of B's 8 fails too. B runs in each
  of the 40 steps (its prefill, then 39 decodes: 40 outputs, the first sampled by the prefill),
  so it is offered, and fails, 40 times; A never again (its prompt is stored). Offered only
  when one of its decode blocks fills (tokens 144 and 160, in steps 17 and 33), it would fail
  3 times.
- Prometheus (``vllm:kv_offload_*``): 40 failures; 41 prepare_store calls that asked for 8
  blocks (A's 1 and B's 40: all in the ``le="16.0"`` bucket, none in ``le="4.0"``); at the end
  the tier's 8 blocks are all storing: usage 1, write usage 1, read usage 0.
"""

from __future__ import annotations

from kvsim import simulate
from kvsim.config.sim import config_from_dict
from kvsim.results.prometheus import prometheus_snapshot
from kvsim.workload.request import Request

BLOCK_BYTES = 16 * 819_200


def test_a_store_without_room_is_offered_again_every_step() -> None:
    config = config_from_dict(
        {
            "model": "opt-13b",
            "gpu": "a100-40gb",
            "cache": {"kv_cache_bytes": 41 * BLOCK_BYTES, "enable_prefix_caching": True},
            "scheduler": {"max_model_len": 512},
            "debug_invariants": True,
            "offload": {"kv_offloading_size": 0.1, "link_bandwidth_bytes_per_s": 1000.0},
        }
    )
    requests = [
        Request(0, 0.0, 128, 40, 40, token_segments=(("a", 128),)),
        Request(1, 0.0, 128, 40, 40, token_segments=(("b", 128),)),
    ]
    run = simulate(config, requests)
    s = run.summary
    assert s["cpu_tier_blocks"] == 8
    assert s["num_steps"] == 40
    assert s["kv_offload_allocation_failures"] == 40
    assert s["cpu_tier_stored_blocks"] == 8  # A's only
    assert s["kv_offload_bytes_gpu_to_cpu"] == 8 * BLOCK_BYTES
    assert s["cpu_tier_storing_blocks_at_end"] == 8
    assert s["cpu_tier_loading_blocks_at_end"] == 0

    rows = [ln.rsplit(" ", 1) for ln in prometheus_snapshot(run).splitlines() if ln[0] != "#"]
    value = {name: float(number) for name, number in rows}
    base = 'engine="0",model_name="opt-13b"'
    assert value[f"vllm:kv_offload_allocation_failure_total{{{base}}}"] == 40
    bucket = 'vllm:kv_offload_cpu_allocation_size_bucket{engine="0",le="%s",model_name="opt-13b"}'
    assert value[bucket % "4.0"] == 0
    assert value[bucket % "16.0"] == 41
    assert value[f"vllm:kv_offload_cpu_cache_usage_perc{{{base}}}"] == 1.0
    assert value[f"vllm:kv_offload_cpu_cache_write_usage_perc{{{base}}}"] == 1.0
    assert value[f"vllm:kv_offload_cpu_cache_read_usage_perc{{{base}}}"] == 0.0
