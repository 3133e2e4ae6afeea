"""A fleet's figures, from summary tables only: metrics by point (routers, prefill/decode splits)
and the cost frontier of a cheapest-fleet plan.

Each function takes a DataFrame and returns a ``Figure`` (``kvsim.view.plots``' conventions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter

from kvsim.view.labels import axis_label, wrap_label
from kvsim.view.style import styled

GPU_COLORS = ("#264653", "#2a9d8f", "#e76f51", "#e9c46a", "#8d99ae", "#6a4c93")


@styled
def point_bars(
    table: pd.DataFrame, labels: Sequence[str], metrics: Sequence[str], *, title: str = ""
) -> Figure:
    """One panel per metric, one bar per row (a router, a split), the value written on it.

    Args:
        table: summary rows with each of ``metrics``.
        labels: a name per row (the bars' tick labels).
        metrics: summary columns, one panel each (at least one).
        title: figure title.

    A NaN value is not measured (a hit rate with no lookup, a latency with no finished
    request): its row gets no bar, and "n/a" where the bar would stand, never a 0.
    """
    cols = min(3, len(metrics))
    rows = -(-len(metrics) // cols)
    fig = Figure(figsize=(4.2 * cols + 0.5, 3.9 * rows), layout="constrained")
    grid = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax in grid[len(metrics) :]:
        ax.set_visible(False)
    axes = grid[: len(metrics)]
    xs = np.arange(len(table))
    for ax, metric in zip(axes, metrics, strict=True):
        values = table[metric].to_numpy(dtype=float)
        known = ~np.isnan(values)
        bars = ax.bar(xs[known], values[known], color="#2a9d8f")
        size = "x-small" if len(values) <= 6 else "xx-small"
        ax.bar_label(bars, labels=[f"{v:.3g}" for v in values[known]], fontsize=size)
        for x in xs[~known]:
            ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=size, color="0.35")
        ax.set_xlim(-0.6, len(xs) - 0.4)  # (a row with no bar keeps its place at either end)
        ax.set_xticks(xs, list(labels), rotation=30, ha="right", fontsize="small")
        ax.set_ylabel(wrap_label(axis_label(metric), 30))
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(title)
    return fig


class _PlainLog(LogFormatter):
    """A log axis's ticks as plain numbers (0.04, 4, 40: not 4e-02 or 4 x 10^0), labelled where
    matplotlib's ``LogFormatter`` would label them."""

    def __call__(self, x: float, pos: int | None = None) -> str:
        return f"{x:g}" if super().__call__(x, pos) else ""


@styled
def cost_frontier(
    points: pd.DataFrame,
    targets: Mapping[str, float],
    *,
    cheapest: int | None = None,
    title: str = "",
) -> Figure:
    """Every fleet a plan tried: its price per hour against each targeted metric.

    Args:
        points: one row per fleet with ``usd_per_hour``, ``gpu``, ``meets`` (bool), a
            ``fleet`` name and each metric of ``targets``.
        targets: metric -> bound (one panel each, the bound a dashed line).
        cheapest: the row of the answer (ringed), or ``None``.
        title: figure title.

    Fleets that meet every target are filled, the others hollow; the step line is the
    frontier: the best value of the metric reachable at each price among the fleets that meet
    every target.
    """
    metrics = list(targets)
    fig = Figure(figsize=(5.2 * len(metrics) + 1.8, 4.2), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    gpus = list(dict.fromkeys(points["gpu"]))
    for ax, metric in zip(axes, metrics, strict=True):
        for i, gpu in enumerate(gpus):
            color = GPU_COLORS[i % len(GPU_COLORS)]
            rows = points[points["gpu"] == gpu]
            good, bad = rows[rows["meets"]], rows[~rows["meets"]]
            if len(good):  # (a legend entry for points drawn only)
                ax.scatter(good["usd_per_hour"], good[metric], color=color, label=f"{gpu} (meets)")
            if len(bad):
                ax.scatter(
                    bad["usd_per_hour"], bad[metric], facecolors="none", edgecolors=color, label=gpu
                )
        meeting = points[points["meets"]].sort_values("usd_per_hour")
        if len(meeting):
            best = np.minimum.accumulate(meeting[metric].to_numpy(dtype=float))
            ax.step(
                meeting["usd_per_hour"],
                best,
                where="post",
                color="#444444",
                lw=1,
                label="the best of the fleets meeting every target, at that price or less",
            )
        ax.axhline(targets[metric], color="#444444", ls="--", lw=1.2)
        if cheapest is not None:
            row = points.loc[cheapest]
            ax.scatter(
                [row["usd_per_hour"]], [row[metric]], s=260, facecolors="none", edgecolors="k"
            )
            ax.annotate(
                str(row["fleet"]),
                (row["usd_per_hour"], row[metric]),
                textcoords="offset points",
                xytext=(8, 8),
                fontsize="small",
            )
        ax.set_xscale("log")
        values = points[metric].to_numpy(dtype=float)
        finite = values[np.isfinite(values) & (values > 0)]
        if len(finite) and finite.max() / finite.min() >= 8:
            ax.set_yscale("log")
        for axis in (ax.xaxis, ax.yaxis):  # plain numbers on log axes: 4, not 4 x 10^0
            if axis.get_scale() == "log":  # (minor ones labelled within a decade only)
                axis.set_major_formatter(_PlainLog(labelOnlyBase=False))
                axis.set_minor_formatter(_PlainLog(labelOnlyBase=False, minor_thresholds=(1, 0.4)))
        ax.set(xlabel="fleet price (USD per hour)", ylabel=wrap_label(axis_label(metric), 30))
        ax.grid(alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    # (below the panels: beside them, the title ran into it)
    fig.legend(
        handles, names, loc="outside lower center", ncol=min(len(names), 4) or 1, fontsize="small"
    )
    fig.suptitle(title)
    return fig
