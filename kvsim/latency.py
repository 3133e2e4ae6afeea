"""Request-rate sweeps: latency against offered load, and where normalised latency explodes.

The PagedAttention paper (Fig. 12) plots mean normalised latency (E2E seconds per output token)
against the request rate; a system sustains a rate while the latency stays near its low-load
value and "explodes" once the queue grows without bound. ``sustainable_rate`` finds that knee by
bisection: the highest rate whose mean normalised latency stays below ``factor`` times the
latency at a low baseline rate. Same seed at every rate, so arrivals only stretch or compress.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from kvsim.config import SimConfig
from kvsim.engine import simulate

logger = logging.getLogger(__name__)

SWEEP_COLUMNS = (
    "rate_per_s",
    "normalized_latency_seconds_mean",
    "normalized_latency_seconds_p50",
    "normalized_latency_seconds_p99",
    "time_to_first_token_seconds_mean",
    "request_time_per_output_token_seconds_mean",
    "e2e_request_latency_seconds_mean",
    "throughput_requests_per_s",
    "throughput_output_tokens_per_s",
    "num_requests_running_mean",
    "num_preemptions",
)


def with_rate(config: SimConfig, rate_per_s: float) -> SimConfig:
    """``config`` with Poisson/gamma arrivals at ``rate_per_s`` requests/s."""
    workload = config.workload.model_copy(update={"rate_per_s": float(rate_per_s)})
    return config.model_copy(update={"workload": workload})


def run_at_rate(config: SimConfig, rate_per_s: float) -> dict[str, Any]:
    """Simulate ``config`` at one rate; the ``SWEEP_COLUMNS`` of its summary."""
    summary = simulate(with_rate(config, rate_per_s)).summary
    row: dict[str, Any] = {"rate_per_s": float(rate_per_s)}
    for col in SWEEP_COLUMNS[1:]:
        row[col] = summary.get(col, float("nan"))
    return row


def rate_sweep(config: SimConfig, rates_per_s: Sequence[float]) -> pd.DataFrame:
    """One row per rate (requests/s): latency, throughput and batch columns (``SWEEP_COLUMNS``)."""
    return pd.DataFrame([run_at_rate(config, r) for r in rates_per_s], columns=list(SWEEP_COLUMNS))


def explosion_rate(
    sweep: pd.DataFrame, *, factor: float = 4.0, threshold_s: float | None = None
) -> float:
    """Rate (requests/s) at which mean normalised latency first crosses the threshold.

    Args:
        sweep: a ``rate_sweep`` frame.
        factor: threshold = ``factor`` x the latency at the lowest rate (if no ``threshold_s``).
        threshold_s: explicit threshold in seconds per output token.

    Returns:
        The crossing, interpolated linearly between the two rates around it; the lowest rate if
        it is already above, ``inf`` if no rate crosses.
    """
    df = sweep.sort_values("rate_per_s")
    rates = df["rate_per_s"].to_numpy()
    lat = df["normalized_latency_seconds_mean"].to_numpy()
    limit = threshold_s if threshold_s is not None else factor * lat[0]
    above = np.flatnonzero(lat > limit)
    if above.size == 0:
        return math.inf
    i = int(above[0])
    if i == 0:
        return float(rates[0])
    frac = (limit - lat[i - 1]) / (lat[i] - lat[i - 1])
    return float(rates[i - 1] + frac * (rates[i] - rates[i - 1]))


def sustainable_rate(
    config: SimConfig,
    *,
    lo_per_s: float,
    hi_per_s: float,
    factor: float = 4.0,
    baseline_per_s: float | None = None,
    iterations: int = 10,
) -> float:
    """Highest rate whose mean normalised latency stays below ``factor`` x the low-load latency.

    Geometric bisection between ``lo_per_s`` (must be sustainable) and ``hi_per_s`` (must not).

    Args:
        config: the run; its workload's rate is replaced.
        lo_per_s, hi_per_s: bracketing rates, requests/s.
        factor: explosion threshold relative to the baseline latency.
        baseline_per_s: rate of the low-load baseline (default ``lo_per_s / 4``).
        iterations: bisection steps (the bracket shrinks by sqrt each time).

    Raises:
        ValueError: the bracket does not straddle the threshold.
    """
    base = run_at_rate(config, baseline_per_s or lo_per_s / 4)["normalized_latency_seconds_mean"]
    limit = factor * base

    def ok(rate: float) -> bool:
        return bool(run_at_rate(config, rate)["normalized_latency_seconds_mean"] <= limit)

    if not ok(lo_per_s) or ok(hi_per_s):
        raise ValueError(
            f"sustainable_rate: [{lo_per_s}, {hi_per_s}] req/s does not bracket the "
            f"explosion (threshold {limit:.4f} s/token)"
        )
    lo, hi = lo_per_s, hi_per_s
    for _ in range(iterations):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    logger.info("sustainable rate in [%.3f, %.3f] req/s (threshold %.4f s/token)", lo, hi, limit)
    return lo
