"""The summary metrics a plan's targets may bound."""

from __future__ import annotations

from kvsim.results.metrics import LATENCY_METRICS
from kvsim.view.summary import SECTIONS


def target_metrics() -> list[str]:
    """Summary metrics a target may bound: each latency metric's mean/p50/p90/p95/p99 (seconds),
    ``inter_token_latency_seconds_mean``, and every metric the printed summary has a row for
    (``kvsim.view.summary.SECTIONS``: KV shares and usage, scheduler and preemption counts,
    prefix-cache hits, re-admission hits and evictions, sharing, swap, speculative decoding's
    and the CPU tier's counters, throughput; not a hybrid run's per-group rows). A metric
    shown to people can be bounded, and a name no summary holds is refused as a typo (not
    accepted, and then never met)."""
    stats = ("mean", "p50", "p90", "p95", "p99")
    names = [
        *(f"{m}_{s}" for m in LATENCY_METRICS for s in stats),
        "inter_token_latency_seconds_mean",
        *(key for _, rows, _ in SECTIONS for key, _ in rows),
    ]
    return list(dict.fromkeys(names))
