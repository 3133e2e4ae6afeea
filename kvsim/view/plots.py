"""Figures from results tables only: each function takes DataFrames and returns a ``Figure``.

Figures are built with ``matplotlib.figure.Figure`` (no pyplot state; rendered by the Agg canvas),
so they work headless and in notebooks. Shares are percentages; times are seconds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap, to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

from kvsim.view.labels import (
    axis_label,
    display_unit,
    field_text,
    metric_unit,
    short_name,
    wrap_label,
)
from kvsim.view.style import style_color, styled

MAX_PER_PANEL = 8  # bars, lines or maps in one panel before a figure splits into facets
TICK_LABEL_CHARS = 36  # a longer bar label is set one field a line, under its bar
LEGEND_LABEL_CHARS = 60  # a line's legend label is wrapped at this width

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


@styled
def memory_over_time(memory: pd.DataFrame, *, capacity_slots: int, title: str = "") -> Figure:
    """KV memory over simulated time, stacked by category, as % of capacity; below it, a row
    for each KV offload tier the table has (the CPU tier's blocks, then the disk tier's, by
    category as % of the tier: ``kvsim.view.offload_plots.tier_panel``).

    Args:
        memory: the memory table (``recorder.MEMORY_COLUMNS``): ``time_s``, ``duration_s`` and
            the five category columns in token slots; with an offload tier, its columns
            (``kvsim.results.offload.TIER_COLUMNS``, ``DISK_COLUMNS``) in blocks.
        capacity_slots: KV pool size in token slots.
        title: figure title.
    """
    from kvsim.view.offload_plots import tier_panel, tiers_in

    tiers = tiers_in(memory.columns)
    fig = Figure(figsize=(8, 3.5 + 2.4 * len(tiers)), layout="constrained")
    ax, *tier_axes = fig.subplots(
        1 + len(tiers), 1, sharex=True, squeeze=False, height_ratios=[3] + [2] * len(tiers)
    )[:, 0]
    for i, (tier, tier_ax) in enumerate(zip(tiers, tier_axes, strict=True)):
        tier_panel(tier_ax, memory, tier.tier, tier, legend_outside=True)
        if i < len(tiers) - 1:
            tier_ax.set_xlabel("")  # (the lowest row names the shared axis)
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
    xlabel = "" if tiers else "simulated time (s)"  # (else the lowest tier row's)
    ax.set(xlabel=xlabel, ylabel="% of KV capacity", ylim=(0, 100), title=title)
    ax.margins(x=0)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    return fig


def _grid(fig: Figure, num_panels: int, max_cols: int = 4) -> list[Axes]:
    """``num_panels`` axes in rows of at most ``max_cols`` (the unused ones removed)."""
    cols = max(1, min(max_cols, num_panels))
    rows = -(-num_panels // cols)
    axes = list(fig.subplots(rows, cols, squeeze=False).flat)
    for ax in axes[num_panels:]:
        ax.remove()
    return axes[:num_panels]


def facet_groups(
    table: pd.DataFrame, facet: str | None, max_per_panel: int = MAX_PER_PANEL
) -> list[tuple[str, pd.Index]]:
    """Split ``table``'s rows into panels: one per ``facet`` value, or runs of
    ``max_per_panel`` rows when no facet column is given (one panel when they fit)."""
    if facet is not None and facet in table:
        return [
            (field_text(facet, value, sep=" = "), group.index)
            for value, group in table.groupby(facet, sort=True)
        ]
    if len(table) <= max_per_panel:
        return [("", table.index)]
    chunks = range(0, len(table), max_per_panel)
    return [
        (f"points {i + 1}-{min(i + max_per_panel, len(table))}", table.index[i : i + max_per_panel])
        for i in chunks
    ]


@styled
def waste_bars(
    table: pd.DataFrame,
    labels: Sequence[str],
    *,
    of: str = "used",
    title: str = "",
    facet: str | None = None,
) -> Figure:
    """Figure-2-style stacked bars: where the KV memory goes, one bar per row.

    More than ``MAX_PER_PANEL`` rows are drawn as small multiples: one panel per value of
    ``facet`` (e.g. the request rate), else panels of ``MAX_PER_PANEL`` rows, four per line.

    Args:
        table: summary rows with ``<category>_pct_of_used`` (``of="used"``, the paper's view) or
            ``<category>_pct`` (``of="capacity"``, free included) columns, in %.
        labels: one bar label per row.
        of: ``"used"`` or ``"capacity"``.
        title: figure title.
        facet: column whose values split the rows into panels (``None``: by count).

    Raises:
        ValueError: ``of`` is neither ``"used"`` nor ``"capacity"``.
    """
    if of not in ("used", "capacity"):
        raise ValueError(f"of: must be 'used' or 'capacity', got {of!r}")
    suffix = "_pct_of_used" if of == "used" else "_pct"
    table = table.reset_index(drop=True)
    # free memory where some bar has a share that shows (0.1 % as tables round it): a legend
    # entry with no visible area in the figure names nothing (Figure 2's Pow2 bar: 0.003 %)
    has_free = of == "capacity" and bool(table["free" + suffix].fillna(0).round(1).gt(0).any())
    cats = [c for c in CATEGORY_COLORS if c != "free" or has_free]
    groups = facet_groups(table, facet if len(table) > MAX_PER_PANEL else None)
    widest = max(len(index) for _, index in groups)
    cols = min(4, len(groups))
    rows = -(-len(groups) // cols)
    ticks = [_bar_label(label) for label in labels]
    stacked = any("\n" in t for t in ticks)  # set level under their bars, which widen to hold them
    longest = max((len(line) for t in ticks for line in t.split("\n")), default=0)
    bar_in = max(0.9, 0.065 * longest) if stacked else 0.9
    fig = Figure(
        figsize=(cols * (bar_in * widest + 1.6) + 1.8, 3.6 * rows + 0.6), layout="constrained"
    )
    axes = _grid(fig, len(groups))
    for ax, (name, index) in zip(axes, groups, strict=True):
        part = table.loc[index]
        pos = np.arange(len(part))
        bottom = np.zeros(len(part))
        for cat in cats:
            values = part[f"{cat}{suffix}"].fillna(0).to_numpy(dtype=float)
            ax.bar(
                pos, values, bottom=bottom, color=CATEGORY_COLORS[cat], label=CATEGORY_NAMES[cat]
            )
            if cat == "token_states":
                for p, v in zip(pos, values, strict=True):
                    ax.text(
                        float(p), v / 2, f"{v:.1f}%", ha="center", va="center", fontsize="small"
                    )
            bottom += values
        if stacked:
            ax.set_xticks(pos, [ticks[i] for i in index], fontsize="small")
        else:
            ax.set_xticks(pos, [ticks[i] for i in index], rotation=25, ha="right", fontsize="small")
        ax.set(
            ylabel=f"% of {'used KV memory' if of == 'used' else 'KV capacity'}",
            ylim=(0, 100),
            title=name,
        )
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside right upper", fontsize="small")
    fig.suptitle(title)
    return fig


def _bar_label(label: str) -> str:
    """A bar's label as drawn: as it is up to ``TICK_LABEL_CHARS``, else one field a line (a
    point's label names every field that varies; slanted in one line, a long one squeezed the
    panels until constrained_layout gave up)."""
    if len(label) <= TICK_LABEL_CHARS:
        return label
    return "\n".join(wrap_label(part, TICK_LABEL_CHARS) for part in label.split(", "))


def log_axis(ax: Axes, which: str, values: np.ndarray, *, zero: bool = False) -> None:
    """Log scale on ``which`` ("x" or "y") when the positive values span 8x or more; ticks in
    the data's own numbers (powers of two when every value is one; 1-2-5 steps when the values
    span less than three decades, where the decades alone leave one or two labels).

    With ``zero`` and a 0 among the values (a swept size of 0: no tier), a symmetric log scale
    instead, linear from 0 to the smallest positive value, so the 0 point is drawn (a log axis
    drops it) one step of the data's spacing before the next, with the data's values as ticks.
    """
    finite = values[np.isfinite(values) & (values > 0)]
    if len(finite) < 2 or finite.max() / finite.min() < 8:
        return
    powers_of_2 = bool(np.all(np.log2(finite) % 1 == 0))
    base = 2 if powers_of_2 else 10
    axis = ax.xaxis if which == "x" else ax.yaxis
    set_scale = ax.set_xscale if which == "x" else ax.set_yscale
    formatter = FuncFormatter(lambda v, _pos: f"{v:g}")
    if zero and bool(np.any(values == 0)):
        distinct = np.unique(finite)
        # the 0 point one mean step of the positive values before the smallest (in decades of
        # ``base``; symlog draws its linear range linscale / (1 - 1 / base) decades long)
        step = np.log(distinct.max() / distinct.min()) / np.log(base) / max(len(distinct) - 1, 1)
        linscale = float(step * (1 - 1 / base))
        set_scale("symlog", base=base, linthresh=float(distinct.min()), linscale=linscale)
        if len(distinct) < 12:
            axis.set_ticks([0.0, *distinct.tolist()])
        axis.set_major_formatter(formatter)
        axis.set_minor_formatter(NullFormatter())
        return
    set_scale("log", base=base)
    if powers_of_2 and which == "x":
        ax.set_xticks(sorted(set(finite.tolist())))
    elif not powers_of_2 and finite.max() / finite.min() < 1000:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(formatter)
    axis.set_minor_formatter(NullFormatter())


SERIES_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
SERIES_DASHES = ("-", "--", ":", "-.")


@styled
def metric_vs(
    table: pd.DataFrame,
    x: str,
    metrics: Sequence[str],
    *,
    hue: str | None = None,
    logx: bool | None = None,
    title: str = "",
    targets: Mapping[str, float] | None = None,
) -> Figure:
    """Metrics against one swept field (block size, request rate, KV budget ...), every row drawn.

    Args:
        table: summary rows with column ``x`` and each of ``metrics``.
        x: the swept field on the x axis.
        metrics: one panel per metric column (four per line).
        hue: column splitting the rows into lines (``None``: one line).
        logx: log x axis; ``None`` decides from the data (values spanning 8x or more; base 2 for
            powers of two; a symmetric log axis when a 0 is among them, so its point is drawn:
            ``log_axis``). A metric's y axis is logarithmic when its values span 8x or more.
        title: figure title.
        targets: metric -> bound, drawn as a dashed horizontal line.
    """
    fig = Figure(
        figsize=(4 * min(4, len(metrics)) + 1.5, 3.4 * -(-len(metrics) // 4)), layout="constrained"
    )
    axes = _grid(fig, len(metrics))
    shown = display_unit(x)  # (bandwidths in GB/s, as the axis label says)
    divisor = shown[0] if shown else 1.0
    groups = table.groupby(hue, sort=False) if hue else [("", table)]
    for i, (name, group) in enumerate(groups):
        g = group.sort_values(x)
        # each line its own marker and dash, later ones smaller: lines that coincide (two
        # drafters of one acceptance length) stay visible on top of each other
        marker, dash = (
            SERIES_MARKERS[i % len(SERIES_MARKERS)],
            SERIES_DASHES[i % len(SERIES_DASHES)],
        )
        size = 7.0 - 1.5 * (i % 3)
        for ax, metric in zip(axes, metrics, strict=True):
            label = str(name) if hue else None
            ax.plot(g[x] / divisor, g[metric], marker=marker, ls=dash, ms=size, label=label)
    xs = table[x].to_numpy(dtype=float) / divisor
    whole = bool(np.all(xs[np.isfinite(xs)] % 1 == 0))
    for ax, metric in zip(axes, metrics, strict=True):
        # a 4-inch panel holds about 32 characters of label: wrap at words, not into a neighbour
        label = wrap_label(axis_label(metric), 32)
        ax.set(xlabel=axis_label(x), ylabel=label)
        if metric_unit(metric) == "count" and (table[metric] >= 0).all():
            ax.set_ylim(0, max(ax.get_ylim()[1], 1))  # no negative counts around all zeros
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        rate = metric.endswith(("_rate", "_perc", "_frac", "_pct", "_pct_of_used"))
        if rate and (table[metric] >= 0).all():  # a share from 0: a 0.02 % step stays small
            ax.set_ylim(bottom=0)
        if whole:  # counts and sizes: no 0.5 ticks between them
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if logx is None:
            log_axis(ax, "x", xs, zero=True)  # a swept 0 (no tier, no limit) stays drawn
        elif logx:
            ax.set_xscale("log", base=2)
        if metric.endswith(("_seconds_mean", "_p50", "_p90", "_p95", "_p99")):
            values = table[metric].to_numpy(dtype=float)
            log_axis(ax, "y", values)
            if ax.get_yscale() == "linear" and (values[np.isfinite(values)] >= 0).all():
                ax.set_ylim(bottom=0)  # a 1 % change in TTFT not drawn as a cliff
        if targets and metric in targets:
            ax.axhline(
                targets[metric],
                color="#444444",
                ls="--",
                lw=1.2,
                label=f"target <= {targets[metric]:g}",
            )
        ax.grid(alpha=0.3)
    if hue or targets:
        handles, names = axes[0].get_legend_handles_labels()
        fig.legend(
            handles,
            names,
            loc="outside right upper",
            fontsize="small",
            title=short_name(hue) if hue else None,
        )
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


@styled
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
    num = max(len(snapshots), 1)
    cols = min(4, num)
    fig = Figure(figsize=(3.6 * cols, 3.9 * -(-num // cols) + 0.5), layout="constrained")
    axes = _grid(fig, num)
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


@styled
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
    facet: str | None = None,
) -> Figure:
    """Empirical CDFs (``Axes.ecdf``) of per-request latencies, one line per ``by`` value, on log
    time axes (latencies span decades under load).

    With more than ``MAX_PER_PANEL`` runs (``by`` and ``facet`` values together) and a ``facet``
    column, one row of panels per facet value; the row names its value, so ``by``'s labels
    need not. One legend below the panels, a colour per ``by`` value in every row.

    Args:
        requests: per-request rows (``results.request_frame``) with a ``by`` column.
        by: column naming the run each row belongs to (its legend label).
        metrics: latency columns in seconds, one panel each.
        title: figure title.
        facet: column splitting the runs into rows of panels (``None``: one row).
    """
    faceted = facet is not None and facet in requests
    runs = requests.groupby([by, facet]).ngroups if faceted else requests[by].nunique()
    rows: list[tuple[str, pd.DataFrame]] = [("", requests)]
    if faceted and runs > MAX_PER_PANEL:
        rows = [
            (field_text(str(facet), value, sep=" = "), group)
            for value, group in requests.groupby(facet, sort=True)
        ]
    names = [str(n) for n in requests[by].drop_duplicates()]
    colors = {name: style_color(i) for i, name in enumerate(names)}
    width = 4 * len(metrics) + 2
    fig = Figure(figsize=(width, 3.3 * len(rows) + 0.4), layout="constrained")
    grid = fig.subplots(len(rows), len(metrics), squeeze=False)
    handles: dict[str, Artist] = {}
    for axes, (row_name, part) in zip(grid, rows, strict=True):
        for name, group in part.groupby(by, sort=False):
            for ax, metric in zip(axes, metrics, strict=True):
                values = group[metric].dropna().to_numpy()
                if len(values):
                    line = ax.ecdf(values, label=str(name), color=colors[str(name)])
                    handles.setdefault(str(name), line)
        for ax, metric in zip(axes, metrics, strict=True):
            ax.set(xlabel=axis_label(metric), ylabel="fraction of requests", ylim=(0, 1.02))
            values = part[metric].to_numpy(dtype=float)
            if np.any(values > 0):
                log_axis(ax, "x", values)
            ax.grid(alpha=0.3)
        if row_name:
            axes[0].set_title(row_name, loc="left", fontsize="small")
    _legend_below(fig, [n for n in names if n in handles], handles, width)
    fig.suptitle(title)
    return fig


def _legend_below(
    fig: Figure, names: Sequence[str], handles: Mapping[str, Artist], width_in: float
) -> None:
    """A figure legend under the panels, in as many columns as its labels fit across
    ``width_in`` inches (a label wrapped at ``LEGEND_LABEL_CHARS``): beside a panel, a sweep
    point's long label squeezed the panels and overlapped the next one."""
    if not names:
        return
    labels = [wrap_label(n, LEGEND_LABEL_CHARS) for n in names]
    widest = max(len(line) for label in labels for line in label.split("\n"))
    # a "small" legend character is about 0.065 in wide; the line sample and gap about 6 more
    ncols = max(1, min(len(labels), int(width_in // ((widest + 6) * 0.065))))
    fig.legend(
        [handles[n] for n in names],
        labels,
        loc="outside lower center",
        ncols=ncols,
        fontsize="small",
    )
