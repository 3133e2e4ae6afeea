"""Figures of a replay against a measured vLLM run (``kvsim validate``): they take DataFrames and
return a ``Figure``.

``replay_figure``: measured against predicted TTFT and E2E per request (a dot each, the line of
equality), the distributions of both (CDFs), and, when the run logged it, vLLM's KV usage over
time beside kvsim's.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from kvsim.view.style import styled

MEASURED_COLOR = "#264653"
PREDICTED_COLOR = "#e76f51"


@styled
def replay_figure(
    requests: pd.DataFrame, kv_usage: pd.DataFrame | None = None, *, title: str = ""
) -> Figure:
    """Measured vs predicted latency per request, their CDFs, and KV usage over time.

    Args:
        requests: one row per request with ``measured_ttft_s``, ``predicted_ttft_s``,
            ``measured_e2e_s``, ``predicted_e2e_s`` (seconds).
        kv_usage: ``time_s``, vLLM's ``kv_cache_pct`` and kvsim's ``predicted_kv_pct``
            (percent), or ``None``.
        title: the figure's title (the run's name).
    """
    rows = 3 if kv_usage is not None else 2
    fig = Figure(figsize=(10, 3.2 * rows), layout="constrained")
    axes = fig.subplots(rows, 2, squeeze=False)
    for column, metric in enumerate(("ttft_s", "e2e_s")):
        measured = requests[f"measured_{metric}"].to_numpy(dtype=float)
        predicted = requests[f"predicted_{metric}"].to_numpy(dtype=float)
        name = "TTFT" if metric == "ttft_s" else "E2E latency"
        _scatter(axes[0][column], measured, predicted, name)
        _cdfs(axes[1][column], measured, predicted, name)
    if kv_usage is not None:
        grid = axes[2][0].get_gridspec()
        for ax in axes[2]:
            ax.remove()
        _kv_usage(fig.add_subplot(grid[2, :]), kv_usage)
    if title:
        fig.suptitle(title)
    return fig


def _scatter(ax: Axes, measured: np.ndarray, predicted: np.ndarray, name: str) -> None:
    ok = np.isfinite(measured) & np.isfinite(predicted)
    ax.scatter(measured[ok], predicted[ok], s=4, alpha=0.35, color=PREDICTED_COLOR, lw=0)
    if ok.any():
        low = float(min(measured[ok].min(), predicted[ok].min()))
        high = float(max(measured[ok].max(), predicted[ok].max()))
        ax.plot([low, high], [low, high], color=MEASURED_COLOR, lw=1, label="predicted = measured")
        if low > 0 and high / low > 20:
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.legend(loc="upper left", fontsize="small")
    ax.set_xlabel(f"measured {name} (s)")
    ax.set_ylabel(f"kvsim's {name} (s)")
    ax.set_title(f"{name} per request")


def _cdfs(ax: Axes, measured: np.ndarray, predicted: np.ndarray, name: str) -> None:
    for values, label, color in (
        (measured, "measured (vLLM)", MEASURED_COLOR),
        (predicted, "kvsim", PREDICTED_COLOR),
    ):
        values = np.sort(values[np.isfinite(values)])
        if len(values):
            ax.step(
                values,
                np.arange(1, len(values) + 1) / len(values),
                where="post",
                color=color,
                label=label,
            )
    ax.set_xlabel(f"{name} (s)")
    ax.set_ylabel("share of requests")
    ax.set_ylim(0, 1.02)
    ax.legend(loc="lower right", fontsize="small")
    ax.set_title(f"{name}: distribution")


def _kv_usage(ax: Axes, usage: pd.DataFrame) -> None:
    t = usage["time_s"].to_numpy(dtype=float)
    ax.plot(t, usage["kv_cache_pct"], color=MEASURED_COLOR, label="vLLM kv_cache_pct")
    ax.plot(t, usage["predicted_kv_pct"], color=PREDICTED_COLOR, label="kvsim (same moments)")
    ax.set_xlabel("time since the first request (s)")
    ax.set_ylabel("KV cache usage (%)")
    ax.set_ylim(0, 105)
    ax.legend(loc="lower center", fontsize="small")
    ax.set_title("KV usage over time")
