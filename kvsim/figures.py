"""Draw the standard figures of a sweep folder as PNGs (``kvsim plot RESULTS``).

From ``summary.parquet``: Figure-2-style waste bars, and utilisation / fragmentation against every
numeric swept field (metrics from the experiment's ``[analysis] vs_metrics`` when given). From
the points' tables: KV memory over time and latency CDFs (the first
``MAX_PANELS`` points) and, where snapshots were taken, a memory map of all of them side by side.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from kvsim.analysis import SweepResults, load_sweep, short_name
from kvsim.plots import latency_cdf, memory_map, memory_over_time, metric_vs, waste_bars

logger = logging.getLogger(__name__)

MAX_PANELS = 12
VS_METRICS = (
    "token_utilization_perc",
    "internal_fragmentation_pct_of_used",
    "external_fragmentation_pct_of_used",
    "num_requests_running_mean",
)


def _numeric_axes(sweep: SweepResults) -> list[str]:
    table = sweep.summary
    return [
        f
        for f in sweep.swept_fields
        if f != "label" and pd.api.types.is_numeric_dtype(table[f]) and table[f].nunique() > 1
    ]


def _save(fig: Figure, path: Path, written: list[Path]) -> None:
    fig.savefig(path, dpi=110)
    written.append(path)


def _vs_figures(sweep: SweepResults, out: Path, written: list[Path]) -> None:
    table = sweep.summary
    for x in _numeric_axes(sweep):
        others = [f for f in sweep.swept_fields if f != x]
        if "label" in others:  # fields zipped with the label add nothing to it
            others = [
                "label",
                *(
                    f
                    for f in others
                    if f != "label" and table.groupby("label")[f].nunique().max() > 1
                ),
            ]
        hue = None
        if others:
            hue = ", ".join(short_name(f) for f in others)
            table = table.assign(
                **{hue: [", ".join(str(r[f]) for f in others) for _, r in table.iterrows()]}
            )
        logx = "block_size" in x or "kv_cache" in x
        metrics = sweep.meta.get("analysis", {}).get("vs_metrics", VS_METRICS)
        fig = metric_vs(
            table,
            x,
            metrics,
            hue=hue,
            logx=logx,
            title=f"{sweep.meta.get('name', '')}: against {short_name(x)}",
        )
        _save(fig, out / f"vs_{short_name(x)}.png", written)


def _point_figures(sweep: SweepResults, out: Path, written: list[Path]) -> None:
    labels = sweep.labels()
    frames = []
    snapshots: dict[str, pd.DataFrame] = {}
    capacity = 0
    for i, (key, label) in enumerate(zip(sweep.keys, labels, strict=True)):
        snap = sweep.snapshot(key)
        if snap is not None and len(snapshots) < MAX_PANELS:
            snapshots[label] = snap
            capacity = int(sweep.summary["capacity_tokens"].iloc[i])
        if i >= MAX_PANELS:
            continue
        results = sweep.results(key)
        fig = memory_over_time(
            results.memory, capacity_slots=results.config.capacity_tokens, title=label
        )
        _save(fig, out / f"memory_{i:03d}.png", written)
        frames.append(results.requests.assign(label=label))
    if frames:
        fig = latency_cdf(pd.concat(frames, ignore_index=True), title=sweep.meta.get("name", ""))
        _save(fig, out / "latency_cdf.png", written)
    if snapshots:
        at = sweep.meta.get("snapshot_at_s")
        fig = memory_map(snapshots, capacity, title=f"KV pool at t = {at} s")
        _save(fig, out / "memory_map.png", written)


def draw_figures(folder: str | Path, out: str | Path | None = None) -> list[Path]:
    """Draw every standard figure of a sweep folder.

    Args:
        folder: ``results/NAME`` (with ``summary.parquet``).
        out: where PNGs go (default ``folder/figures``).

    Returns:
        Paths of the PNGs written.
    """
    sweep = load_sweep(folder)
    out_dir = Path(out) if out is not None else Path(folder) / "figures"
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if sweep.summary.empty:
        logger.warning("%s: no finished points, no figures", folder)
        return written
    table = sweep.summary.head(3 * MAX_PANELS)
    fig = waste_bars(table, sweep.labels()[: len(table)], title=sweep.meta.get("name", ""))
    _save(fig, out_dir / "waste_bars.png", written)
    _vs_figures(sweep, out_dir, written)
    _point_figures(sweep, out_dir, written)
    return written
