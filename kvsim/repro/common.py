"""The paper's serving setup and its systems, as ``SimConfig`` builders.

Every reproduction runs the ``vllm-v0`` engine profile: the paper's vLLM (whole-prompt prefill
steps, the v0 watermark and decode check, swap for groups), not today's.
"""

from __future__ import annotations

from typing import Any

from kvsim.config import SimConfig, config_from_dict
from kvsim.workload import load_workload

# name -> cache settings (Kwon et al. 2023 §6.1: Orca baselines use a buddy allocator).
SYSTEMS: dict[str, dict[str, Any]] = {
    "Orca (Max)": {"allocator": "buddy", "reservation": "max"},
    "Orca (Pow2)": {"allocator": "buddy", "reservation": "pow2"},
    "Orca (Oracle)": {"allocator": "buddy", "reservation": "oracle"},
    "vLLM": {"allocator": "paged", "block_size_tokens": 16},
}
# dataset -> (workload preset, Figure 13 request rate in req/s)
DATASETS: dict[str, tuple[str, float]] = {
    "ShareGPT": ("sharegpt_paper", 2.0),
    "Alpaca": ("alpaca_like", 30.0),
}
KV_CACHE_GIB = 12.0
COST_PRESET = "vllm-2023"


def paper_config(
    system: str,
    dataset: str,
    *,
    rate_per_s: float | None = None,
    num_requests: int | None = None,
    seed: int = 0,
    **overrides: Any,
) -> SimConfig:
    """The paper's setup for one system and dataset.

    Args:
        system: a key of ``SYSTEMS``.
        dataset: a key of ``DATASETS``.
        rate_per_s: arrival rate, requests/s (default: the dataset's Figure 13 rate).
        num_requests: requests to simulate (default: the workload preset's).
        seed: the run's seed.
        overrides: dotted config overrides, e.g. ``{"scheduler.preemption_mode": "swap"}``.
    """
    if system not in SYSTEMS:
        raise ValueError(f"unknown system {system!r}; choose from {list(SYSTEMS)}")
    if dataset not in DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; choose from {list(DATASETS)}")
    preset, default_rate = DATASETS[dataset]
    wl: dict[str, Any] = {"rate_per_s": rate_per_s or default_rate}
    if num_requests is not None:
        wl["num_requests"] = num_requests
    workload = load_workload(preset, **wl)
    data = {
        "model": "opt-13b",
        "gpu": "a100-40gb",
        "cache": {"kv_cache_gib": KV_CACHE_GIB, **SYSTEMS[system]},
        "scheduler": {"engine": "vllm-v0", "max_model_len": 2048},
        "cost": COST_PRESET,
        "workload": workload.model_dump(),
        "seed": seed,
        "record_memory": True,
    }
    return config_from_dict(data, {k.replace("__", "."): v for k, v in overrides.items()})
