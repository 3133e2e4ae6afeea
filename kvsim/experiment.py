"""Experiment definitions: a base config plus a grid and zipped lists over dotted config fields.

An experiment TOML (``experiments/NAME.toml``) holds ``[base]`` (a ``SimConfig`` table), ``[grid]``
(each dotted field a list; the cartesian product is taken) and ``[[zip]]`` tables (lists of equal
length stepped together; each table is one axis of the product). ``label`` lists in a grid or zip
table name the points without touching the config. ``[quick]`` holds ``set`` (dotted overrides
for every point) and ``grid`` (replacement grid axes) used by ``--quick`` runs (tests, notebooks).
``[analysis]`` is free-form (latency targets for notebooks).
``[base.workload] preset = "NAME"`` loads a ``workloads/NAME.toml`` preset under the other keys.
"""

from __future__ import annotations

import itertools
import json
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvsim.config import SimConfig, config_from_dict, set_dotted
from kvsim.workload import workloads_dir

LABEL = "label"
_TOP_KEYS = {"name", "description", "base", "grid", "zip", "quick", "snapshot_at_s", "analysis"}


@dataclass(frozen=True)
class Point:
    """One point of an experiment.

    Attributes:
        index: position in expansion order (row order of the summary table).
        overrides: dotted field -> value applied to the base (the swept values).
        label: the point's ``label`` value, or ``None``.
        config: the validated config, or ``None`` when validation failed.
        error: the validation message when ``config`` is ``None``.
    """

    index: int
    overrides: dict[str, Any]
    label: str | None
    config: SimConfig | None
    error: str | None = None

    @property
    def key(self) -> str | None:
        """``SimConfig.key()`` of the point (``None`` for an invalid config)."""
        return None if self.config is None else self.config.key()

    def describe(self) -> str:
        """The swept values as ``a.b=1, c=2`` (for logs and error reports)."""
        shown = {**({LABEL: self.label} if self.label is not None else {}), **self.overrides}
        return ", ".join(f"{k}={v!r}" for k, v in shown.items()) or "(base config)"


@dataclass(frozen=True)
class Experiment:
    """A parsed experiment file (see the module docstring for the format).

    Attributes:
        name: results folder name (``results/NAME``); defaults to the file's stem.
        base: the base ``SimConfig`` table (plain TOML data).
        grid: dotted field -> list of values (cartesian product, in file order).
        zips: zipped axes, each dotted field -> list of values (equal lengths).
        quick_set: dotted overrides applied to every point in quick mode.
        quick_grid: grid axes replaced in quick mode.
        snapshot_at_s: simulated second at which each point's KV pool is snapshotted for a
            memory map (``None``: no snapshot).
        quick_snapshot_at_s: the same in quick mode (``[quick] snapshot_at_s``).
        description: free text.
        analysis: free-form parameters for notebooks and figures (e.g. latency targets).
    """

    name: str
    base: dict[str, Any]
    grid: dict[str, list[Any]] = field(default_factory=dict)
    zips: list[dict[str, list[Any]]] = field(default_factory=list)
    quick_set: dict[str, Any] = field(default_factory=dict)
    quick_grid: dict[str, list[Any]] = field(default_factory=dict)
    snapshot_at_s: float | None = None
    quick_snapshot_at_s: float | None = None
    description: str = ""
    analysis: dict[str, Any] = field(default_factory=dict)

    def snapshot_time(self, *, quick: bool = False) -> float | None:
        """Simulated second of the memory-map snapshot (``[quick] snapshot_at_s`` when quick)."""
        if quick and self.quick_snapshot_at_s is not None:
            return self.quick_snapshot_at_s
        return self.snapshot_at_s

    @property
    def swept_fields(self) -> list[str]:
        """Swept dotted fields in table order (``label`` first when present)."""
        names = [*self.grid, *(k for z in self.zips for k in z)]
        has_label = LABEL in names
        return ([LABEL] if has_label else []) + [n for n in dict.fromkeys(names) if n != LABEL]

    def labelled_base(self, label: str) -> dict[str, Any]:
        """The base table with the zipped overrides of the points labelled ``label``.

        Raises:
            ValueError: no zipped axis has that label.
        """
        data: dict[str, Any] = json.loads(json.dumps(self.base))
        for axis in self.zips:
            labels = axis.get(LABEL, [])
            if label in labels:
                i = labels.index(label)
                for dotted, values in axis.items():
                    if dotted != LABEL:
                        set_dotted(data, dotted, values[i])
                return data
        known = [v for axis in self.zips for v in axis.get(LABEL, [])]
        raise ValueError(f"{self.name}: no point labelled {label!r}; labels: {known}")

    def points(self, *, quick: bool = False) -> list[Point]:
        """Expand the grid and zipped axes into points, in order (grid axes vary slowest)."""
        grid = {**self.grid, **(self.quick_grid if quick else {})}
        axes: list[list[dict[str, Any]]] = [[{k: v} for v in values] for k, values in grid.items()]
        for z in self.zips:
            rows = zip(*z.values(), strict=True)
            axes.append([dict(zip(z, values, strict=True)) for values in rows])
        points = []
        for i, combo in enumerate(itertools.product(*axes)):
            overrides: dict[str, Any] = {}
            for part in combo:
                overrides.update(part)
            label = overrides.pop(LABEL, None)
            extra = self.quick_set if quick else {}
            points.append(make_point(i, self.base, overrides, extra, label))
        return points


def make_point(
    index: int,
    base: dict[str, Any],
    overrides: dict[str, Any],
    extra: dict[str, Any],
    label: str | None,
) -> Point:
    """Validate one point's config; a bad config gives a ``Point`` with ``error`` set."""
    data = json.loads(json.dumps(base))
    try:
        for dotted, value in {**overrides, **extra}.items():  # quick runs shrink every point
            set_dotted(data, dotted, value)
        resolve_workload_preset(data)
        config = config_from_dict(data)
    except (ValueError, FileNotFoundError) as err:
        return Point(index, overrides, label, None, str(err))
    return Point(index, overrides, label, config)


def resolve_workload_preset(data: dict[str, Any]) -> None:
    """Replace ``data["workload"]["preset"]`` by the preset's table, other keys winning."""
    workload = data.get("workload")
    if not isinstance(workload, dict) or "preset" not in workload:
        return
    name = str(workload.pop("preset"))
    path = Path(name) if name.endswith(".toml") else workloads_dir() / f"{name}.toml"
    if not path.is_file():
        names = sorted(p.stem for p in workloads_dir().glob("*.toml"))
        raise FileNotFoundError(f"workload.preset: no preset {name!r} ({path}); presets: {names}")
    table = tomllib.loads(path.read_text())
    data["workload"] = {**table.get("workload", table), **workload}


def _check_lists(where: str, table: Any) -> dict[str, list[Any]]:
    if not isinstance(table, dict):
        raise ValueError(f"{where}: must be a table of dotted field = [values], got {table!r}")
    for key, values in table.items():
        if not isinstance(values, list) or not values:
            raise ValueError(f"{where}.{key}: must be a non-empty list, got {values!r}")
    return dict(table)


def parse_experiment(data: dict[str, Any], *, name: str) -> Experiment:
    """Validate an experiment table (as read from TOML).

    Raises:
        ValueError: unknown top-level keys, non-list axes, or zipped lists of unequal length.
    """
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ValueError(
            f"experiment: unknown keys {sorted(unknown)}; expected {sorted(_TOP_KEYS)}"
        )
    grid = _check_lists("grid", data.get("grid", {}))
    raw_zips = data.get("zip", [])
    raw_zips = [raw_zips] if isinstance(raw_zips, dict) else raw_zips
    zips = [_check_lists(f"zip[{i}]", z) for i, z in enumerate(raw_zips)]
    for i, z in enumerate(zips):
        lengths = {k: len(v) for k, v in z.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"zip[{i}]: lists must have equal lengths, got {lengths}")
    quick = data.get("quick", {})
    snapshot = data.get("snapshot_at_s")
    unknown_quick = set(quick) - {"set", "grid", "snapshot_at_s"}
    if unknown_quick:
        raise ValueError(
            f"quick: unknown keys {sorted(unknown_quick)}; expected set, grid, snapshot_at_s"
        )
    return Experiment(
        name=str(data.get("name", name)),
        base=dict(data.get("base", {})),
        grid=grid,
        zips=zips,
        quick_set=dict(quick.get("set", {})),
        quick_grid=_check_lists("quick.grid", quick.get("grid", {})),
        snapshot_at_s=None if snapshot is None else float(snapshot),
        quick_snapshot_at_s=_float_or_none(quick.get("snapshot_at_s", snapshot)),
        description=str(data.get("description", "")),
        analysis=dict(data.get("analysis", {})),
    )


def _float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def load_experiment(path: str | Path) -> Experiment:
    """Read ``experiments/NAME.toml``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: invalid TOML or experiment table.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: invalid TOML: {err}") from None
    return parse_experiment(data, name=path.stem)
