"""The KV offload experiments' figure: TTFT and hit rates against a tier's size, and the tier's
blocks over time (``experiments/offload.toml``: the CPU buffer; ``experiments/offload-disk.toml``:
a disk below it; plots take DataFrames, return a Figure)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from kvsim.view.labels import field_unit, field_value
from kvsim.view.style import style_color, styled

_STATISTICS = (("-", "mean"), ("--", "p90"))  # TTFT line styles
SIZE = "offload.kv_offloading_size"
BANDWIDTH = "offload.link_bandwidth_bytes_per_s"
TIER_NAMES = {
    "cpu_tier_stored_blocks": ("stored", "#2b7bba"),
    "cpu_tier_storing_blocks": ("storing (GPU->CPU copy)", "#f0a030"),
    "cpu_tier_loading_blocks": ("loading (read by a copy to the GPU or disk)", "#c0392b"),
    "cpu_tier_free_blocks": ("free", "#e8e8e8"),
}
DISK_SIZE = "offload.disk_offloading_size"
DISK_BANDWIDTH = "offload.disk_read_bandwidth_bytes_per_s"
DISK_NAMES = {
    "disk_tier_stored_blocks": ("stored", "#2b7bba"),
    "disk_tier_writing_blocks": ("writing (CPU->disk copy)", "#f0a030"),
    "disk_tier_free_blocks": ("free", "#e8e8e8"),
}


@dataclass(frozen=True)
class TierAxes:
    """Which tier a figure is about: its size column (GiB), the bandwidth its lines are drawn
    by (bytes/s), their labels, its memory columns with their legend names and colours, its
    name, and whose hits the hit rate counts."""

    size: str
    bandwidth: str
    size_label: str
    bandwidth_label: str
    names: dict[str, tuple[str, str]]
    tier: str
    hits: str  # whose hits the hit-rate lines are


CPU_AXES = TierAxes(
    SIZE,
    BANDWIDTH,
    "CPU buffer, kv_offloading_size (GiB)",
    "link",
    TIER_NAMES,
    "CPU tier",
    "CPU tier",
)
DISK_AXES = TierAxes(
    DISK_SIZE,
    DISK_BANDWIDTH,
    "disk tier, disk_offloading_size (GiB)",
    "disk",
    DISK_NAMES,
    "disk tier",
    "CPU + disk tiers",
)


def tiers_in(columns: Iterable[str]) -> list[TierAxes]:
    """The offload tiers a memory table has every column of, CPU first (``CPU_AXES``,
    ``DISK_AXES``)."""
    have = set(columns)
    return [axes for axes in (CPU_AXES, DISK_AXES) if set(axes.names) <= have]


@styled
def offload_figure(
    summary: pd.DataFrame,
    tier_memory: pd.DataFrame | None,
    *,
    tier_title: str = "",
    axes_of: TierAxes = CPU_AXES,
) -> Figure:
    """Three panels: TTFT (mean solid, p90 dashed) and the hit rates against the tier's size
    (GiB, "off" at 0; one line per bandwidth, GB/s; the GPU prefix cache's rate is of the
    prompt tokens, the offload tiers' of the tokens the GPU missed, as vLLM counts them), and
    ``tier_memory``'s tier blocks over simulated time as % of the tier (stacked by category).

    Args:
        summary: one row per sweep point with ``axes_of.size``, ``axes_of.bandwidth`` and the
            summary metrics.
        tier_memory: one point's memory table with ``time_s`` and the tier's columns
            (``TIER_COLUMNS``, ``DISK_COLUMNS``), or ``None``.
        tier_title: the third panel's title (which point it shows).
        axes_of: the CPU tier's (``CPU_AXES``) or the disk tier's (``DISK_AXES``).
    """
    size_col, bw_col = axes_of.size, axes_of.bandwidth
    fig = Figure(figsize=(14, 3.8), layout="constrained")
    axes = fig.subplots(1, 3)
    sizes = sorted(summary[size_col].unique())
    pos = {s: i for i, s in enumerate(sizes)}
    ticks = ["off" if s == 0 else f"{s:g}" for s in sizes]
    styles = ["o", "s", "^", "D"]
    for i, (bw, group) in enumerate(summary.sort_values(size_col).groupby(bw_col)):
        x = [pos[s] for s in group[size_col]]
        label = f"{field_value(bw_col, bw)} {field_unit(bw_col)}"  # (GB/s)
        marker = styles[i % len(styles)]
        size = 9 - 2 * i
        color = style_color(i)
        axes[0].plot(
            x,
            group["time_to_first_token_seconds_mean"],
            marker=marker,
            ms=size,
            color=color,
            label=label,
        )
        axes[0].plot(
            x,
            group["time_to_first_token_seconds_p90"],
            marker=marker,
            ms=size,
            ls="--",
            color=color,
            label="_p90",  # (the line styles get a legend of their own)
        )
        # (NaN where nothing was looked up, e.g. the tier "off": no point, not 0 %)
        hit = group["external_prefix_cache_hit_rate"] * 100
        axes[1].plot(x, hit, marker=marker, ms=size, color=color, label=f"{axes_of.hits}, {label}")
    gpu = summary.groupby(size_col)["prefix_cache_hit_rate"].mean() * 100
    axes[1].plot(
        [pos[s] for s in gpu.index], gpu.to_numpy(), color="grey", ls=":", label="GPU prefix cache"
    )
    for ax, ylabel in zip(
        axes[:2], ["TTFT (s)", "hit rate (% of the tokens looked up)"], strict=True
    ):
        ax.set_xticks(range(len(sizes)), ticks)
        ax.set(xlabel=axes_of.size_label, ylabel=ylabel)
    # one legend (two placed apart covered the "off" point's markers): the links, then the
    # line styles, where the lines leave room
    links, _ = axes[0].get_legend_handles_labels()
    statistic = [Line2D([], [], color="0.25", ls=ls, label=name) for ls, name in _STATISTICS]
    axes[0].legend(
        handles=[*links, *statistic],
        title=axes_of.bandwidth_label,
        loc="best",
        fontsize="x-small",
        title_fontsize="x-small",
    )
    axes[1].legend(fontsize="x-small")
    axes[0].set_title("time to first token")
    axes[1].set_title("prefix hits")
    tier_panel(axes[2], tier_memory, tier_title, axes_of)
    return fig


def tier_panel(
    ax: Axes,
    tier_memory: pd.DataFrame | None,
    title: str,
    axes_of: TierAxes,
    *,
    legend_outside: bool = False,
) -> None:
    """The tier's blocks by category over time, % of the tier (``tier_memory``: a memory table
    with ``time_s`` and ``axes_of``'s columns, in blocks, and ``duration_s`` to close the last
    row's span; ``None`` or empty: no panel); the legend right of the axes if
    ``legend_outside``."""
    if tier_memory is None or not len(tier_memory):
        ax.set_axis_off()
        return
    names = axes_of.names  # (its keys are the tier's memory columns)
    total = tier_memory[list(names)].sum(axis=1).to_numpy()
    x = tier_memory["time_s"].to_numpy()
    ys = [100.0 * tier_memory[c].to_numpy() / np.maximum(total, 1) for c in names]
    if "duration_s" in tier_memory:  # close the last span, as the memory rows' plot does
        x = np.append(x, x[-1] + tier_memory["duration_s"].to_numpy()[-1])
        ys = [np.append(y, y[-1:]) for y in ys]
    ax.stackplot(
        x,
        ys,
        step="post",
        colors=[c for _, c in names.values()],
        labels=[n for n, _ in names.values()],
    )
    ax.set(
        xlabel="simulated time (s)",
        ylabel=f"% of the {axes_of.tier}'s blocks",
        ylim=(0, 100),
        title=title,
    )
    ax.margins(x=0)
    # a white frame (kvsim.mplstyle turns frames off, which left "stored"'s blue swatch on the
    # blue area it names) and outlined swatches ("free" is near-white)
    place = (
        {"loc": "upper left", "bbox_to_anchor": (1.0, 1.0)}
        if legend_outside
        else {"loc": "lower right"}
    )
    legend = ax.legend(**place, fontsize="x-small", frameon=True, facecolor="white", framealpha=1.0)
    for handle in legend.legend_handles:
        if isinstance(handle, Patch):  # (a stackplot's handles are rectangles)
            handle.set_edgecolor("0.3")
            handle.set_linewidth(0.5)
