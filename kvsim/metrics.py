"""Summary metrics: pure functions of the results DataFrames.

Shares are time-weighted over the measured window. ``*_pct`` are shares of KV capacity (the
PagedAttention paper's Figure 2 reports shares of KV memory); ``*_pct_of_used`` are shares of the
non-free slots. ``kv_usage_perc`` is allocated / capacity (vLLM's ``kv_cache_usage_perc``, which
hides internal fragmentation); ``token_utilization_perc`` is token states / allocated.
``kv_saved_by_sharing_pct`` is 1 - held / unshared slots, time-weighted (the PagedAttention paper's
Figure 15 metric: blocks saved by sharing over blocks without sharing).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from kvsim.recorder import CATEGORIES


def clip_window(memory: pd.DataFrame, start_s: float | None, end_s: float | None) -> pd.DataFrame:
    """Rows of ``memory`` inside ``[start_s, end_s)``, durations trimmed to the overlap (s)."""
    if start_s is None and end_s is None:
        return memory
    lo = -np.inf if start_s is None else start_s
    hi = np.inf if end_s is None else end_s
    begin = memory["time_s"].to_numpy()
    end = begin + memory["duration_s"].to_numpy()
    overlap = np.clip(np.minimum(end, hi) - np.maximum(begin, lo), 0, None)
    out = memory.assign(duration_s=overlap)
    return out[overlap > 0]


def memory_shares(memory: pd.DataFrame, capacity_slots: int) -> dict[str, float]:
    """Time-weighted mean slots per category, as % of capacity and % of used slots."""
    w = memory["duration_s"].to_numpy()
    total_s = w.sum()
    out: dict[str, float] = {}
    if total_s <= 0:
        return out
    means = {
        c: float(np.dot(memory[c].to_numpy(), w) / total_s) for c in (*CATEGORIES, "allocated")
    }
    used = capacity_slots - means["free"]
    for c in CATEGORIES:
        out[f"{c}_pct"] = 100.0 * means[c] / capacity_slots
        if c != "free":
            out[f"{c}_pct_of_used"] = 100.0 * means[c] / used if used > 0 else float("nan")
    out["kv_usage_perc"] = 100.0 * means["allocated"] / capacity_slots
    alloc = means["allocated"]
    out["token_utilization_perc"] = 100.0 * means["token_states"] / alloc if alloc else float("nan")
    if "unshared" in memory:  # Figure 15: blocks saved by sharing / blocks without sharing
        unshared = float(np.dot(memory["unshared"].to_numpy(), w) / total_s)
        held = float(np.dot(memory["held"].to_numpy(), w) / total_s)
        out["kv_saved_by_sharing_pct"] = 100.0 * (1 - held / unshared) if unshared else 0.0
    out["mean_running"] = float(np.dot(memory["num_running"].to_numpy(), w) / total_s)
    out["mean_waiting"] = float(np.dot(memory["num_waiting"].to_numpy(), w) / total_s)
    return out


def mean_batched_requests(
    memory: pd.DataFrame,
    start_s: float | None = None,
    end_s: float | None = None,
    *,
    per: str = "step",
) -> float:
    """Mean number of requests in the running batch over ``[start_s, end_s)`` (seconds).

    Args:
        memory: the memory time series (``recorder.MEMORY_COLUMNS``).
        start_s, end_s: window in simulated seconds (whole run when ``None``).
        per: ``"step"`` averages over engine iterations (what a serving system logs per step and,
            we assume, the PagedAttention paper's Figure 13 reports); ``"time"`` weights each
            step by its duration.

    Returns:
        The mean batch size (requests), ``nan`` when the window holds no step.
    """
    if per not in ("step", "time"):
        raise ValueError(f"per: expected 'step' or 'time', got {per!r}")
    window = clip_window(memory, start_s, end_s)
    if per == "time":
        weight = window["duration_s"].to_numpy()
    else:  # steps of a span are spread evenly over it; a clipped span keeps its share of steps
        full = memory.loc[window.index, "duration_s"].to_numpy()
        share = np.divide(
            window["duration_s"].to_numpy(), full, out=np.ones_like(full), where=full > 0
        )
        weight = window["num_steps"].to_numpy() * share
    total = weight.sum()
    if total <= 0:
        return float("nan")
    return float(np.dot(window["num_running"].to_numpy(), weight) / total)


def latency_stats(requests: pd.DataFrame) -> dict[str, float]:
    """Mean and p50/p90/p99 of TTFT, TPOT, E2E and normalised latency (seconds).

    Normalised latency is E2E latency divided by output tokens (seconds per token), the
    PagedAttention paper's Figure 12 metric; TPOT is (E2E - TTFT) / (output tokens - 1).
    """
    out: dict[str, float] = {}
    for col in ("ttft_s", "tpot_s", "e2e_s", "normalized_latency_s"):
        values = requests[col].dropna().to_numpy()
        if len(values) == 0:
            continue
        name = col.removesuffix("_s")
        out[f"mean_{name}_s"] = float(values.mean())
        for q in (50, 90, 99):
            out[f"p{q}_{name}_s"] = float(np.percentile(values, q))
    return out


def summarize(
    memory: pd.DataFrame,
    requests: pd.DataFrame,
    *,
    capacity_slots: int,
    start_s: float | None = None,
    end_s: float | None = None,
) -> dict[str, Any]:
    """All scalar metrics of a run, memory ones over ``[start_s, end_s)``.

    Args:
        memory: the memory time series (``recorder.MEMORY_COLUMNS``).
        requests: per-request records (``results.request_frame``).
        capacity_slots: KV pool size in token slots.
        start_s, end_s: measurement window in simulated seconds (whole run when None).
    """
    window = clip_window(memory, start_s, end_s)
    out: dict[str, Any] = memory_shares(window, capacity_slots)
    out["max_running"] = int(memory["num_running"].max()) if len(memory) else 0
    out["num_steps"] = int(memory["num_steps"].sum())
    out["num_blocked_steps"] = int(memory["num_blocked_steps"].sum())
    makespan = float(requests["finish_time_s"].max() - requests["arrival_time_s"].min())
    out["num_requests"] = len(requests)
    out["duration_s"] = makespan
    out["throughput_requests_per_s"] = len(requests) / makespan if makespan > 0 else float("nan")
    out["throughput_output_tokens_per_s"] = (
        float(requests["output_tokens"].sum()) / makespan if makespan > 0 else float("nan")
    )
    out.update(latency_stats(requests))
    return out
