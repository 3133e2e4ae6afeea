"""Figures from results tables only: each function takes DataFrames and returns a ``Figure``.

Figures are built with ``matplotlib.figure.Figure`` (no pyplot state; rendered by the Agg canvas),
so they work headless and in notebooks. Shares are percentages; times are seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.colors import ListedColormap, to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from kvsim.analysis import short_name

CATEGORY_COLORS = {
    "token_states": "#2a9d8f",
    "reservation": "#e9c46a",
    "internal_fragmentation": "#f4a261",
    "external_fragmentation": "#e76f51",
    "free": "#dddddd",
}
CATEGORY_NAMES = {
    "token_states": "token states",
    "reservation": "reservation",
    "internal_fragmentation": "internal frag.",
    "external_fragmentation": "external frag. & other",
    "free": "free",
}
_TAB20 = colormaps["tab20"]
assert isinstance(_TAB20, ListedColormap)
PALETTE = np.asarray(_TAB20.colors)  # float[20, 3], one colour per request (req_id % 20)
EMPTY_RGB = to_rgb("#5c0a0a")  # allocated but holding no token (dark red)
FREE_RGB = to_rgb("#f2f2f2")


def memory_over_time(memory: pd.DataFrame, *, capacity_slots: int, title: str = "") -> Figure:
    """KV memory over simulated time, stacked by category, as % of capacity.

    Args:
        memory: the memory table (``recorder.MEMORY_COLUMNS``): ``time_s``, ``duration_s`` and
            the five category columns in token slots.
        capacity_slots: KV pool size in token slots.
        title: figure title.
    """
    fig = Figure(figsize=(8, 3.5), layout="constrained")
    ax = fig.add_subplot()
    x = memory["time_s"].to_numpy()
    if len(x):  # close the last span so the step plot covers it
        x = np.append(x, x[-1] + memory["duration_s"].to_numpy()[-1])
    ys = []
    for cat in CATEGORY_COLORS:
        values = 100.0 * memory[cat].to_numpy() / capacity_slots
        ys.append(np.append(values, values[-1:]) if len(values) else values)
    ax.stackplot(
        x,
        ys,
        step="post",
        colors=list(CATEGORY_COLORS.values()),
        labels=list(CATEGORY_NAMES.values()),
    )
    ax.set(xlabel="simulated time (s)", ylabel="% of KV capacity", ylim=(0, 100), title=title)
    ax.margins(x=0)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return fig


def waste_bars(
    table: pd.DataFrame, labels: Sequence[str], *, of: str = "used", title: str = ""
) -> Figure:
    """Figure-2-style stacked bars: where the KV memory goes, one bar per row.

    Args:
        table: summary rows with ``<category>_pct_of_used`` (``of="used"``, the paper's view) or
            ``<category>_pct`` (``of="capacity"``, free included) columns, in %.
        labels: one bar label per row.
        of: ``"used"`` or ``"capacity"``.
        title: figure title.
    """
    if of not in ("used", "capacity"):
        raise ValueError(f"of: must be 'used' or 'capacity', got {of!r}")
    cats = [c for c in CATEGORY_COLORS if of == "capacity" or c != "free"]
    suffix = "_pct_of_used" if of == "used" else "_pct"
    fig = Figure(figsize=(1.3 * len(table) + 3, 4), layout="constrained")
    ax = fig.add_subplot()
    pos = np.arange(len(table))
    bottom = np.zeros(len(table))
    for cat in cats:
        values = table[f"{cat}{suffix}"].fillna(0).to_numpy(dtype=float)
        ax.bar(pos, values, bottom=bottom, color=CATEGORY_COLORS[cat], label=CATEGORY_NAMES[cat])
        if cat == "token_states":
            for p, v in zip(pos, values, strict=True):
                ax.text(float(p), v / 2, f"{v:.1f}%", ha="center", va="center", fontsize="small")
        bottom += values
    ax.set_xticks(pos, list(labels), rotation=20, ha="right")
    ax.set(
        ylabel=f"% of {'used KV memory' if of == 'used' else 'KV capacity'}",
        ylim=(0, 100),
        title=title,
    )
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return fig


def metric_vs(
    table: pd.DataFrame,
    x: str,
    metrics: Sequence[str],
    *,
    hue: str | None = None,
    logx: bool = False,
    title: str = "",
) -> Figure:
    """Metrics against one swept field (block size, request rate, KV budget ...).

    Args:
        table: summary rows with column ``x`` and each of ``metrics``.
        x: the swept field on the x axis.
        metrics: one panel per metric column.
        hue: column splitting the rows into lines (``None``: one line).
        logx: log2 x axis (block sizes).
        title: figure title.
    """
    fig = Figure(figsize=(4 * len(metrics), 3.4), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    groups = table.groupby(hue, sort=False) if hue else [("", table)]
    for name, group in groups:
        g = group.sort_values(x)
        for ax, metric in zip(axes, metrics, strict=True):
            ax.plot(g[x], g[metric], marker="o", label=str(name) if hue else None)
    for ax, metric in zip(axes, metrics, strict=True):
        ax.set(xlabel=short_name(x), ylabel=metric)
        if logx:
            ax.set_xscale("log", base=2)
        ax.grid(alpha=0.3)
    if hue:
        axes[-1].legend(fontsize="small", title=short_name(hue))
    fig.suptitle(title)
    return fig


def slot_colors(snapshot: pd.DataFrame, capacity_slots: int) -> np.ndarray:
    """Colour of every slot, float[capacity_slots, 3]: owner's colour where a token is written,
    dark red where allocated but empty, light grey where free."""
    rgb = np.tile(np.asarray(FREE_RGB), (capacity_slots, 1))
    palette = PALETTE
    for req_id, start, size, tokens in snapshot[
        ["req_id", "start_slot", "num_slots", "num_tokens"]
    ].itertuples(index=False):
        rgb[start : start + tokens] = palette[int(req_id) % len(palette)]
        rgb[start + tokens : start + size] = EMPTY_RGB
    return rgb


def memory_map(
    snapshots: Mapping[str, pd.DataFrame],
    capacity_slots: int,
    *,
    num_cells: int = 1024,
    title: str = "",
) -> Figure:
    """The physical KV pool at one moment, one panel per run (e.g. contiguous | paged).

    Each cell covers ``capacity_slots / num_cells`` consecutive slots (row-major); its colour
    blends, in proportion to slot counts, the owning requests' colours (token states), dark red
    (allocated but empty) and light grey (free).

    Args:
        snapshots: panel title -> ``poolmap.SNAPSHOT_COLUMNS`` table.
        capacity_slots: KV pool size in token slots (same for every panel).
        num_cells: cells per panel (a square number draws a square grid).
        title: figure title.
    """
    side = int(np.ceil(np.sqrt(num_cells)))
    per_cell = -(-capacity_slots // (side * side))
    fig = Figure(figsize=(4.2 * len(snapshots), 4.6), layout="constrained")
    axes = fig.subplots(1, max(len(snapshots), 1), squeeze=False)[0]
    for ax, (name, snap) in zip(axes, snapshots.items(), strict=False):
        rgb = slot_colors(snap, capacity_slots)
        padded = np.vstack([rgb, np.tile(np.ones(3), (side * side * per_cell - len(rgb), 1))])
        cells = padded.reshape(side * side, per_cell, 3).mean(axis=1).reshape(side, side, 3)
        ax.imshow(cells, interpolation="nearest")
        used = int(snap["num_slots"].sum())
        written = int(snap["num_tokens"].sum())
        share = 100.0 * written / used if used else float("nan")
        ax.set_title(
            f"{name}\n{snap['req_id'].nunique()} requests, {share:.0f}% of allocated holds tokens",
            fontsize="small",
        )
        ax.set_axis_off()
    handles = [
        Patch(color=EMPTY_RGB, label="allocated, empty"),
        Patch(color=FREE_RGB, label="free"),
        Patch(color=PALETTE[0], label="token states (one colour per request)"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncols=3, fontsize="small")
    fig.suptitle(title or f"KV pool: {capacity_slots:,} slots, {per_cell} per cell")
    return fig


def latency_cdf(
    requests: pd.DataFrame,
    *,
    by: str = "label",
    metrics: Sequence[str] = (
        "time_to_first_token_seconds",
        "request_time_per_output_token_seconds",
        "e2e_request_latency_seconds",
    ),
    title: str = "",
) -> Figure:
    """Empirical CDFs of per-request latencies, one line per ``by`` value.

    Args:
        requests: per-request rows (``results.request_frame``) with a ``by`` column.
        by: column naming the run each row belongs to.
        metrics: latency columns in seconds, one panel each.
        title: figure title.
    """
    fig = Figure(figsize=(4 * len(metrics), 3.4), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    for name, group in requests.groupby(by, sort=False):
        for ax, metric in zip(axes, metrics, strict=True):
            values = np.sort(group[metric].dropna().to_numpy())
            if len(values):
                ax.step(
                    values,
                    np.arange(1, len(values) + 1) / len(values),
                    where="post",
                    label=str(name),
                )
    for ax, metric in zip(axes, metrics, strict=True):
        ax.set(
            xlabel=f"{metric.removesuffix('_s')} (s)", ylabel="fraction of requests", ylim=(0, 1.02)
        )
        ax.grid(alpha=0.3)
    axes[-1].legend(fontsize="small")
    fig.suptitle(title)
    return fig
