"""Reading sweep results back, and questions answered from summary tables (pure functions).

``load_sweep(folder)`` gives a ``SweepResults`` (the summary table, each point's ``Results`` and
memory-map snapshot); ``smallest_budget`` answers the capacity-planning question (the smallest KV
budget meeting latency targets) from a summary table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvsim.base.tablefile import read_table, stored_table
from kvsim.base.textfile import read_json
from kvsim.results import Results
from kvsim.results.folders import check_folder
from kvsim.view.labels import field_name, field_text, field_unit, field_value, merged_name


def row_labels(table: pd.DataFrame, fields: list[str]) -> list[str]:
    """One label per row: the ``label`` column if present, else ``name=value`` of ``fields``
    (``values_text``)."""
    if "label" in table.columns and "label" in fields:
        # fields zipped with the label (one value per label) add nothing to it
        others = [
            f
            for f in fields
            if f != "label" and f in table and table.groupby("label")[f].nunique().max() > 1
        ]
        base = table["label"].astype(str)
        if not others or table["label"].nunique() == len(table):
            return list(base)
        return [f"{b} {text}" for b, text in zip(base, values_text(table, others), strict=True)]
    if not fields:
        return [str(i) for i in range(len(table))]
    return values_text(table, fields)


def field_groups(table: pd.DataFrame, fields: list[str]) -> list[tuple[str, list[str]]]:
    """``fields`` (those in ``table``) in groups shown as one: fields zipped to the same shown
    values on every row (a drive's read and write bandwidth), each group with its name
    (``merged_name``: ``disk_read/write_bandwidth``); every other field alone, by its
    ``field_name``."""
    shown = {f: [field_value(f, v) for v in table[f]] for f in fields if f in table}
    groups: list[list[str]] = []
    for f in shown:
        twin = next(
            (
                g
                for g in groups
                if shown[g[0]] == shown[f]
                and field_unit(g[0]) == field_unit(f)
                and len(set(shown[f])) > 1  # (one value: equal by chance, not zipped)
            ),
            None,
        )
        if twin is None:
            groups.append([f])
        else:
            twin.append(f)
    return [(merged_name([field_name(f) for f in g]), g) for g in groups]


def values_text(table: pd.DataFrame, fields: list[str]) -> list[str]:
    """``name=value`` of ``fields`` for each row, joined by commas, in the units people read
    them in (``field_text``: ``disk_read_bandwidth=6.4 GB/s``, not ``6400000000.0``); fields
    zipped to the same values named once (``field_groups``)."""
    groups = field_groups(table, fields)
    return [
        ", ".join(field_text(g[0], table[g[0]].iloc[i], name) for name, g in groups)
        for i in range(len(table))
    ]


@dataclass
class SweepResults:
    """A finished sweep on disk (``results/NAME``).

    Attributes:
        folder: the sweep's folder.
        summary: ``summary.parquet``: swept fields, then summary metrics (one row per point).
        meta: ``experiment.json`` (name, swept_fields, num_points, quick, snapshot_at_s).
    """

    folder: Path
    summary: pd.DataFrame
    meta: dict[str, Any]

    @property
    def swept_fields(self) -> list[str]:
        return list(self.meta.get("swept_fields", []))

    @property
    def num_unfinished(self) -> int:
        """Points of the experiment without a row in ``summary`` (interrupted or failed; 0
        for a sweep saved before ``experiment.json`` counted its points)."""
        return max(int(self.meta.get("num_points", 0)) - len(self.summary), 0)

    @property
    def keys(self) -> list[str]:
        """Point keys in table order."""
        return [str(k) for k in self.summary["config_key"]]

    def labels(self) -> list[str]:
        """One readable label per point (see ``row_labels``)."""
        return row_labels(self.summary, self.swept_fields)

    def results(self, key: str) -> Results:
        """The point's full ``Results`` (requests and memory tables)."""
        return Results.load(self.folder / "points" / key)

    def snapshot(self, key: str) -> pd.DataFrame | None:
        """The point's KV-pool snapshot (``poolmap.SNAPSHOT_COLUMNS``), if one was taken."""
        path = self.folder / "points" / key / "snapshot.parquet"
        return read_table(path) if stored_table(path) is not None else None


def load_sweep(folder: str | Path) -> SweepResults:
    """Load ``results/NAME`` written by ``kvsim.study.sweep.run_sweep``.

    Raises:
        ValueError: ``folder`` is not a sweep folder (``kvsim.results.folders.check_folder``),
            or a corrupt ``summary.parquet`` or ``experiment.json`` (naming the file).
    """
    folder = Path(folder)
    check_folder(folder, "sweep", str(folder))
    meta_path = folder / "experiment.json"
    meta = read_json(meta_path) if meta_path.is_file() else {}
    if not isinstance(meta, dict):
        raise ValueError(f"{meta_path}: expected a JSON object (a sweep's experiment.json)")
    return SweepResults(folder, read_table(folder / "summary.parquet"), meta)


def smallest_budget(
    table: pd.DataFrame, *, budget: str, targets: dict[str, float], by: list[str] | None = None
) -> pd.DataFrame:
    """The smallest budget from which on every larger budget meets all targets.

    Args:
        table: a summary table with the ``budget`` column and the target metric columns.
        budget: the budget column (e.g. ``"cache.kv_cache_gib"``, GiB).
        targets: metric -> upper bound (e.g.
            ``{"request_time_per_output_token_seconds_p95": 0.05}``, seconds); NaN fails.
        by: columns that split the table (e.g. ``["label"]``); one answer per group.

    Returns:
        One row per group: the ``by`` columns, ``budget`` (NaN when no budget holds) and
        ``holds_at_max`` (whether the largest budget tried meets the targets).
    """
    groups = table.groupby(by, sort=False) if by else [((), table)]
    rows = []
    for name, group in groups:
        g = group.sort_values(budget)
        ok = np.ones(len(g), bool)
        for metric, bound in targets.items():
            ok &= (g[metric] <= bound).to_numpy()
        # ok from i on: reversed cumulative AND
        suffix_ok = np.flip(np.logical_and.accumulate(np.flip(ok)))
        values = g[budget].to_numpy()
        answer = float(values[suffix_ok][0]) if suffix_ok.any() else float("nan")
        keys = dict(zip(by or [], name if isinstance(name, tuple) else (name,), strict=False))
        rows.append({**keys, budget: answer, "holds_at_max": bool(ok[-1]) if len(ok) else False})
    return pd.DataFrame(rows)
