"""The report's plotly charts: memory over time per run, latency ECDFs over all runs.

Figures take the report's ``Run`` records and return ``plotly.graph_objects.Figure``; the page
draws them with the plotly.js the ``plotly`` package ships (inlined, no network) and moves a
cursor over the memory charts as the map's time slider moves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from kvsim.view.offload_plots import TierAxes, tiers_in
from kvsim.view.plots import CATEGORY_COLORS, CATEGORY_NAMES
from kvsim.view.report.data import Run, ecdf_points, memory_bins

LATENCIES = {
    "time_to_first_token_seconds": "TTFT (s)",
    "request_time_per_output_token_seconds": "TPOT (s)",
    "e2e_request_latency_seconds": "E2E latency (s)",
}
RUN_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#17becf")
LAYOUT = {
    "template": "plotly_white",
    "margin": {"l": 60, "r": 10, "t": 30, "b": 40},
    "font": {"size": 11},
    "hovermode": "x unified",
}


def memory_figure(run: Run, end_s: float | None = None) -> go.Figure:
    """Allocated vs live slots (top) and where the pool goes, % of capacity (bottom), over
    simulated seconds; step lines, each engine event (or time bin) held until the next.

    Args:
        end_s: right end of the time axis, seconds (the same for runs shown side by side);
            the run's own end when ``None``.
    """
    mem = memory_bins(run.results.memory)
    capacity = run.capacity_slots
    tiers = tiers_in(mem.columns)  # a run offloading to a CPU tier, and on to a disk
    titles = [
        "allocated vs live (token slots)",
        "waste breakdown (% of KV capacity)",
        *(f"{t.tier} (% of its blocks)" for t in tiers),
    ]
    heights = ([[0.45, 0.55], [0.3, 0.4, 0.3], [0.25, 0.3, 0.225, 0.225]])[len(tiers)]
    fig = make_subplots(
        rows=len(titles),
        cols=1,
        shared_xaxes=True,
        vertical_spacing=0.08,
        row_heights=heights,
        subplot_titles=titles,
    )
    t = mem["time_s"]
    fig.add_trace(
        go.Scatter(
            x=t, y=mem["allocated"], name="allocated", line={"color": "#444", "shape": "hv"}
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Scatter(
            x=t,
            y=mem["token_states"],
            name="live (token states)",
            line={"color": CATEGORY_COLORS["token_states"], "shape": "hv"},
        ),
        row=1,
        col=1,
    )
    for cat, color in CATEGORY_COLORS.items():
        fig.add_trace(
            go.Scatter(
                x=t,
                y=100.0 * mem[cat] / capacity,
                name=CATEGORY_NAMES[cat],
                stackgroup="waste",
                line={"width": 0, "shape": "hv"},
                fillcolor=color,
                hovertemplate="%{y:.1f}%",
            ),
            row=2,
            col=1,
        )
    for row, tier in enumerate(tiers, start=3):
        _tier_traces(fig, mem, tier, row)
    fig.update_yaxes(range=[0, capacity * 1.02], title_text="slots", row=1, col=1)
    fig.update_yaxes(range=[0, 100], title_text="%", row=2, col=1)
    fig.update_xaxes(title_text="simulated time (s)", row=len(titles), col=1)
    if end_s is not None:
        fig.update_xaxes(range=[0, end_s])
    fig.update_layout(
        LAYOUT,
        height=460 + 140 * (len(titles) - 2),
        legend={"orientation": "h", "y": -0.18, "x": 0},
        showlegend=True,
    )
    return fig


def _tier_traces(fig: go.Figure, mem: pd.DataFrame, axes_of: TierAxes, row: int) -> None:
    """A tier's blocks by category (``axes_of.names``: each of its memory columns -> legend
    name and colour), stacked as % of the tier, in the figure's ``row`` (every block is in one
    category, so the stack reaches 100 %)."""
    names, tier = axes_of.names, axes_of.tier
    total = mem[list(names)].sum(axis=1).clip(lower=1)
    for col, (name, color) in names.items():
        fig.add_trace(
            go.Scatter(
                x=mem["time_s"],
                y=100.0 * mem[col] / total,
                name=f"{tier}: {name}",
                stackgroup=tier,
                line={"width": 0, "shape": "hv"},
                fillcolor=color,
                hovertemplate="%{y:.1f}%",
            ),
            row=row,
            col=1,
        )
    fig.update_yaxes(range=[0, 100], title_text="%", row=row, col=1)


def log_ticks(lo: float, hi: float) -> list[float]:
    """Tick values 1, 2, 5 x 10^k (1 x 10^k over more than 4 decades) from the last one at or
    below ``lo`` to the first at or above ``hi`` (seconds, both > 0): a log axis labelled in
    the numbers themselves ("0.02", "0.05", "0.1"), where plotly's default labels the ticks
    between decades by their first digit only ("2", "5"), so that 0.02 s read as 2 s."""
    first, last = math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1
    steps = (1, 2, 5) if last - first <= 6 else (1,)  # past 4 decades: one tick a decade
    ticks: list[float] = []
    for k in range(first, last):
        ticks += [float(f"{m}e{k}") for m in steps]
    below = [t for t in ticks if t <= lo]
    above = [t for t in ticks if t >= hi]
    return [t for t in ticks if max(below, default=lo) <= t <= min(above, default=hi)]


def ecdf_figure(runs: Sequence[Run]) -> go.Figure:
    """Empirical CDFs of TTFT, TPOT and E2E latency (log seconds), one line per run; the log
    axes are labelled in seconds at 1, 2, 5 x 10^k (``log_ticks``) and run from the first tick
    to the last, so that each shows two labels at least."""
    fig = make_subplots(rows=1, cols=len(LATENCIES), subplot_titles=list(LATENCIES.values()))
    ranges: dict[int, tuple[float, float]] = {}
    for i, run in enumerate(runs):
        color = RUN_COLORS[i % len(RUN_COLORS)]
        for j, metric in enumerate(LATENCIES, start=1):
            values = run.results.requests[metric]
            x, p = ecdf_points(values[values > 0])
            if len(x):
                lo, hi = ranges.get(j, (math.inf, 0.0))
                ranges[j] = (min(lo, float(min(x))), max(hi, float(max(x))))
            fig.add_trace(
                go.Scatter(
                    x=x,
                    y=p,
                    name=run.name,
                    legendgroup=run.name,
                    showlegend=j == 1,
                    line={"color": color, "shape": "hv"},
                    hovertemplate="%{x:.3g} s: %{y:.1%}",
                ),
                row=1,
                col=j,
            )
    fig.update_xaxes(type="log", title_text="seconds")
    for j, (lo, hi) in ranges.items():
        ticks = log_ticks(lo, hi)
        fig.update_xaxes(tickvals=ticks, ticktext=[f"{t:g}" for t in ticks], row=1, col=j)
        if len(ticks) > 1:  # the axis from the first tick to the last: plotly's own range of
            # data spanning less than a 1-2-5 step (TPOTs of 22-26 ms) showed no tick at all
            span = [math.log10(ticks[0]), math.log10(ticks[-1])]
            fig.update_xaxes(range=span, row=1, col=j)
    fig.update_yaxes(range=[0, 1.02], title_text="fraction of requests", col=1)
    fig.update_layout(LAYOUT, height=340, hovermode="closest")
    return fig
