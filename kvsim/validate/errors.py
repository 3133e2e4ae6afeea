"""Errors of a replay against its measurements: per load stage, per metric and statistic.

The error of a statistic is ``100 * (predicted - measured) / measured`` (percent; positive: kvsim
predicts longer), each side computed over the same requests (those measured: a run's
``has_error`` requests are in neither). Statistics: ``mean``, ``p50``, ``p90``, ``p99``
(``numpy.percentile``, linear interpolation, as the load generators report them).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvsim.validate.replay import METRICS, Replay

STATISTICS = ("mean", "p50", "p90", "p99")
ALL_STAGES = -1  # the stage index of a run's aggregate over every stage (the peers' "-1")


def statistic(values: np.ndarray, name: str) -> float:
    """``mean`` or ``pNN`` of ``values`` (NaN when empty)."""
    values = values[np.isfinite(values)]
    if not len(values):
        return float("nan")
    if name == "mean":
        return float(values.mean())
    return float(np.percentile(values, float(name[1:])))


def stage_errors(replay: Replay, *, whole_run: bool = True) -> pd.DataFrame:
    """One row per (stage, metric, statistic): ``measured``, ``predicted`` (seconds) and
    ``error_pct``; with ``whole_run``, also the aggregate over every stage (stage ``-1``)."""
    frame = replay.requests
    groups: list[tuple[int, pd.DataFrame]] = [(int(k), g) for k, g in frame.groupby("stage")]
    if whole_run and len(groups) > 1:
        groups.append((ALL_STAGES, frame))
    rows = []
    for stage, group in groups:
        for metric in METRICS:
            measured_values = group[f"measured_{metric}"].to_numpy(dtype=float)
            predicted_values = group[f"predicted_{metric}"].to_numpy(dtype=float)
            if not np.isfinite(measured_values).any():
                continue
            for name in STATISTICS:
                measured = statistic(measured_values, name)
                predicted = statistic(predicted_values, name)
                rows.append(
                    {
                        "experiment": replay.run.name,
                        "split": replay.run.split,
                        "stage": stage,
                        "num_requests": len(group),
                        "metric": metric,
                        "statistic": name,
                        "measured": measured,
                        "predicted": predicted,
                        "error_pct": 100.0 * (predicted - measured) / measured
                        if measured
                        else float("nan"),
                    }
                )
    return pd.DataFrame(rows)


def kv_usage_error(replay: Replay) -> dict[str, float] | None:
    """kvsim's KV usage beside vLLM's ``kv_cache_pct``: mean absolute difference (points) over
    the logged moments while requests were in the system, and the means of both; ``None`` when
    the run logged none."""
    usage = replay.kv_usage
    if usage is None:
        return None
    busy = usage[(usage["running"] + usage["waiting"]) > 0]
    diff = (busy["predicted_kv_pct"] - busy["kv_cache_pct"]).abs()
    return {
        "kv_mean_abs_diff_points": float(diff.mean()),
        "kv_measured_mean_pct": float(busy["kv_cache_pct"].mean()),
        "kv_predicted_mean_pct": float(busy["predicted_kv_pct"].mean()),
        "num_samples": float(len(busy)),
    }
