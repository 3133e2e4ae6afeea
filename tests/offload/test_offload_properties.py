"""Whole runs with a CPU tier, and a disk tier below it in some, on random workloads: per-tier
conservation and no leaked block.

Hypothesis draws small runs of requests sharing prefixes (so the tier is hit) on a tight GPU pool
(so GPU copies are evicted and requests preempted). With ``debug_invariants`` the engine checks
the GPU pool and the tier after every event (every tier block in exactly one of stored,
storing, loading, free); the memory rows' tier columns sum to the tier's size; at the end no
load is in flight, no tier block is held by a load, and every GPU block is free. Half the runs
mark each request's own tokens as the intake does (``note_shared_tokens``), so that the tier
holds their blocks outside its key map until a preemption (``CpuTier.map_private``). With a disk
tier the disk is checked too (every disk block in exactly one of stored, writing, free), and
once every copy has ended no CPU block is read by a load or a disk write.
"""

from __future__ import annotations

import simpy
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kvsim.config.sim import config_from_dict
from kvsim.engine.loop import Engine
from kvsim.results.offload import DISK_COLUMNS, TIER_COLUMNS, disk_arrays, tier_arrays
from kvsim.results.tables import memory_frame
from kvsim.workload.request import Request
from kvsim.workload.tokens import note_shared_tokens

BLOCK_BYTES = 16 * 819_200  # OPT-13B, 16-token blocks


@st.composite
def workloads(draw: st.DrawFn) -> list[Request]:
    n = draw(st.integers(2, 12))
    out = []
    t = 0.0
    for i in range(n):
        t += draw(st.sampled_from([0.0, 0.01, 0.05, 0.5, 0.5]))
        shared = draw(st.sampled_from([0, 40, 64, 112, 160]))
        own = draw(st.integers(1, 30))
        prefix = draw(st.sampled_from(["p", "q", "r"]))
        segs: tuple[tuple[object, int], ...] = ((prefix, shared),) if shared else ()
        segs += ((f"own{i}", own),)
        output = draw(st.integers(1, 15))
        out.append(Request(i, t, shared + own, output, output, token_segments=segs))
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    requests=workloads(),
    gpu_blocks=st.integers(14, 20),
    cpu_blocks=st.integers(1, 40),
    bandwidth=st.sampled_from([1e8, 1e9, 1e11]),
    own_tokens_private=st.booleans(),
    disk_blocks=st.sampled_from([0, 0, 2, 8, 60]),
    disk_bandwidth=st.sampled_from([1e8, 1e10]),
)
def test_tier_conserved_and_nothing_leaks(
    requests: list[Request],
    gpu_blocks: int,
    cpu_blocks: int,
    bandwidth: float,
    own_tokens_private: bool,
    disk_blocks: int,
    disk_bandwidth: float,
) -> None:
    if own_tokens_private:
        note_shared_tokens(requests)
    config = config_from_dict(
        {
            "model": "opt-13b",
            "gpu": "a100-40gb",
            "cache": {"kv_cache_bytes": gpu_blocks * BLOCK_BYTES, "enable_prefix_caching": True},
            "scheduler": {
                "max_model_len": 13 * 16,
                "max_num_batched_tokens": 64,
                "max_num_seqs": 8,
            },
            "offload": {
                "kv_offloading_size": cpu_blocks * BLOCK_BYTES / 2**30,
                "link_bandwidth_bytes_per_s": bandwidth,
                "disk_offloading_size": disk_blocks * BLOCK_BYTES / 2**30,
                "disk_read_bandwidth_bytes_per_s": disk_bandwidth,
                "disk_write_bandwidth_bytes_per_s": disk_bandwidth,
            },
            "debug_invariants": True,
        }
    )
    env = simpy.Environment()
    engine = Engine(env, config, requests)
    env.process(engine.engine_loop())
    env.run()
    offload = engine.offload
    assert offload is not None
    assert engine.num_finished == len(requests)
    event("tier hit" if offload.num_loads else "no tier hit")
    event("preempted" if engine.num_preemptions else "not preempted")
    event("a parked load dropped" if offload.num_loads_dropped else "no load dropped")
    event("private blocks mapped" if own_tokens_private and engine.num_preemptions else "-")
    event("promoted from the disk" if offload.num_promotions else "no promotion")
    assert not offload.loads
    assert offload.tier.num_blocks == cpu_blocks
    links = (offload.gpu_to_cpu, offload.cpu_to_gpu, offload.cpu_to_disk, offload.disk_to_cpu)
    end_s = max(env.now, *(link.busy_until_s for link in links))
    _, _, loading, _ = offload.tier.occupancy(end_s)  # (every copy has ended by then)
    assert loading == 0
    offload.tier.check_invariants(end_s)
    engine.allocator.check_invariants()
    assert engine.allocator.num_free_tokens == engine.allocator.usable_capacity_tokens
    memory = memory_frame({**engine.recorder.arrays(), **tier_arrays(engine.tier_samples)})
    assert (memory[list(TIER_COLUMNS)].sum(axis=1) == cpu_blocks).all()
    if disk_blocks:
        assert offload.disk is not None
        assert offload.disk.num_blocks == disk_blocks
        offload.disk.check_invariants(end_s)
        assert offload.disk.occupancy(end_s)[1] == 0  # (no write in flight)
        disk = disk_arrays(engine.disk_samples)
        assert len(disk["disk_tier_free_blocks"]) == len(memory)
        assert (sum(disk[c] for c in DISK_COLUMNS) == disk_blocks).all()
    else:
        assert offload.disk is None
        assert not engine.disk_samples
