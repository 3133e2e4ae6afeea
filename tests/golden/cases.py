"""Configs whose results were recorded as golden files before the one-engine rewrite (issue 28).

``VARIED`` covers both engine profiles, every allocator and reservation, prefix caching, radix,
parallel sampling and beam search (sequence groups), swap and recompute preemption, tensor
parallelism, chunked prefill on and off, a token threshold, ``memory_resolution = "step"`` and
a memory map; ``BENCH`` the ``make bench`` workloads (traces needed). Each is a plain
``config_from_dict`` table: small enough for a few seconds a run.
"""

from __future__ import annotations

from typing import Any

_SMALL = {"model": "llama-3.1-8b", "gpu": "a100-80gb", "seed": 7}
_POISSON = {"lengths": "lognormal", "arrival": "poisson", "rate_per_s": 20.0, "num_requests": 600}
_OPT = {"model": "opt-13b", "gpu": "a100-40gb", "cost": "vllm-2023", "seed": 3}


def _case(base: dict[str, Any], **tables: dict[str, Any]) -> dict[str, Any]:
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in base.items()}
    for key, table in tables.items():
        out[key] = {**out.get(key, {}), **table}
    return out


def _varied() -> dict[str, dict[str, Any]]:
    cases: dict[str, dict[str, Any]] = {}
    tight = {"kv_cache_gib": 1.0}
    for engine in ("vllm-v1", "vllm-v0"):
        tag = engine.split("-")[1]
        sched = {"engine": engine, "max_model_len": 4096}
        for alloc in ("paged", "radix", "first_fit", "best_fit", "buddy"):
            reservations = ["max"] if alloc in ("paged", "radix") else ["max", "pow2", "oracle"]
            for res in reservations:
                cases[f"{tag}_{alloc}_{res}"] = _case(
                    _SMALL,
                    workload=_POISSON,
                    scheduler=sched,
                    cache={"allocator": alloc, "reservation": res, "kv_cache_gib": 2.0},
                )
        cases[f"{tag}_paged_tight"] = _case(
            _SMALL, workload=_POISSON, scheduler=sched, cache={"allocator": "paged", **tight}
        )
        cases[f"{tag}_paged_block1"] = _case(
            _SMALL,
            workload=_POISSON,
            scheduler=sched,
            cache={"allocator": "paged", "block_size_tokens": 1, "kv_cache_gib": 2.0},
        )
        cases[f"{tag}_paged_block128"] = _case(
            _SMALL,
            workload=_POISSON,
            scheduler=sched,
            cache={"allocator": "paged", "block_size_tokens": 128, "kv_cache_gib": 2.0},
        )
        cases[f"{tag}_prefix_cache_shared"] = _case(
            _SMALL,
            workload={**_POISSON, "shared_prefix_tokens": 300, "num_tenants": 3},
            scheduler=sched,
            cache={"allocator": "paged", "enable_prefix_caching": True, **tight},
        )
        cases[f"{tag}_radix_shared"] = _case(
            _SMALL,
            workload={**_POISSON, "shared_prefix_tokens": 300, "num_tenants": 3},
            scheduler=sched,
            cache={"allocator": "radix", **tight},
        )
        cases[f"{tag}_multiturn"] = _case(
            _SMALL,
            workload={**_POISSON, "num_turns": 3, "turn_gap_s": 2.0, "num_requests": 300},
            scheduler=sched,
            cache={"allocator": "paged", "enable_prefix_caching": True, **tight},
        )
        cases[f"{tag}_parallel_n4"] = _case(
            _OPT,
            workload={"preset": "alpaca_like", "n": 4, "rate_per_s": 10.0, "num_requests": 400},
            scheduler={"engine": engine, "max_model_len": 2048},
            cache={"allocator": "paged", "kv_cache_gib": 2.0},
        )
        cases[f"{tag}_tp4"] = _case(
            {**_SMALL, "model": "llama-3.1-70b", "gpu": "h100-80gb"},
            workload=_POISSON,
            scheduler=sched,
            parallel={"tensor_parallel_size": 4},
            cache={"allocator": "paged"},
        )
        cases[f"{tag}_step_resolution"] = {
            **_case(
                _SMALL,
                workload={**_POISSON, "num_requests": 200},
                scheduler=sched,
                cache={"allocator": "paged", **tight},
            ),
            "memory_resolution": "step",
        }
    cases["v0_beam4"] = _case(
        _OPT,
        workload={"preset": "alpaca_beam", "rate_per_s": 10.0, "num_requests": 300},
        scheduler={"engine": "vllm-v0", "max_model_len": 2048},
        cache={"allocator": "paged", "kv_cache_gib": 2.0},
    )
    cases["v0_swap"] = _case(
        _SMALL,
        workload=_POISSON,
        scheduler={"engine": "vllm-v0", "max_model_len": 4096, "preemption_mode": "swap"},
        cache={"allocator": "paged", "kv_cache_gib": 0.5},
    )
    cases["v0_request_batching"] = _case(
        _OPT,
        workload={"preset": "sharegpt_paper", "rate_per_s": 2.0, "num_requests": 300},
        scheduler={"engine": "vllm-v0", "max_model_len": 2048, "batching": "request"},
        cache={"allocator": "buddy", "reservation": "max", "kv_cache_gib": 12.0},
    )
    cases["v1_no_chunked"] = _case(
        _SMALL,
        workload=_POISSON,
        scheduler={"engine": "vllm-v1", "enable_chunked_prefill": False, "max_model_len": 4096},
        cache={"allocator": "paged", **tight},
    )
    cases["v1_threshold"] = _case(
        _SMALL,
        workload=_POISSON,
        scheduler={
            "engine": "vllm-v1",
            "long_prefill_token_threshold": 256,
            "max_num_batched_tokens": 1024,
            "max_model_len": 4096,
        },
        cache={"allocator": "paged", **tight},
    )
    cases["v1_no_full_isl"] = _case(
        _SMALL,
        workload=_POISSON,
        scheduler={"engine": "vllm-v1", "scheduler_reserve_full_isl": False, "max_model_len": 4096},
        cache={"allocator": "paged", **tight},
    )
    cases["v1_max_num_seqs8"] = _case(
        _SMALL,
        workload=_POISSON,
        scheduler={"engine": "vllm-v1", "max_num_seqs": 8, "max_model_len": 4096},
        cache={"allocator": "paged", "kv_cache_gib": 2.0},
    )
    for engine in ("vllm-v1", "vllm-v0"):
        tag = engine.split("-")[1]
        cases[f"{tag}_multiturn_radix"] = _case(
            _SMALL,
            workload={**_POISSON, "num_turns": 3, "turn_gap_s": 2.0, "num_requests": 300},
            scheduler={"engine": engine, "max_model_len": 4096},
            cache={"allocator": "radix", "kv_cache_gib": 1.0},
        )
    cases["v0_parallel_unshared"] = _case(
        _OPT,
        workload={"preset": "alpaca_like", "n": 4, "rate_per_s": 10.0, "num_requests": 400},
        scheduler={"engine": "vllm-v0", "max_model_len": 2048},
        cache={"allocator": "paged", "kv_cache_gib": 2.0, "share_sequence_groups": False},
    )
    cases["v0_parallel_buddy"] = _case(
        _OPT,
        workload={"preset": "alpaca_like", "n": 3, "rate_per_s": 10.0, "num_requests": 300},
        scheduler={"engine": "vllm-v0", "max_model_len": 2048},
        cache={"allocator": "buddy", "reservation": "pow2", "kv_cache_gib": 2.0},
    )
    cases["v0_beam_first_fit"] = _case(
        _OPT,
        workload={"preset": "alpaca_beam", "rate_per_s": 10.0, "num_requests": 200},
        scheduler={"engine": "vllm-v0", "max_model_len": 2048},
        cache={"allocator": "first_fit", "reservation": "oracle", "kv_cache_gib": 2.0},
    )
    cases["v0_parallel_tight_swap"] = _case(
        _OPT,
        workload={"preset": "alpaca_like", "n": 4, "rate_per_s": 20.0, "num_requests": 400},
        scheduler={"engine": "vllm-v0", "max_model_len": 1024},
        cache={"allocator": "paged", "kv_cache_gib": 1.0},
    )
    cases["v1_prefix_cache_mapped"] = {
        **_case(
            _SMALL,
            workload={**_POISSON, "shared_prefix_tokens": 300, "num_tenants": 3},
            scheduler={"engine": "vllm-v1", "max_model_len": 4096},
            cache={"allocator": "paged", "enable_prefix_caching": True, "kv_cache_gib": 1.0},
        ),
        "debug_invariants": True,
    }
    return cases


VARIED: dict[str, dict[str, Any]] = _varied()
# Memory-map runs: (name, config, map_every_s)
MAPPED: dict[str, tuple[dict[str, Any], float]] = {
    "map_v1_paged": (VARIED["v1_paged_tight"], 2.0),
    "map_v0_buddy": (VARIED["v0_buddy_pow2"], 2.0),
    "map_v1_first_fit": (VARIED["v1_first_fit_max"], 2.0),
    "map_v1_prefix_cache": (VARIED["v1_prefix_cache_mapped"], 1.0),
    "map_v0_parallel": (VARIED["v0_parallel_n4"], 2.0),
}
