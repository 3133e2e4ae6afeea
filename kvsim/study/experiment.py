"""Experiment definitions: a base config plus a grid and zipped lists over dotted config fields.

An experiment TOML (``experiments/NAME.toml``) holds ``[base]`` (a ``SimConfig`` table), ``[grid]``
(each dotted field a list; the cartesian product is taken) and ``[[zip]]`` tables (lists of equal
length stepped together; each table is one axis of the product). ``label`` lists in a grid or zip
table name the points without touching the config. ``[quick]`` holds ``set`` (dotted overrides
for every point) and ``grid`` (replacement grid axes) used by ``--quick`` runs (tests, notebooks).
``[analysis]`` holds what figures, paper checks and notebooks read (``experiment_analysis``).
``[base.workload] preset = "NAME"`` loads a ``workloads/NAME.toml`` preset under the other keys.
"""

from __future__ import annotations

import collections
import copy
import datetime
import difflib
import functools
import itertools
import json
import logging
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kvsim.base.limits import MAX_POINTS, MAX_TIME_S
from kvsim.base.say_once import warn_once
from kvsim.base.textfile import at_lines, read_text, read_toml, toml_key_line
from kvsim.config import SimConfig, apply_overrides, config_from_dict
from kvsim.config.config_file import check_relative_paths, replaced_fields
from kvsim.config.file_kinds import EXPERIMENT_KEYS, check_kind
from kvsim.study.analysis import check_analysis
from kvsim.workload import workloads_dir
from kvsim.workload.spec import missing_preset

logger = logging.getLogger(__name__)
LABEL = "label"
_TOP_KEYS = EXPERIMENT_KEYS
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,99}")
_RESERVED_NAMES = frozenset({"quick", "plan"})  # OUT/quick/NAME and OUT/plan/NAME live there


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

    @functools.cached_property
    def key(self) -> str | None:
        """``SimConfig.key()`` of the point (``None`` for an invalid config); worked out once,
        since a sweep asks for it several times per point (about 70 µs each)."""
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
        analysis: the ``[analysis]`` table, checked by ``experiment_analysis.Analysis``.
        path: the file it was read from (``None``: built from a table), for the line an
            invalid point's field is set on (``field_line``).
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
    path: Path | None = None

    def snapshot_time(self, *, quick: bool = False) -> float | None:
        """Simulated second of the memory-map snapshot (``[quick] snapshot_at_s`` when quick)."""
        if quick and self.quick_snapshot_at_s is not None:
            return self.quick_snapshot_at_s
        return self.snapshot_at_s

    def swept_fields(self, *, quick: bool = False) -> list[str]:
        """Swept dotted fields in table order (``label`` first when present); ``quick`` adds the
        ``[quick] grid`` axes that ``[grid]`` does not have."""
        grid = {**self.grid, **(self.quick_grid if quick else {})}
        names = [*grid, *(k for z in self.zips for k in z)]
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
                apply_overrides(data, {k: v[i] for k, v in axis.items() if k != LABEL})
                return data
        known = [v for axis in self.zips for v in axis.get(LABEL, [])]
        raise ValueError(f"{self.name}: no point labelled {label!r}; labels: {known}")

    def field_line(self, dotted: str, *, swept: bool, quick: bool) -> int | None:
        """The line of the experiment's file that sets the config field ``dotted`` of a point:
        where it is ``swept``, in ``[grid]``, a ``[[zip]]`` or (``quick``) ``[quick]``; else in
        ``[quick] set`` (``quick``) or ``[base]`` (its table's header where ``[base]`` leaves it
        unset); ``None`` without a file or where no line does."""
        if self.path is None:
            return None
        text = read_text(self.path)
        places = [*(("quick.grid", "quick.set") if quick else ()), "grid", "zip"]
        if not swept:
            places = ["quick.set"] if quick else []
        for table in places:
            number = toml_key_line(text, f"{table}.{dotted}", set_only=True)
            if number is not None:
                return number
        return None if swept else toml_key_line(text, f"base.{dotted}")

    def points(self, *, quick: bool = False) -> list[Point]:
        """Expand the grid and zipped axes into points, in order (grid axes vary slowest)."""
        grid = {**self.grid, **(self.quick_grid if quick else {})}
        _warn_replaced_tables(self.base, grid, self.zips, self.quick_set if quick else {}, quick)
        axes: list[list[dict[str, Any]]] = [[{k: v} for v in values] for k, values in grid.items()]
        for z in self.zips:
            rows = zip(*z.values(), strict=True)
            axes.append([dict(zip(z, values, strict=True)) for values in rows])
        points = []
        presets: dict[Path, dict[str, Any]] = {}  # each preset file read once per expansion
        for i, combo in enumerate(itertools.product(*axes)):
            overrides: dict[str, Any] = {}
            for part in combo:
                overrides.update(part)
            label = overrides.pop(LABEL, None)
            extra = self.quick_set if quick else {}
            points.append(make_point(i, self.base, overrides, extra, label, presets))
        return points


def make_point(
    index: int,
    base: dict[str, Any],
    overrides: dict[str, Any],
    extra: dict[str, Any],
    label: str | None,
    presets: dict[Path, dict[str, Any]] | None = None,
) -> Point:
    """Validate one point's config; a bad config gives a ``Point`` with ``error`` set.
    ``presets``: preset tables already read, by path (see ``resolve_workload_preset``)."""
    data = json.loads(json.dumps(base))
    try:
        apply_overrides(data, {**overrides, **extra})  # quick runs shrink every point
        resolve_workload_preset(data, presets)
        config = config_from_dict(data, varied=[*overrides, *extra])
    except (ValueError, FileNotFoundError) as err:
        return Point(index, overrides, label, None, str(err))
    # the swept values as they ran: a quick override of a swept field replaces it
    shown = {k: extra.get(k, v) for k, v in overrides.items()}
    return Point(index, shown, label, config)


def resolve_workload_preset(
    data: dict[str, Any], presets: dict[Path, dict[str, Any]] | None = None
) -> None:
    """Replace ``data["workload"]["preset"]`` by the preset's table, other keys winning.

    ``presets`` caches the tables read, by path, for one expansion of an experiment (a grid
    names the same preset at every point; reading and parsing it took about 40 % of the
    expansion). Each point gets its own copy of the table.

    Raises:
        FileNotFoundError: no such preset.
        ValueError: the preset file is not UTF-8 TOML, or its workload is not a table.
    """
    workload = data.get("workload")
    if not isinstance(workload, dict) or "preset" not in workload:
        return
    name = str(workload.pop("preset"))
    path = Path(name) if name.endswith(".toml") else workloads_dir() / f"{name}.toml"
    if not path.is_file():  # (named as a field, so that a sweep's error finds its line)
        raise FileNotFoundError(f"workload.preset: {missing_preset(name, path)}")
    if presets is None:
        table = read_toml(path)
    else:
        if path not in presets:
            presets[path] = read_toml(path)
        table = copy.deepcopy(presets[path])  # each point its own copy
    preset = table.get("workload", table)
    if not isinstance(preset, dict):
        raise ValueError(f"{path}: [workload] must be a table, got {preset!r}")
    data["workload"] = {**preset, **workload}


def check_name(name: Any, what: str = "name") -> str:
    """``name`` if it is a results-folder name: 1-100 of ``A-Z a-z 0-9 _ . + -``, starting with a
    letter or digit, no ``..`` (so no path separators, no absolute paths, no parent folders), and
    none of the folders a results root reserves (``quick``, ``plan``).

    Raises:
        ValueError: naming ``what`` and the value.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise ValueError(
            f"{what}: expected a folder name of letters, digits, '_', '.', '+' or '-' (at most "
            f"100, starting with a letter or digit; no '/', no '..'), got {name!r}"
        )
    if name in _RESERVED_NAMES:
        raise ValueError(
            f"{what}: {name!r} is a folder the results root reserves "
            f"({', '.join(sorted(_RESERVED_NAMES))}); choose another name"
        )
    return name


def _check_table(where: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{where}: must be a table, got {_short(value)}")
    return value


def _check_lists(where: str, table: Any) -> dict[str, list[Any]]:
    table = _check_table(f"{where} (dotted field = [values])", table)
    for key, values in table.items():
        _check_dotted(f"{where}.{key}", key)
        if not isinstance(values, list) or not values:
            raise ValueError(f"{where}.{key}: must be a non-empty list, got {_short(values)}")
        if key == LABEL and not all(isinstance(v, (str, int, float)) for v in values):
            raise ValueError(f"{where}.label: labels must be strings, got {_short(values)}")
        if key == LABEL:  # (printed in tables and legends as given)
            for v in values:
                if isinstance(v, str) and not v.isprintable():
                    raise ValueError(
                        f"{where}.label: expected labels without line breaks or control "
                        f"characters, got {v!r}"
                    )
    return dict(table)


def _check_dotted(where: str, key: str) -> None:
    if not all(part.strip() for part in key.split(".")):
        raise ValueError(f"{where}: expected a dotted field such as cache.block_size_tokens")


def _check_plain(where: str, value: Any) -> None:
    """TOML dates and times are no config values (and do not serialise to JSON)."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_plain(f"{where}.{key}", item)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_plain(f"{where}[{i}]", item)
    elif isinstance(value, (datetime.date, datetime.time)):
        raise ValueError(f"{where}: a TOML date/time is not a config value, got {value}")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: must be a finite number, got {value!r}")


def _check_one_axis_each(
    grid: dict[str, list[Any]], zips: list[dict[str, list[Any]]], quick_grid: dict[str, list[Any]]
) -> None:
    """A field on two axes would take one axis' value at each point and drop the other's
    (``[quick] grid`` replaces ``[grid]``'s axes: a field on both is one axis).

    Raises:
        ValueError: naming the field and both axes (``grid``, ``quick.grid``, ``zip[i]``).
    """
    place = {**dict.fromkeys(quick_grid, "quick.grid"), **dict.fromkeys(grid, "grid")}
    for i, axis in enumerate(zips):
        for key in axis:
            if key in place:
                raise ValueError(
                    f"zip[{i}].{key}: {key!r} is already swept by {place[key]}; on two axes "
                    "each point would keep one axis' value and drop the other's: sweep it on "
                    "one axis"
                )
            place[key] = f"zip[{i}]"


def _warn_repeated_labels(
    grid: dict[str, list[Any]], zips: list[dict[str, list[Any]]], quick_grid: dict[str, list[Any]]
) -> None:
    """Warn when one ``label`` list names two of its entries alike (rows and bars then share
    a name)."""
    tables = [("grid", grid), ("quick.grid", quick_grid)]
    tables += [(f"zip[{i}]", z) for i, z in enumerate(zips)]
    for where, table in tables:
        counts = collections.Counter(table.get(LABEL, []))
        repeated = {label: n for label, n in counts.items() if n > 1}
        if repeated:
            shown = ", ".join(f"{label!r} {n} times" for label, n in repeated.items())
            logger.warning("%s.label: %s; the points it names share a label", where, shown)


def _warn_replaced_tables(
    base: dict[str, Any],
    grid: dict[str, list[Any]],
    zips: list[dict[str, list[Any]]],
    quick_set: dict[str, Any],
    quick: bool,
) -> None:
    """Say which of ``[base]``'s fields an axis over their whole table (``"workload" =
    ["sharegpt_like", ...]``) leaves unused in the points (``grid``: the run's, the quick
    grid's axes included in a quick run; ``quick_set``: a quick run's settings), as ``kvsim run
    --set`` says it (``kvsim.config.config_file.replaced_fields``)."""
    axes: dict[str, str] = {}
    values: dict[str, Any] = {}  # an axis of tables: the fields every one of them gives
    tables = [("grid", grid), *((f"zip[{i}]", z) for i, z in enumerate(zips))]
    for where, table in tables:
        for key, axis in table.items():
            axes[key] = where
            given = [set(v) for v in axis if isinstance(v, dict)]
            every = given and len(given) == len(axis)
            values[key] = dict.fromkeys(set.intersection(*given)) if every else None
    for key, value in quick_set.items():  # (a quick run's setting of a field keeps it there)
        values[key] = value
    # (a swept TABLE.FIELD sets that field again in every point: it stays)
    for dotted, dropped in replaced_fields(base, values).items():
        if dotted not in axes:
            continue
        warn_once(
            logger,
            "%s: %s replaces [base.%s] in every %spoint: its %s not used (sweep %s.FIELD, or "
            "give the values in full tables, to keep one)",
            axes[dotted],
            dotted,
            dotted,
            "quick " if quick else "",
            ", ".join(dropped) + (" is" if len(dropped) == 1 else " are"),
            dotted,
        )


def _snapshot(where: str, value: Any) -> float | None:
    """A memory-map snapshot time: ``None`` or a finite number of seconds in [0, MAX_TIME_S]."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{where}: expected a number of simulated seconds, got {_short(value)}")
    if not 0 <= value <= MAX_TIME_S:
        raise ValueError(f"{where}: expected seconds in [0, {MAX_TIME_S:g}], got {value!r}")
    return float(value)


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _num_points(grid: dict[str, list[Any]], zips: list[dict[str, list[Any]]]) -> int:
    sizes = [len(v) for v in grid.values()] + [len(next(iter(z.values()))) for z in zips if z]
    return math.prod(sizes)


def parse_experiment(data: dict[str, Any], *, name: str) -> Experiment:
    """Validate an experiment table (as read from TOML).

    Raises:
        ValueError: unknown keys, a section that is not a table, non-list axes, zipped lists of
            unequal length, a bad ``name`` or ``snapshot_at_s``, or more than
            ``kvsim.base.limits.MAX_POINTS`` points; the message names the key.
    """
    _check_table("experiment", data)
    unknown = set(data) - _TOP_KEYS
    if unknown:
        config = sorted(unknown & set(SimConfig.model_fields))
        hint = ""
        if config:  # (a section as [base.NAME], a value under [base])
            name = config[0]
            where = f"[base.{name}]" if isinstance(data[name], dict) else f"[base] {name} = ..."
            hint = f" (a config's fields go under [base]: {where})"
        else:  # (a misspelt table: [gird])
            close = difflib.get_close_matches(sorted(unknown)[0], sorted(_TOP_KEYS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(
            f"experiment: unknown keys {sorted(unknown)}; expected {sorted(_TOP_KEYS)}{hint}"
        )
    base = _check_table("base", data.get("base", {}))
    _check_plain("base", base)
    grid = _check_lists("grid", data.get("grid", {}))
    raw_zips = data.get("zip", [])
    raw_zips = [raw_zips] if isinstance(raw_zips, dict) else raw_zips
    if not isinstance(raw_zips, list):
        raise ValueError(f"zip: must be a table or [[zip]] tables, got {_short(raw_zips)}")
    zips = [_check_lists(f"zip[{i}]", z) for i, z in enumerate(raw_zips)]
    for i, z in enumerate(zips):
        if not z:  # (an axis of no values: the product of the axes, every point, is empty)
            raise ValueError(
                f"zip[{i}]: an empty [[zip]] table would make no point at all; give it lists "
                "of equal length or delete it"
            )
        lengths = {k: len(v) for k, v in z.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"zip[{i}]: lists must have equal lengths, got {lengths}")
    _check_plain("grid", grid)
    _check_plain("zip", zips)
    quick = _check_table("quick", data.get("quick", {}))
    unknown_quick = set(quick) - {"set", "grid", "snapshot_at_s"}
    if unknown_quick:
        raise ValueError(
            f"quick: unknown keys {sorted(unknown_quick)}; expected set, grid, snapshot_at_s"
        )
    quick_set = _check_table("quick.set", quick.get("set", {}))
    for key in quick_set:
        _check_dotted(f"quick.set.{key}", key)
    _check_plain("quick", quick)
    quick_grid = _check_lists("quick.grid", quick.get("grid", {}))
    _check_one_axis_each(grid, zips, quick_grid)
    _warn_repeated_labels(grid, zips, quick_grid)
    snapshot = _snapshot("snapshot_at_s", data.get("snapshot_at_s"))
    description = data.get("description", "")
    if not isinstance(description, str):
        raise ValueError(f"description: must be a string, got {_short(description)}")
    num_points = max(_num_points(grid, zips), _num_points({**grid, **quick_grid}, zips))
    if num_points > MAX_POINTS:
        raise ValueError(
            f"grid/zip: {num_points:,} points (the product of the axes' lengths), more than the "
            f"{MAX_POINTS:,} one sweep runs; split the experiment"
        )
    return Experiment(
        name=check_name(data.get("name", name), "name"),
        base=dict(base),
        grid=grid,
        zips=zips,
        quick_set=dict(quick_set),
        quick_grid=quick_grid,
        snapshot_at_s=snapshot,
        quick_snapshot_at_s=_snapshot("quick.snapshot_at_s", quick.get("snapshot_at_s", snapshot)),
        description=description,
        analysis=check_analysis(data.get("analysis", {})),
    )


def load_experiment(path: str | Path) -> Experiment:
    """Read ``experiments/NAME.toml``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a folder, not UTF-8, invalid TOML, another kind of kvsim file
            (``kvsim.config.file_kinds``) or an invalid experiment table (the message starts with
            the file's path).
    """
    path = Path(path)
    data = read_toml(path)
    if not data:  # (an empty table is a valid config: not the kind to name)
        raise ValueError(
            f"{path}: sets nothing (empty, or only comments); expected an experiment: [base] "
            "and [grid] or [[zip]] axes (experiments/*.toml)"
        )
    check_kind(path, data, "experiment")
    try:
        experiment = parse_experiment(data, name=path.stem)
    except ValueError as err:
        raise ValueError(at_lines(path, str(err))) from None
    check_relative_paths(path, experiment.base, "base")
    axes = [("grid", experiment.grid), ("quick.grid", experiment.quick_grid)]
    axes += [("zip", z) for z in experiment.zips]
    for table, axis in axes:  # (a swept path: each value as the base's)
        for dotted, values in axis.items():
            section, _, key = dotted.partition(".")
            for value in values:
                check_relative_paths(path, {section: {key: value} if key else value}, table)
    return replace(experiment, path=path)
