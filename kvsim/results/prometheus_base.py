"""What every family of the Prometheus snapshot shares: vLLM's base label names and histograms
built from observed values (``kvsim.results.prometheus``)."""

from __future__ import annotations

import numpy as np
from prometheus_client.core import HistogramMetricFamily

from kvsim.results.metrics import weighted_sum

LABELS = ("model_name", "engine")  # vLLM's labelnames; engine: a fleet's replica index, or "0"


def observations(counts: dict[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """``counts`` (value -> times observed) as float64 values and weights, for
    ``histogram_family`` or ``add_histogram``."""
    values = np.fromiter(counts.keys(), dtype=np.float64, count=len(counts))
    weights = np.fromiter(counts.values(), dtype=np.float64, count=len(counts))
    return values, weights


def histogram_family(
    name: str,
    doc: str,
    labels: list[str],
    buckets: tuple[float, ...],
    values: np.ndarray,
    weights: np.ndarray,
) -> HistogramMetricFamily:
    """A histogram family ``vllm:<name>`` under ``LABELS`` (``labels``: their values) of
    ``values`` observed ``weights`` times each (float64 arrays)."""
    family = HistogramMetricFamily(f"vllm:{name}", doc, labels=LABELS)
    add_histogram(family, labels, buckets, values, weights)
    return family


def add_histogram(
    family: HistogramMetricFamily,
    labels: list[str],
    buckets: tuple[float, ...],
    values: np.ndarray,
    weights: np.ndarray,
) -> None:
    """Add to ``family`` one sample set, labelled ``labels``, of ``values`` observed
    ``weights`` times each: a bucket counts the observations at most its bound (``le``)."""
    edges = np.asarray(buckets, dtype=np.float64)
    index = np.searchsorted(edges, values, side="left")  # first bucket with value <= le
    counts = np.bincount(index, weights=weights, minlength=edges.size + 1)
    cumulative = np.cumsum(counts)
    # le labels as prometheus_client's Histogram writes them (Python repr of the float bound)
    rows = [(repr(float(le)), float(c)) for le, c in zip(buckets, cumulative[:-1], strict=True)]
    rows.append(("+Inf", float(cumulative[-1])))
    family.add_metric(labels, rows, weighted_sum(values, weights))
