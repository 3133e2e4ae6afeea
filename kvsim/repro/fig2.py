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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from kvsim.engine import simulate
from kvsim.metrics import summarize
from kvsim.plots import waste_bars
from kvsim.repro.common import SYSTEMS, paper_config
from kvsim.workload import DataNotFoundError, resolve_trace

logger = logging.getLogger(__name__)

STACK = ("token_states", "reservation", "internal_fragmentation", "external_fragmentation")


# Figure 2 of Kwon et al. (SOSP 2023): token states / reservation / internal / external & other,
# % of KV memory. vLLM's bar gives only its token states.
PAPER_STACKS: dict[str, tuple[float, float, float, float] | None] = {
    "Orca (Max)": (20.4, 13.3, 57.3, 8.9),
    "Orca (Pow2)": (26.8, 17.9, 13.6, 41.6),
    "Orca (Oracle)": (38.2, 25.2, 0.0, 36.6),
    "vLLM": None,
}
VLLM_TOKEN_STATES_PCT = 96.3


def paper_lengths_available() -> bool:
    """Whether the paper's ShareGPT length file is in ``KVSIM_DATA``."""
    try:
        resolve_trace("sharegpt_opt")
    except DataNotFoundError:
        return False
    return True


def workload_source() -> str:
    """Which lengths the run uses: the paper's ShareGPT list, or the synthetic fallback."""
    try:
        path, _ = resolve_trace("sharegpt_opt")
    except DataNotFoundError as err:
        reason = err.args[0].splitlines()[0]
        return f"synthetic ShareGPT-like lengths fitted to the paper's means ({reason})"
    return f"the paper's ShareGPT lengths from {path}"


def run_system(system: str, num_requests: int, rate_per_s: float, seed: int) -> dict[str, Any]:
    """Simulate one system of ``SYSTEMS`` and return its Figure 2 row (% of KV capacity)."""
    config = paper_config(
        system, "ShareGPT", rate_per_s=rate_per_s, num_requests=num_requests, seed=seed
    )
    results = simulate(config)
    last_arrival = float(results.requests["arrival_time_s"].max())
    summary = summarize(
        results.memory,
        results.requests,
        capacity_slots=config.capacity_tokens,
        usable_capacity_slots=results.summary["usable_capacity_tokens"],
        start_s=0.1 * last_arrival,
        end_s=last_arrival,
    )
    row: dict[str, Any] = {"system": system, "engine": config.engine_args.engine}
    for c in (*STACK, "free"):
        row[f"{c}_pct"] = summary[f"{c}_pct"]
    paper = PAPER_STACKS[system] or (VLLM_TOKEN_STATES_PCT, None, None, None)
    for c, value in zip(STACK, paper, strict=True):
        row[f"paper_{c}_pct"] = value
    row["num_requests_running_mean"] = summary["num_requests_running_mean"]
    row["num_blocked_steps"] = summary["num_blocked_steps"]
    row["num_preemptions"] = results.summary["num_preemptions"]
    row["kv_cache_usage_perc"] = summary["kv_cache_usage_perc"]
    row["capacity_tokens"] = config.capacity_tokens
    return row


def run_fig2(
    num_requests: int = 5_000,
    rate_per_s: float = 5.0,
    seeds: Sequence[int] = (0, 1, 2, 3),
    on_system: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Run the four systems over several seeds; one row per system (``breakdown.csv``).

    Each share is the mean over the seeds (independent workloads of ``num_requests`` each; the
    heavy-tailed ShareGPT lengths move a single run's shares by about a point);
    ``token_states_pct_min``/``_max`` give the spread.

    Args:
        num_requests: requests per system and seed.
        rate_per_s: Poisson rate, requests/s; 5 keeps every system's queue non-empty.
        seeds: workload seeds (every system serves the same requests for a seed).
        on_system: called with each system's name before it runs (progress).
    """
    rows = []
    for system in SYSTEMS:
        if on_system is not None:
            on_system(system)
        runs = pd.DataFrame([run_system(system, num_requests, rate_per_s, s) for s in seeds])
        row = runs.mean(numeric_only=True).to_dict()
        row["system"] = system
        row["engine"] = runs["engine"].iloc[0]
        row["token_states_pct_min"] = runs["token_states_pct"].min()
        row["token_states_pct_max"] = runs["token_states_pct"].max()
        row["capacity_tokens"] = int(runs["capacity_tokens"].iloc[0])
        row["lengths"] = (
            "sharegpt_opt" if paper_lengths_available() else "sharegpt_like (synthetic fallback)"
        )
        row["num_seeds"] = len(seeds)
        row["requests_per_seed"] = num_requests
        rows.append(row)
    table = pd.DataFrame(rows)
    return table[["system", *[c for c in table.columns if c != "system"]]]


def plot_breakdown(breakdown: pd.DataFrame) -> Figure:
    """Figure-2-style stacked bars: each system simulated, beside the paper's published stack."""
    rows, labels = [], []
    for _, row in breakdown.iterrows():
        rows.append({f"{c}_pct": row[f"{c}_pct"] for c in (*STACK, "free")})
        labels.append(f"{row['system']} kvsim")
        rows.append({f"{c}_pct": row[f"paper_{c}_pct"] for c in STACK} | {"free_pct": 0.0})
        labels.append(f"{row['system']} paper")
    table = pd.DataFrame(rows).astype(float)
    title = "KV memory by category: kvsim vs PagedAttention paper, Figure 2"
    if "lengths" in breakdown and breakdown["lengths"].str.contains("synthetic").any():
        title += " (kvsim on synthetic ShareGPT-like lengths)"
    fig = waste_bars(table, labels, of="capacity", title=title)
    fig.text(
        0.01,
        0.01,
        "paper bars: Kwon et al., SOSP 2023, Fig. 2 (vLLM: token states only)",
        fontsize="small",
    )
    return fig


def write_fig2(breakdown: pd.DataFrame, out: str | Path) -> tuple[Path, Path]:
    """Write ``breakdown.csv`` and ``breakdown.png`` into ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "breakdown.csv"
    breakdown.to_csv(csv_path, index=False, float_format="%.2f")
    png_path = out / "breakdown.png"
    plot_breakdown(breakdown).savefig(png_path, dpi=130)
    return csv_path, png_path
