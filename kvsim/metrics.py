"""Summary metrics: pure functions of the results DataFrames.

Shares are time-weighted over the measured window. ``*_pct`` are shares of KV capacity (the
PagedAttention paper's Figure 2 reports shares of KV memory); ``*_pct_of_used`` are shares of the
non-free slots. ``kv_cache_usage_perc`` is vLLM's gauge on its 0-1 scale: slots held by
requests / slots requests can hold (``BlockPool.get_usage``, which hides internal
fragmentation), its time mean and ``_max`` its peak; ``token_utilization_perc`` is token states /
allocated, in percent. Latencies carry vLLM's metric names (``time_to_first_token_seconds`` ...;
``results``) with ``_mean``, ``_p50``, ``_p90``, ``_p95`` and ``_p99`` suffixes;
``inter_token_latency_seconds_mean`` is the token-weighted mean gap between output tokens, what
vLLM's histogram of that name averages.
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


FULL_USAGE = 0.99  # kv_cache_usage_perc at or above which the pool counts as full


def memory_shares(
    memory: pd.DataFrame, capacity_slots: int, usable_capacity_slots: int | None = None
) -> dict[str, float]:
    """Time-weighted mean slots per category, as % of capacity and % of used slots.

    Args:
        usable_capacity_slots: slots requests can hold (capacity minus a paged pool's remainder
            and null block); the capacity when ``None``.
    """
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
    usable = usable_capacity_slots or capacity_slots
    unusable = capacity_slots - usable
    usage = (memory["allocated"].to_numpy() - unusable) / usable
    out["kv_cache_usage_perc"] = float(np.dot(usage, w) / total_s)
    out["kv_cache_usage_perc_max"] = float(usage.max())
    # share of time with (nearly) no free KV: new blocks then mean preemption or waiting
    out["kv_cache_full_time_frac"] = float(w[usage >= FULL_USAGE].sum() / total_s)
    alloc = means["allocated"]
    out["token_utilization_perc"] = 100.0 * means["token_states"] / alloc if alloc else float("nan")
    if "unshared" in memory:  # Figure 15: blocks saved by sharing / blocks without sharing
        unshared = float(np.dot(memory["unshared"].to_numpy(), w) / total_s)
        held = float(np.dot(memory["held"].to_numpy(), w) / total_s)
        out["kv_saved_by_sharing_pct"] = 100.0 * (1 - held / unshared) if unshared else 0.0
    for gauge in ("num_requests_running", "num_requests_waiting"):
        out[f"{gauge}_mean"] = float(np.dot(memory[gauge].to_numpy(), w) / total_s)
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
    return float(np.dot(window["num_requests_running"].to_numpy(), weight) / total)


LATENCY_METRICS = (
    "time_to_first_token_seconds",
    "request_time_per_output_token_seconds",
    "e2e_request_latency_seconds",
    "request_queue_time_seconds",
    "request_prefill_time_seconds",
    "request_decode_time_seconds",
    "request_inference_time_seconds",
    "normalized_latency_seconds",
)


def latency_stats(requests: pd.DataFrame) -> dict[str, float]:
    """Mean and p50/p90/p95/p99 of each of ``LATENCY_METRICS`` (seconds), over requests, and the
    token-weighted mean inter-token latency."""
    out: dict[str, float] = {}
    for col in LATENCY_METRICS:
        if col not in requests:
            continue
        values = requests[col].dropna().to_numpy()
        if len(values) == 0:
            continue
        out[f"{col}_mean"] = float(values.mean())
        for q in (50, 90, 95, 99):
            out[f"{col}_p{q}"] = float(np.percentile(values, q))
    if "output_tokens" not in requests or "request_decode_time_seconds" not in requests:
        return out
    gaps = float((requests["output_tokens"] - 1).sum())
    if gaps > 0:
        decode_s = float(requests["request_decode_time_seconds"].sum())
        out["inter_token_latency_seconds_mean"] = decode_s / gaps
    return out


def summarize(
    memory: pd.DataFrame,
    requests: pd.DataFrame,
    *,
    capacity_slots: int,
    usable_capacity_slots: int | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
) -> dict[str, Any]:
    """All scalar metrics of a run, memory ones over ``[start_s, end_s)``.

    Args:
        memory: the memory time series (``recorder.MEMORY_COLUMNS``).
        requests: per-request records (``results.request_frame``).
        capacity_slots: KV pool size in token slots.
        usable_capacity_slots: slots requests can hold (``kv_cache_usage_perc``'s denominator).
        start_s, end_s: measurement window in simulated seconds (whole run when None).
    """
    window = clip_window(memory, start_s, end_s)
    out: dict[str, Any] = memory_shares(window, capacity_slots, usable_capacity_slots)
    # the batch as a serving system logs it: one sample per engine step (Figure 13's view)
    out["num_requests_running_step_mean"] = mean_batched_requests(memory, start_s, end_s)
    out["num_requests_running_max"] = (
        int(memory["num_requests_running"].max()) if len(memory) else 0
    )
    out["num_steps"] = int(memory["num_steps"].sum())
    out["num_blocked_steps"] = int(memory["num_blocked_steps"].sum())
    makespan = float(requests["finish_time_s"].max() - requests["arrival_time_s"].min())
    out["num_requests"] = len(requests)
    out["prompt_tokens_total"] = int(requests["prompt_tokens"].sum())
    out["generation_tokens_total"] = int(requests["output_tokens"].sum())
    out["prefix_cached_tokens_total"] = int(requests["num_cached_tokens"].sum())
    out["duration_s"] = makespan
    out["throughput_requests_per_s"] = len(requests) / makespan if makespan > 0 else float("nan")
    out["throughput_output_tokens_per_s"] = (
        float(requests["output_tokens"].sum()) / makespan if makespan > 0 else float("nan")
    )
    out.update(latency_stats(requests))
    return out
