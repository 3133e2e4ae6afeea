"""The main job: the PagedAttention paper's Figure 2, KV memory waste of Orca baselines vs paging.

Setup (Kwon et al., SOSP 2023, §6.1-6.2): OPT-13B (800 KiB per token) on one A100-40GB with 12 GiB
of KV (15,728 slots); ShareGPT lengths (the paper's own list, kept when prompt + output <= 2048 and
both >= 4 tokens); Poisson arrivals fast enough that requests always wait, so the pool stays
saturated. Orca (Max / Pow2 / Oracle) are contiguous slabs placed by a buddy allocator with
max_model_len 2048; vLLM is paged with 16-token blocks. Shares are time-weighted over the
saturated window, from 10 % of the last arrival time to the last arrival (warm-up and drain cut).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from kvsim.config import config_from_dict
from kvsim.engine import simulate
from kvsim.metrics import summarize
from kvsim.plots import waste_bars
from kvsim.workload import DataNotFoundError, resolve_trace

logger = logging.getLogger(__name__)

STACK = ("token_states", "reservation", "internal_fragmentation", "external_fragmentation")


@dataclass(frozen=True)
class PaperSystem:
    """One bar of the paper's Figure 2: its config and published stack (% of KV memory)."""

    system: str
    cache: dict[str, Any]
    paper_pct: tuple[float, float, float, float] | None  # token, reservation, internal, external


# Figure 2 of Kwon et al. (SOSP 2023). vLLM's bar gives only token states (96.3 %).
SYSTEMS = (
    PaperSystem("Orca (Max)", {"allocator": "buddy", "reservation": "max"}, (20.4, 13.3, 57.3, 8.9)),
    PaperSystem("Orca (Pow2)", {"allocator": "buddy", "reservation": "pow2"}, (26.8, 17.9, 13.6, 41.6)),
    PaperSystem("Orca (Oracle)", {"allocator": "buddy", "reservation": "oracle"}, (38.2, 25.2, 0.0, 36.6)),
    PaperSystem("vLLM", {"allocator": "paged", "block_size_tokens": 16}, None),
)
VLLM_TOKEN_STATES_PCT = 96.3


def base_config(num_requests: int, rate_per_s: float, seed: int) -> dict[str, Any]:
    """The Figure 2 scenario as a plain config dict (see the module docstring)."""
    return {
        "model": "opt-13b",
        "gpu": "a100-40gb",
        "cache": {"kv_cache_gib": 12},
        "scheduler": {"max_model_len": 2048, "max_num_seqs": 256},
        "workload": {
            "name": "sharegpt_paper_saturated",
            "trace": "sharegpt_opt",
            "sample": "resample",
            "fallback_synthetic": True,
            "min_prompt_tokens": 4,
            "min_output_tokens": 4,
            "overflow": "drop",
            "arrival": "poisson",
            "rate_per_s": rate_per_s,
            "num_requests": num_requests,
        },
        "seed": seed,
    }


def workload_source() -> str:
    """Which lengths the run uses: the paper's ShareGPT list, or the synthetic fallback."""
    try:
        path, _ = resolve_trace("sharegpt_opt")
    except DataNotFoundError as err:
        return f"synthetic ShareGPT-like lengths fitted to the paper's means ({err.args[0].splitlines()[0]})"
    return f"the paper's ShareGPT lengths from {path}"


def run_system(system: PaperSystem, base: dict[str, Any]) -> dict[str, Any]:
    """Simulate one system and return its Figure 2 row (shares in % of KV capacity)."""
    config = config_from_dict({**base, "cache": {**base["cache"], **system.cache}})
    results = simulate(config)
    last_arrival = float(results.requests["arrival_time_s"].max())
    summary = summarize(results.memory, results.requests, capacity_slots=config.capacity_tokens,
                        start_s=0.1 * last_arrival, end_s=last_arrival)
    row: dict[str, Any] = {"system": system.system}
    for c in (*STACK, "free"):
        row[f"{c}_pct"] = summary[f"{c}_pct"]
    paper = system.paper_pct or (VLLM_TOKEN_STATES_PCT, None, None, None)
    for c, value in zip(STACK, paper, strict=True):
        row[f"paper_{c}_pct"] = value
    row["mean_running"] = summary["mean_running"]
    row["num_blocked_steps"] = summary["num_blocked_steps"]
    row["num_preemptions"] = results.summary["num_preemptions"]
    row["kv_usage_perc"] = summary["kv_usage_perc"]
    row["capacity_tokens"] = config.capacity_tokens
    return row


def run_fig2(num_requests: int = 4000, rate_per_s: float = 5.0, seed: int = 0,
             on_system: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Run the four systems; one row per system (``breakdown.csv``'s columns).

    Args:
        num_requests: requests per system.
        rate_per_s: Poisson rate, requests/s; 5 keeps every system's queue non-empty.
        seed: workload seed (the same requests for every system).
        on_system: called with each system's name before it runs (progress).
    """
    base = base_config(num_requests, rate_per_s, seed)
    rows = []
    for system in SYSTEMS:
        if on_system is not None:
            on_system(system.system)
        rows.append(run_system(system, base))
    return pd.DataFrame(rows)


def plot_breakdown(breakdown: pd.DataFrame) -> Figure:
    """Figure-2-style stacked bars: each system simulated, beside the paper's published stack."""
    rows, labels = [], []
    for _, row in breakdown.iterrows():
        rows.append({f"{c}_pct": row[f"{c}_pct"] for c in (*STACK, "free")})
        labels.append(f"{row['system']} kvsim")
        rows.append({f"{c}_pct": row[f"paper_{c}_pct"] for c in STACK} | {"free_pct": 0.0})
        labels.append(f"{row['system']} paper")
    table = pd.DataFrame(rows).astype(float)
    return waste_bars(table, labels, of="capacity",
                      title="KV memory by category: kvsim vs PagedAttention paper, Figure 2")


def write_fig2(breakdown: pd.DataFrame, out: str | Path) -> tuple[Path, Path]:
    """Write ``breakdown.csv`` and ``breakdown.png`` into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "breakdown.csv"
    breakdown.to_csv(csv_path, index=False, float_format="%.2f")
    png_path = out / "breakdown.png"
    plot_breakdown(breakdown).savefig(png_path, dpi=130)
    return csv_path, png_path


