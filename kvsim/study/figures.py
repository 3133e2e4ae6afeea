"""Draw the standard figures of a sweep folder as PNGs (``kvsim plot RESULTS``).

From ``summary.parquet``: Figure-2-style waste bars (small multiples by the first swept number
past ``MAX_PER_PANEL`` points), and the experiment's metrics (``[analysis] vs_metrics``, target
lines from ``[analysis] targets``) against every swept number that varies while the other fields
stay fixed (a field zipped with the label names points, it is not an axis). From every point:
KV memory over time (``memory_<point>.png``, named from the point's values), latency CDFs, and a
memory map of all snapshots.
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from kvsim.base.tablefile import stored_table
from kvsim.results.metrics import is_memory_metric
from kvsim.study.analysis import check_analysis
from kvsim.study.load import SweepResults, field_groups, load_sweep, row_labels
from kvsim.view.fleet_plots import point_bars
from kvsim.view.labels import field_unit, field_value, short_name
from kvsim.view.plots import (
    CATEGORY_COLORS,
    MAX_PER_PANEL,
    latency_cdf,
    memory_map,
    memory_over_time,
    metric_vs,
    waste_bars,
)

logger = logging.getLogger(__name__)

VS_METRICS = (
    "token_utilization_perc",
    "internal_fragmentation_pct_of_used",
    "external_fragmentation_pct_of_used",
    "num_requests_running_mean",
)
# the shares waste_bars stacks (its of="used" view), and every column plot reads by name
SHARE_COLUMNS = [f"{c}_pct_of_used" for c in CATEGORY_COLORS if c != "free"]
NEEDED_COLUMNS = ["config_key", "capacity_tokens", *SHARE_COLUMNS]


def recorded_memory(table: pd.DataFrame) -> bool:
    """Whether a sweep summary has any metric of the memory rows (``is_memory_metric``): a
    sweep with ``record_memory = false`` has none."""
    return any(is_memory_metric(str(c)) for c in table.columns)


def varying_axes(table: pd.DataFrame, fields: list[str]) -> list[str]:
    """Swept numeric fields that take two or more values while every other swept field is fixed.

    A field zipped with ``label`` (one value per label) is an identifier, not an axis.
    """
    axes = []
    for f in fields:
        if f == "label" or f not in table or not pd.api.types.is_numeric_dtype(table[f]):
            continue
        others = [o for o in fields if o != f and o in table]
        groups = table.groupby([table[o].astype(str) for o in others]) if others else [(0, table)]
        if any(g[f].nunique() > 1 for _, g in groups):
            axes.append(f)
    return axes


def _slug(parts: list[str]) -> str:
    slugs = [re.sub(r"[^A-Za-z0-9_.+=-]+", "-", p).strip("-").lower() for p in parts]
    return "_".join(s for s in slugs if s)


def point_names(sweep: SweepResults) -> list[str]:
    """A file-name slug per point from its swept values, e.g. ``orca-max_rate_per_s-5``: its
    label and its values on the sweep's axes (``varying_axes``); points that share those are
    told apart by the other swept fields that vary (zipped ones, such as a drive's read and
    write bandwidth, named once and in the units people read: ``..._disk_read-write_bandwidth-
    6.4``), and by ``_2``, ``_3`` ... where nothing else differs."""
    table = sweep.summary
    axes = varying_axes(table, sweep.swept_fields)
    rest = [
        f
        for f in sweep.swept_fields
        if f not in axes
        and f != "label"
        and f in table
        and table[f].astype(str).nunique() > 1
        and not ("label" in table and table.groupby("label")[f].nunique().max() == 1)
    ]
    groups = field_groups(table, rest)
    names, extras = [], []
    for _, row in table.iterrows():
        parts = [str(row["label"])] if "label" in table else []
        parts += [
            f"{short_name(f)}-{row[f]:g}"
            if isinstance(row[f], float)
            else f"{short_name(f)}-{row[f]}"
            for f in axes
        ]
        names.append(_slug(parts) or "point")
        extras.append(_slug([f"{name}-{field_value(g[0], row[g[0]])}" for name, g in groups]))
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    names = [
        f"{name}_{extra}" if counts[name] > 1 and extra else name
        for name, extra in zip(names, extras, strict=True)
    ]
    seen: dict[str, int] = {}
    unique = []
    for name in names:  # two points with the same values (e.g. differing in a string field)
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return unique


def _save(fig: Figure, path: Path, written: list[Path]) -> None:
    fig.savefig(path)
    written.append(path)


def _hue(sweep: SweepResults, x: str) -> tuple[pd.DataFrame, str | None]:
    """The summary with one column naming each line of a chart against ``x``: the other swept
    fields' values in the units people read (``field_groups``: bandwidths in GB/s, zipped
    fields with the same values once), the column's name their names and units (the legend's
    title)."""
    table = sweep.summary
    others = [f for f in sweep.swept_fields if f != x and f in table]
    if "label" in others:  # fields zipped with the label add nothing to it
        others = [
            "label",
            *(f for f in others if f != "label" and table.groupby("label")[f].nunique().max() > 1),
        ]
    if not others:
        return table, None
    groups = field_groups(table, others)
    hue = ", ".join(
        f"{name} ({field_unit(fields[0])})" if field_unit(fields[0]) else name
        for name, fields in groups
    )
    values = [
        ", ".join(field_value(fields[0], r[fields[0]]) for _, fields in groups)
        for _, r in table.iterrows()
    ]
    return table.assign(**{hue: values}), hue


def _vs_figures(
    sweep: SweepResults, analysis: dict[str, Any], out: Path, written: list[Path]
) -> None:
    """The metrics against each varying axis (``analysis``: the checked ``[analysis]`` table)."""
    asked = [*analysis.get("vs_metrics", VS_METRICS)]
    targets = {m: float(b) for m, b in analysis.get("targets", {}).items()}
    asked += [m for m in targets if m not in asked]
    metrics = [m for m in asked if m in sweep.summary]
    named = [*analysis.get("vs_metrics", []), *targets]  # the experiment's own, not defaults
    missing = [m for m in dict.fromkeys(named) if m not in sweep.summary]
    unrecorded = (
        [] if recorded_memory(sweep.summary) else [m for m in missing if is_memory_metric(m)]
    )
    if unrecorded:
        logger.warning(
            "%s: no %s in summary.parquet (record_memory = false), not drawn",
            sweep.folder,
            unrecorded,
        )
    if other := [m for m in missing if m not in unrecorded]:
        logger.warning("%s: no %s in summary.parquet, not drawn", sweep.folder, other)
    if not metrics:
        return
    for x in varying_axes(sweep.summary, sweep.swept_fields):
        if x == "seed":
            continue  # replicates, not a knob: a curve against them only shows noise
        table, hue = _hue(sweep, x)
        fig = metric_vs(
            table,
            x,
            metrics,
            hue=hue,
            title=f"{sweep.meta.get('name', '')}: against {short_name(x)}",
            targets=targets,
        )
        _save(fig, out / f"vs_{short_name(x)}.png", written)


def _facet(sweep: SweepResults) -> str | None:
    """The first swept number that varies, when the points are more than a panel holds (bar
    panels and CDF rows split by it, and their labels leave it out); else ``None``."""
    if len(sweep.summary) <= MAX_PER_PANEL:
        return None
    axes = varying_axes(sweep.summary, sweep.swept_fields)
    return axes[0] if axes else None


def _short_labels(sweep: SweepResults, facet: str | None) -> list[str]:
    """The points' labels less ``facet`` (the panel or row they are in names its value)."""
    if facet is None:
        return sweep.labels()
    return row_labels(sweep.summary, [f for f in sweep.swept_fields if f != facet])


def _point_figures(sweep: SweepResults, out: Path, written: list[Path]) -> None:
    labels = sweep.labels()
    facet = _facet(sweep)
    lines = _short_labels(sweep, facet)  # the CDFs' legend (a row names its facet value)
    names = point_names(sweep)
    frames = []
    drawn: set[str] = set()  # the configs whose memory figure is drawn
    snapshots: dict[str, pd.DataFrame] = {}
    capacity = 0
    for i, (key, label) in enumerate(zip(sweep.keys, labels, strict=True)):
        snap = sweep.snapshot(key)
        if snap is not None:
            snapshots[label] = snap
            capacity = int(sweep.summary["capacity_tokens"].iloc[i])
        results = sweep.results(key)
        # (points that repeat a config: one figure, the first's name; none without memory rows:
        # record_memory = false)
        if key not in drawn and len(results.memory):
            drawn.add(key)
            memory, title = results.memory, label
            if "replica" in memory:  # a fleet: one replica's pool (every replica's in `replicas`)
                index = _decoding_replica(results.replicas)
                memory, title = memory[memory["replica"] == index], f"{label} (replica {index})"
                slots = results.config.replica_configs[index].capacity_tokens
            else:
                slots = results.config.capacity_tokens
            fig = memory_over_time(memory, capacity_slots=slots, title=title)
            _save(fig, out / f"memory_{names[i]}.png", written)
        frame = results.requests.assign(label=lines[i])
        if facet is not None:
            frame[facet] = sweep.summary[facet].iloc[i]
        frames.append(frame)
    if frames:
        fig = latency_cdf(
            pd.concat(frames, ignore_index=True),
            title=f"{sweep.meta.get('name', '')}: each request's latency, by point",
            facet=facet,
        )
        _save(fig, out / "latency_cdf.png", written)
    if snapshots:
        at = sweep.meta.get("snapshot_at_s")
        fig = memory_map(snapshots, capacity, title=f"KV pool at t = {at} s")
        _save(fig, out / "memory_map.png", written)


def _decoding_replica(replicas: pd.DataFrame | None) -> int:
    """The fleet replica whose memory a point's figure shows: the first that decodes (a
    disaggregated fleet's prefill replicas hold each prompt only while it is computed), 0 when
    the replica table says nothing of roles."""
    if replicas is None or "role" not in replicas:
        return 0
    decoding = replicas.loc[replicas["role"] != "prefill", "replica"]
    return int(decoding.iloc[0]) if len(decoding) else 0


def draw_figures(folder: str | Path, out: str | Path | None = None) -> list[Path]:
    """Draw every standard figure of a sweep folder (every point, see the module docstring).

    Args:
        folder: ``results/NAME`` (with ``summary.parquet``).
        out: where PNGs go (default ``folder/figures``).

    Returns:
        Paths of the PNGs written.

    Raises:
        ValueError: ``folder`` is not a sweep folder (``kvsim.study.load.load_sweep``).
        ValueError: its ``experiment.json`` has an invalid ``analysis`` table (a sweep run
            before kvsim checked it; the message names the file and the key), or its summary
            cannot be drawn (``drawable_rows``).
    """
    sweep = load_sweep(folder)
    try:  # before any figure is written
        analysis = check_analysis(sweep.meta.get("analysis", {}))
    except ValueError as err:
        raise ValueError(f"{Path(folder) / 'experiment.json'}: {err}") from None
    if sweep.num_unfinished:
        logger.warning(
            "%s: %d of %d points have no results (the sweep was interrupted, or they failed: "
            "failures.json); the figures show the %d finished; run the sweep again to finish it",
            folder,
            sweep.num_unfinished,
            sweep.meta["num_points"],
            len(sweep.summary),
        )
    drawn = drawable_rows(sweep)
    out_dir = Path(out) if out is not None else Path(folder) / "figures"
    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if drawn is not None:
        bars = replace(sweep, summary=sweep.summary[drawn].reset_index(drop=True))
        facet = _facet(bars)
        fig = waste_bars(
            bars.summary,
            _short_labels(bars, facet),
            title=f"{sweep.meta.get('name', '')}: where the used KV memory goes",
            facet=facet,
        )
        _save(fig, out_dir / "waste_bars.png", written)
    _vs_figures(sweep, analysis, out_dir, written)
    _fleet_figures(sweep, out_dir, written)
    _point_figures(sweep, out_dir, written)
    _warn_older_figures(out_dir, written)
    return written


def _warn_older_figures(out_dir: Path, written: list[Path]) -> None:
    """Say which PNGs in ``out_dir`` this drawing did not write (an earlier grid's points, a
    figure its analysis no longer asks for): they stay, and would read as this sweep's."""
    kept = {path.name for path in written}
    older = sorted(p.name for p in out_dir.glob("*.png") if p.name not in kept)
    if older:
        shown = ", ".join(older[:3]) + (f" and {len(older) - 3} more" if len(older) > 3 else "")
        logger.warning(
            "%s: %d PNG(s) this plot did not draw are left from earlier (%s); delete them if "
            "they are not this sweep's",
            out_dir,
            len(older),
            shown,
        )


def drawable_rows(sweep: SweepResults) -> pd.Series | None:
    """The rows of ``sweep.summary`` the waste bars can draw (a number in each of
    ``SHARE_COLUMNS``, % of used KV); warns how many are left out (a NaN share, as a point that
    held no KV memory has, would be drawn as a 0 % bar). ``None``, said in an INFO line, where
    the sweep recorded no KV memory (``record_memory = false``: no share of KV at all, of used
    KV or of the whole).

    Raises:
        ValueError: the summary (named by its file) has no rows, lacks a ``NEEDED_COLUMNS``
            column (some share columns but not all), holds text in a share column, or has a
            NaN share in every row.
    """
    table = sweep.summary
    path = stored_table(sweep.folder / "summary.parquet")
    if table.empty:
        raise ValueError(f"{path}: no rows (no point finished: see failures.json), nothing to plot")
    missing = [c for c in NEEDED_COLUMNS if c not in table]
    if "config_key" in table and "capacity_tokens" in table and not recorded_memory(table):
        logger.info("%s: no KV memory recorded (record_memory = false): no waste_bars.png", path)
        return None
    if missing:
        raise ValueError(
            f"{path}: lacks columns {missing}; expected a kvsim sweep summary (kvsim sweep "
            f"writes it) with columns {NEEDED_COLUMNS}"
        )
    text = [c for c in SHARE_COLUMNS if not pd.api.types.is_numeric_dtype(table[c])]
    if text:
        raise ValueError(f"{path}: column(s) {text} are not numbers; expected shares in %")
    drawn = table[SHARE_COLUMNS].notna().all(axis=1)
    if not drawn.any():
        raise ValueError(
            f"{path}: no plottable values: {SHARE_COLUMNS} are NaN in all {len(table)} rows"
        )
    if not drawn.all():
        logger.warning(
            "%s: %d of %d rows have NaN in %s (e.g. a point that held no KV memory), left out "
            "of waste_bars.png",
            path,
            int((~drawn).sum()),
            len(table),
            SHARE_COLUMNS,
        )
    return drawn


FLEET_METRICS = (
    "prefix_cache_hit_rate",
    "time_to_first_token_seconds_p50",
    "time_to_first_token_seconds_p99",
    "request_time_per_output_token_seconds_p99",
    "usd_per_million_output_tokens",
    "goodput_requests_per_usd",
)


def _fleet_figures(sweep: SweepResults, out: Path, written: list[Path]) -> None:
    """A sweep over routers or prefill/decode splits: ``fleet.png``, the fleet metrics by
    point (a bar per point)."""
    fleet = [f for f in sweep.swept_fields if f.startswith("fleet.")]
    if not fleet:
        return
    table = sweep.summary
    metrics = _fleet_metrics(sweep)
    if not metrics:
        return
    labels = row_labels(table, sweep.swept_fields)
    fig = point_bars(
        table, labels, metrics, title=f"{sweep.meta.get('name', '')}: the fleet's metrics"
    )
    _save(fig, out / "fleet.png", written)


def _fleet_metrics(sweep: SweepResults) -> list[str]:
    """The ``FLEET_METRICS`` that ``fleet.png`` draws: those with a value other than 0 at some
    point (an all-zero panel says nothing). A NaN is not measured (a hit rate with no lookup,
    a latency with no finished request, a cost with no GPU price), never a 0: a metric NaN at
    every point is left out (logged), one NaN at some points is drawn "n/a" there (a warning
    gives the count); no metric left: no figure (a warning)."""
    table = sweep.summary
    path = stored_table(sweep.folder / "summary.parquet") or sweep.folder / "summary.parquet"
    present = [m for m in FLEET_METRICS if m in table]
    unmeasured = [m for m in present if table[m].isna().all()]
    if unmeasured:
        logger.info("%s: %s NaN (not measured) at every point, not in fleet.png", path, unmeasured)
    metrics = [m for m in present if table[m].dropna().ne(0).any()]
    for m in metrics:
        missing = int(table[m].isna().sum())
        if missing:
            logger.warning(
                "%s: %s is NaN (not measured) at %d of %d points, drawn n/a in fleet.png",
                path,
                m,
                missing,
                len(table),
            )
    if not metrics:
        logger.warning(
            "%s: no fleet metric %s measured with a value other than 0, no fleet.png",
            path,
            list(FLEET_METRICS),
        )
    return metrics
