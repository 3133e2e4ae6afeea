"""Summary metrics: pure functions of the results DataFrames.

Shares are time-weighted over the measured window. ``*_pct`` are shares of KV capacity (the
PagedAttention paper's Figure 2 reports shares of KV memory); ``*_pct_of_used`` are shares of the
non-free slots. ``kv_cache_usage_perc`` is vLLM's gauge on its 0-1 scale: slots held by
requests / slots requests can hold (``BlockPool.get_usage``, which hides internal
fragmentation), its time mean and ``_max`` its peak; ``token_utilization_perc`` is token states /
allocated slots, in percent, over the slots the usage counts (vLLM v1's null block and a paged
pool's remainder slots, which no request can hold, left out of both). Latencies carry vLLM's
metric names (``time_to_first_token_seconds`` ...; ``results``) with ``_mean``, ``_p50``,
``_p90``, ``_p95`` and ``_p99`` suffixes;
``inter_token_latency_seconds_mean`` is the mean gap between a request's successive output
steps (one output token a step, or a verification's tokens under speculative decoding:
``output_gaps``), what vLLM's histogram of that name averages.
``kv_saved_by_sharing_pct`` is 1 - held / unshared slots, time-weighted (the PagedAttention paper's
Figure 15 metric: blocks saved by sharing over blocks without sharing).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kvsim.base.units import plural
from kvsim.results.columns import CATEGORIES, FULL_USAGE

if TYPE_CHECKING:
    import pandas as pd

logger = logging.getLogger(__name__)

# A table as columns: name -> one array per column, every array as long (rows). The functions
# below take DataFrames (the public tables) or such mappings (``build_results`` summarizes a run
# from its arrays without building a DataFrame); both go through the same arithmetic.
Columns = Mapping[str, npt.NDArray[Any]]


def _columns(table: pd.DataFrame | Columns) -> Columns:
    """``table``'s columns as arrays (a DataFrame's ``to_numpy``; a mapping as it is)."""
    if isinstance(table, Mapping):
        return table
    return {str(c): table[c].to_numpy() for c in table.columns}


def _num_rows(columns: Columns) -> int:
    return len(next(iter(columns.values()))) if columns else 0


def _skipna(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``values`` without NaNs (pandas' ``dropna``; object and integer arrays as they are)."""
    if values.dtype.kind == "f":
        kept: npt.NDArray[Any] = values[~np.isnan(values)]
        return kept
    return values


def _max(values: npt.NDArray[Any]) -> Any:
    """pandas' ``Series.max()``: NaNs skipped, NaN when nothing is left."""
    values = _skipna(values)
    return values.max() if len(values) else np.nan


def _min(values: npt.NDArray[Any]) -> Any:
    """pandas' ``Series.min()``: NaNs skipped, NaN when nothing is left."""
    values = _skipna(values)
    return values.min() if len(values) else np.nan


def _sum(values: npt.NDArray[Any]) -> Any:
    """pandas' ``Series.sum()``: NaNs count as 0."""
    if values.dtype.kind == "f":
        return np.where(np.isnan(values), 0.0, values).sum()
    return values.sum()


def _clip(
    memory: Columns, start_s: float | None, end_s: float | None
) -> tuple[Columns, npt.NDArray[np.bool_] | None]:
    """Rows of ``memory`` inside ``[start_s, end_s)``, durations trimmed to the overlap (s),
    on columns; and the mask of the rows kept (``None``: every row)."""
    if start_s is None and end_s is None:
        return memory, None
    lo = -np.inf if start_s is None else start_s
    hi = np.inf if end_s is None else end_s
    begin = memory["time_s"]
    end = begin + memory["duration_s"]
    overlap = np.clip(np.minimum(end, hi) - np.maximum(begin, lo), 0, None)
    keep = overlap > 0
    out = {name: values[keep] for name, values in memory.items()}
    out["duration_s"] = overlap[keep]
    if "full_s" in memory:  # a row cut by the window keeps its share of full seconds
        duration = memory["duration_s"][keep]
        share = np.divide(overlap[keep], duration, out=np.ones_like(duration), where=duration > 0)
        out["full_s"] = memory["full_s"][keep] * share
    return out, keep


def weighted_sum(values: npt.ArrayLike, weights: npt.ArrayLike) -> float:
    """``sum(values * weights)`` by numpy's pairwise summation: the same bits on every machine
    and at any memory address (a BLAS dot product's order of additions depends on both, which
    changed shares in their last bit from one process to another)."""
    return float(np.multiply(values, weights, dtype=np.float64).sum())


# the summary metrics memory_shares adds beside each category's shares: absent from a run that
# records no memory rows (record_memory = false)
_MEMORY_METRICS = frozenset(
    {
        "kv_cache_usage_perc",
        "kv_cache_usage_perc_max",
        "kv_cache_full_time_frac",
        "token_utilization_perc",
        "kv_saved_by_sharing_pct",
        "num_requests_running_mean",
        "num_requests_waiting_mean",
    }
)


def is_memory_metric(name: str) -> bool:
    """Whether the summary metric ``name`` comes from the memory rows (``memory_shares``): a
    category's share of KV or of used KV, the usage, the running and waiting means."""
    shares = {f"{c}_pct" for c in CATEGORIES} | {f"{c}_pct_of_used" for c in CATEGORIES}
    return name in _MEMORY_METRICS or name in shares


def memory_shares(
    memory: pd.DataFrame | Columns, capacity_slots: int, usable_capacity_slots: int | None = None
) -> dict[str, float]:
    """Time-weighted mean slots per category, as % of capacity and % of used slots.

    Args:
        memory: the memory time series (a DataFrame, or its columns as arrays).
        usable_capacity_slots: slots requests can hold (capacity minus a paged pool's remainder
            and null block); the capacity when ``None``.
    """
    memory = _columns(memory)
    w = memory["duration_s"]
    total_s = float(w.sum())
    out: dict[str, float] = {}
    if total_s <= 0:
        return out
    means = {c: weighted_sum(memory[c], w) / total_s for c in (*CATEGORIES, "allocated")}
    used = capacity_slots - means["free"]
    for c in CATEGORIES:
        out[f"{c}_pct"] = 100.0 * means[c] / capacity_slots
        if c != "free":
            out[f"{c}_pct_of_used"] = 100.0 * means[c] / used if used > 0 else float("nan")
    usable = usable_capacity_slots or capacity_slots
    unusable = capacity_slots - usable
    # A row of a span of steps holds each column's duration-weighted mean over its steps
    # (``MemoryRecorder.record``): the weights d / total add up to 1 only
    # to the last bit, so a span full at every step can come out at capacity + 1e-12 (usage
    # 1.0000000000000002). Every step holds between 0 and ``usable`` slots, so a row's exact
    # usage lies in [0, 1]: the clip undoes that rounding and nothing else.
    usage = np.clip((memory["allocated"] - unusable) / usable, 0.0, 1.0)
    out["kv_cache_usage_perc"] = weighted_sum(usage, w) / total_s
    # the peak and the time full, from each row's steps (a row's mean hides a span's full
    # steps); a row that a summary window cuts keeps its peak and its full seconds pro rata
    if "full_s" in memory:
        peak = np.clip((memory["allocated_max"] - unusable) / usable, 0.0, 1.0)
        out["kv_cache_usage_perc_max"] = float(peak.max())
        out["kv_cache_full_time_frac"] = float(memory["full_s"].sum() / total_s)
    else:  # (a memory table written before kvsim recorded them)
        out["kv_cache_usage_perc_max"] = float(usage.max())
        out["kv_cache_full_time_frac"] = float(w[usage >= FULL_USAGE].sum() / total_s)
    alloc = means["allocated"] - unusable  # (as the usage: no request holds the null block)
    out["token_utilization_perc"] = 100.0 * means["token_states"] / alloc if alloc else float("nan")
    if "unshared" in memory:  # Figure 15: blocks saved by sharing / blocks without sharing
        unshared = weighted_sum(memory["unshared"], w) / total_s
        held = weighted_sum(memory["held"], w) / total_s
        out["kv_saved_by_sharing_pct"] = 100.0 * (1 - held / unshared) if unshared else 0.0
    for gauge in ("num_requests_running", "num_requests_waiting"):
        out[f"{gauge}_mean"] = weighted_sum(memory[gauge], w) / total_s
    return out


def mean_batched_requests(
    memory: pd.DataFrame | Columns,
    start_s: float | None = None,
    end_s: float | None = None,
    *,
    per: str = "step",
) -> float:
    """Mean number of requests in the running batch over ``[start_s, end_s)`` (seconds).

    Args:
        memory: the memory time series (``recorder.MEMORY_COLUMNS``; a DataFrame, or its
            columns as arrays).
        start_s, end_s: window in simulated seconds (whole run when ``None``).
        per: ``"step"`` averages over engine iterations (what a serving system logs per step and,
            we assume, the PagedAttention paper's Figure 13 reports); ``"time"`` weights each
            step by its duration.

    Returns:
        The mean batch size (requests), ``nan`` when the window holds no step.
    """
    if per not in ("step", "time"):
        raise ValueError(f"per: expected 'step' or 'time', got {per!r}")
    memory = _columns(memory)
    window, keep = _clip(memory, start_s, end_s)
    if per == "time":
        weight = window["duration_s"]
    else:  # steps of a span are spread evenly over it; a clipped span keeps its share of steps
        full = memory["duration_s"] if keep is None else memory["duration_s"][keep]
        share = np.divide(window["duration_s"], full, out=np.ones_like(full), where=full > 0)
        weight = window["num_steps"] * share
    total = float(weight.sum())
    if total <= 0:
        return float("nan")
    return weighted_sum(window["num_requests_running"], weight) / total


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


def latency_stats(requests: pd.DataFrame | Columns) -> dict[str, float]:
    """Mean and p50/p90/p95/p99 of each of ``LATENCY_METRICS`` (seconds), over requests, and the
    token-weighted mean inter-token latency."""
    requests = _columns(requests)
    out: dict[str, float] = {}
    for col in LATENCY_METRICS:
        if col not in requests:
            continue
        values = _skipna(requests[col])
        if len(values) == 0:
            continue
        out[f"{col}_mean"] = float(values.mean())
        for q in (50, 90, 95, 99):
            out[f"{col}_p{q}"] = float(np.percentile(values, q))
    if "output_tokens" not in requests or "request_decode_time_seconds" not in requests:
        return out
    gaps = float(output_gaps(requests).sum())
    if gaps > 0:
        decode_s = float(_sum(requests["request_decode_time_seconds"]))
        out["inter_token_latency_seconds_mean"] = decode_s / gaps
    return out


def samples(requests: pd.DataFrame | Columns) -> npt.NDArray[np.int64]:
    """Each row's ``n``: the samples a vLLM v0 sequence group returns to its client; 1 for any
    other row (a v1 sample; a table written before the column: every row)."""
    requests = _columns(requests)
    if "n" in requests:
        return np.asarray(requests["n"], dtype=np.int64)
    return np.ones(len(requests["output_tokens"]), dtype=np.int64)


def sequences(requests: pd.DataFrame | Columns) -> npt.NDArray[np.int64]:
    """Sequences each row ran, each of ``output_tokens`` tokens: a vLLM v0 sequence group's
    ``max(n, beam_width)`` (a beam search's candidates), 1 for any other row."""
    requests = _columns(requests)
    width = np.asarray(requests.get("beam_width", 1), dtype=np.int64)
    return np.maximum(samples(requests), width)


def client_of(requests: pd.DataFrame | Columns) -> npt.NDArray[np.int64]:
    """Each row's client request as an index ``0 .. clients - 1`` (``vllm bench serve``'s
    requests): a vLLM v1 request of ``n > 1`` is its samples' rows, those sharing its
    ``parent_id``; any other row is one (a v0 sequence group, all its samples; every row of a
    table without the column)."""
    requests = _columns(requests)
    rows = _num_rows(requests)
    if "parent_id" not in requests:
        return np.arange(rows, dtype=np.int64)
    column = requests["parent_id"]  # (a run's: masked where no parent; a table's: NaN or NA)
    if isinstance(column, np.ma.MaskedArray):
        alone = np.ma.getmaskarray(column)
        values = np.asarray(column.data, dtype=np.float64)
    else:
        import pandas as pd  # (the tables' own library: reading them, it is loaded)

        alone = np.asarray(pd.isna(column), dtype=np.bool_)
        values = np.zeros(len(alone), dtype=np.float64)
        values[~alone] = np.asarray(column, dtype=object)[~alone].astype(np.float64)
    # a sample is keyed by its parent, a row alone by itself (parents and rows kept apart)
    keys = np.where(alone, -1.0 - np.arange(rows), values)
    _, index = np.unique(keys, return_inverse=True)
    return np.asarray(index, dtype=np.int64).reshape(rows)


def client_request_count(requests: pd.DataFrame | Columns) -> int:
    """Requests as their clients sent them (``client_of``)."""
    index = client_of(requests)
    return int(index.max()) + 1 if index.size else 0


def generated_tokens(requests: pd.DataFrame | Columns) -> int:
    """Tokens the engine generated: every sequence's (vLLM counts each beam candidate's in
    ``generation_tokens``)."""
    requests = _columns(requests)
    output = np.asarray(requests["output_tokens"], dtype=np.int64)
    return int(np.sum(output * sequences(requests)))


def output_tokens(requests: pd.DataFrame | Columns) -> int:
    """Tokens the clients received: each row's ``output_tokens`` times its ``n`` (a v0 group's
    samples; a beam search returns its ``n`` best beams, not every candidate)."""
    requests = _columns(requests)
    output = np.asarray(requests["output_tokens"], dtype=np.int64)
    return int(np.sum(output * samples(requests)))


def output_gaps(requests: pd.DataFrame | Columns) -> npt.NDArray[np.int64]:
    """vLLM's inter-token latency observations per request: one for each step after the first
    that returned its tokens (vLLM 0.34.0 ``IterationStats``, ``vllm/v1/metrics/stats.py``: a
    verification returning several tokens is one), so ``output_tokens - 1 - num_draft_outputs``
    (a table without that column, written before it, counts no drafts); 0 for a request that
    did not run (no decode time)."""
    requests = _columns(requests)
    gaps = np.asarray(requests["output_tokens"], dtype=np.int64) - 1
    if "num_draft_outputs" in requests:
        gaps = gaps - np.asarray(requests["num_draft_outputs"], dtype=np.int64)
    ran = ~np.isnan(np.asarray(requests["request_decode_time_seconds"], dtype=np.float64))
    out: npt.NDArray[np.int64] = np.where(ran, np.maximum(gaps, 0), 0)
    return out


def summarize(
    memory: pd.DataFrame | Columns,
    requests: pd.DataFrame | Columns,
    *,
    capacity_slots: int,
    usable_capacity_slots: int | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
) -> dict[str, Any]:
    """All scalar metrics of a run, memory ones over ``[start_s, end_s)``.

    Args:
        memory: the memory time series (``recorder.MEMORY_COLUMNS``; a DataFrame, or its
            columns as arrays).
        requests: per-request records (``results.request_frame``, or its columns as arrays).
        capacity_slots: KV pool size in token slots.
        usable_capacity_slots: slots requests can hold (``kv_cache_usage_perc``'s denominator).
        start_s, end_s: measurement window in simulated seconds (whole run when None).
    """
    memory, requests = _columns(memory), _columns(requests)
    window, _ = _clip(memory, start_s, end_s)
    out: dict[str, Any] = memory_shares(window, capacity_slots, usable_capacity_slots)
    # the batch as a serving system logs it: one sample per engine step (Figure 13's view)
    out["num_requests_running_step_mean"] = mean_batched_requests(memory, start_s, end_s)
    # a peak follows the window, as kv_cache_usage_perc_max does; the step counts below are
    # counters of the whole run, as num_preemptions is
    out["num_requests_running_max"] = (
        int(_max(window["num_requests_running"])) if _num_rows(window) else 0
    )
    out["num_steps"] = int(_sum(memory["num_steps"]))
    out["num_blocked_steps"] = int(_sum(memory["num_blocked_steps"]))
    makespan = float(_max(requests["finish_time_s"]) - _min(requests["arrival_time_s"]))
    num_requests = _num_rows(requests)
    out["num_requests"] = num_requests
    out["prompt_tokens_total"] = int(_sum(requests["prompt_tokens"]))
    out["generation_tokens_total"] = generated_tokens(requests)
    out["prefix_cached_tokens_total"] = int(_sum(requests["num_cached_tokens"]))
    out["duration_s"] = makespan
    clients = client_request_count(requests)
    out["throughput_requests_per_s"] = clients / makespan if makespan > 0 else float("nan")
    out["throughput_output_tokens_per_s"] = (
        output_tokens(requests) / makespan if makespan > 0 else float("nan")
    )
    out.update(latency_stats(requests))
    return out


def warn_empty_window(
    summary: dict[str, Any],
    run_shares: dict[str, float],
    window_s: tuple[float, float],
    first_s: float,
) -> None:
    """Say which metrics an ``arrivals`` window without an engine step left out, and why.

    Args:
        summary: the run's summary (metrics over the window).
        run_shares: ``memory_shares`` over the whole run: the metrics the window lacks.
        window_s: the window ``[start, end)``, simulated seconds (its end is the last arrival).
        first_s: the first arrival, simulated seconds.
    """
    missing = [k for k in run_shares if k not in summary]
    if not missing:  # nothing recorded (record_memory = false): nothing was lost to the window
        return
    start_s, last_s = window_s
    logger.warning(
        "summary_window = 'arrivals': the window from 10 %% into the arrivals to the last one, "
        "[%g, %g) s, holds no engine step (%s arriving from %g to %g s); %d KV-memory "
        "metrics are left out of the summary (%s) and num_requests_running_step_mean is null; "
        "summary_window = 'run' measures the whole run",
        start_s,
        last_s,
        plural(summary["num_requests"], "request"),
        first_s,
        last_s,
        len(missing),
        ", ".join(missing),
    )
