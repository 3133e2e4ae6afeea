"""Synthetic arrival processes: Poisson and gamma-renewal (bursty) inter-arrival times.

Arrival ``i`` happens after the first ``i`` inter-arrival gaps, so the first request arrives at
0 s (as in vLLM's serving benchmark). Gamma gaps with coefficient of variation ``cv`` have shape
``k = 1 / cv**2`` and scale ``cv**2 / rate``: mean ``1 / rate`` s, std ``cv / rate`` s; ``cv = 1``
is the exponential, i.e. Poisson arrivals, and ``cv > 1`` is burstier.
"""

from __future__ import annotations

import math

import numpy as np

from kvsim.base.limits import MAX_NUM_REQUESTS

_CHUNK = 4096


def inter_arrival_gaps(
    rng: np.random.Generator, rate_per_s: float, cv: float, size: int
) -> np.ndarray:
    """Draw inter-arrival gaps of a gamma renewal process.

    Args:
        rng: source of randomness.
        rate_per_s: mean arrival rate in requests per second (> 0).
        cv: coefficient of variation of the gaps (> 0); 1.0 draws exponential gaps (Poisson).
        size: number of gaps.

    Returns:
        float64[size] gaps in seconds.
    """
    if not rate_per_s > 0:
        raise ValueError(f"rate_per_s must be > 0 requests/s, got {rate_per_s!r}")
    if not cv > 0:
        raise ValueError(f"cv must be > 0, got {cv!r}")
    if not math.isfinite(1.0 / rate_per_s):
        raise ValueError(f"rate_per_s: a mean gap of 1 / {rate_per_s!r} s is not a finite number")
    if cv == 1.0:
        return rng.exponential(scale=1.0 / rate_per_s, size=size)
    shape = 1.0 / cv**2
    return rng.gamma(shape=shape, scale=cv**2 / rate_per_s, size=size)


def arrival_times(
    rng: np.random.Generator,
    rate_per_s: float,
    cv: float,
    *,
    num_requests: int | None,
    duration_s: float | None,
) -> np.ndarray:
    """Arrival times of a renewal process starting with an arrival at 0 s.

    Args:
        rng: source of randomness.
        rate_per_s: mean arrival rate in requests per second (> 0).
        cv: coefficient of variation of the gaps (1.0 for Poisson).
        num_requests: at most this many arrivals, or ``None`` for no count limit.
        duration_s: keep arrivals strictly before this time in seconds, or ``None``.

    Returns:
        float64[n] non-decreasing arrival times in seconds, ``n <= num_requests``.

    Raises:
        ValueError: both limits are ``None`` (the process would never end), ``duration_s`` is
            not finite, or the window holds more than ``kvsim.base.limits.MAX_NUM_REQUESTS``.
    """
    if num_requests is None and duration_s is None:
        raise ValueError("arrival_times needs num_requests or duration_s (got neither)")
    if num_requests is not None:
        gaps = inter_arrival_gaps(rng, rate_per_s, cv, max(num_requests - 1, 0))
        times = np.concatenate(([0.0], np.cumsum(gaps)))[:num_requests]
        return times if duration_s is None else times[times < duration_s]
    assert duration_s is not None
    if not math.isfinite(duration_s):
        raise ValueError(f"duration_s must be a finite number of seconds, got {duration_s!r}")
    chunks = [np.zeros(1)]
    last_s = 0.0
    num_drawn = 1
    while last_s < duration_s:
        if num_drawn > MAX_NUM_REQUESTS:
            raise ValueError(
                f"duration_s = {duration_s:g} s at {rate_per_s:g} requests/s holds more than "
                f"{MAX_NUM_REQUESTS:,} arrivals (the most one run holds); set num_requests"
            )
        chunk = last_s + np.cumsum(inter_arrival_gaps(rng, rate_per_s, cv, _CHUNK))
        chunks.append(chunk)
        num_drawn += _CHUNK
        last_s = float(chunk[-1])
    times = np.concatenate(chunks)
    return times[times < duration_s]
