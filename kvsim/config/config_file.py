"""Reading a config TOML file into a ``SimConfig``: ``load_config``, whose errors name the file,
the line that sets the faulty field, the ``--set`` overrides to blame, and what a file of another
kind (``kvsim.config.file_kinds``), a folder or a trace given instead is for."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from kvsim.base.say_once import warn_once
from kvsim.base.textfile import at_lines, read_text, read_toml, toml_key_line
from kvsim.config.file_kinds import check_kind
from kvsim.config.sim import SimConfig, config_from_dict

logger = logging.getLogger(__name__)


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> SimConfig:
    """Load a ``SimConfig`` from TOML with dotted overrides (``{"cache.block_size_tokens": 32}``,
    as ``kvsim run --set`` gives them).

    Raises:
        ValueError: the file is a folder, not UTF-8, not valid TOML, another kind of kvsim file
            (``kvsim.config.file_kinds``), or a field is invalid (the message names the file or
            the field, and the ``--set`` overrides when the file alone is valid).
        FileNotFoundError: no such file.
    """
    data = _read_config_toml(Path(path))
    check_kind(path, data, "config")
    check_relative_paths(Path(path), data, skip=overrides or {})
    _warn_replaced_tables(Path(path), data, overrides or {})
    if not data and not overrides:  # legal TOML, but meant to say something (a truncated file?)
        warn_once(
            logger,
            "%s sets no field (empty, or only comments): every field is kvsim's "
            "default (`kvsim presets` lists presets)",
            path,
        )
    try:
        config = config_from_dict(data, overrides)
    except ValueError as err:
        message = str(err)
    else:
        if "workload.trace" in (overrides or {}):
            check_trace(config, lambda: "--set workload.trace")
        else:
            _check_trace_file(Path(path), config)
        return config
    if not overrides:
        raise ValueError(at_lines(path, message))
    try:
        config_from_dict(data, warn=False)  # (built to place the blame, not run: says nothing)
    except ValueError:
        field = message.split(":", 1)[0]
        if field in overrides:  # the override's fault, not the file's
            pair = _set_pairs({field: overrides[field]})
            raise ValueError(f"{path} with {pair}: {message}") from None
        raise ValueError(at_lines(path, message)) from None
    # the file alone is valid: the overrides made it invalid (those the message names, by their
    # dotted key or their last part: "allocator 'radix'")
    named = {
        k: v
        for k, v in overrides.items()
        if k in message or re.search(rf"\b{re.escape(k.rsplit('.', 1)[-1])}\b", message)
    }
    raise ValueError(f"{path} with {_set_pairs(named or overrides)}: {message}")


def _set_pairs(overrides: dict[str, Any]) -> str:
    """``--set key=value`` for each override, as the command line gave it."""
    return " ".join(
        f"--set {k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in overrides.items()
    )


def replaced_fields(data: dict[str, Any], overrides: dict[str, Any]) -> dict[str, list[str]]:
    """The fields of ``data`` that an override of their whole table (``workload=NAME``,
    ``model=NAME``, a JSON table) leaves unused, by table: the table replaces the file's, as
    documented, and only fields set again (``TABLE.FIELD``, or inside the new table) stay."""
    out: dict[str, list[str]] = {}
    for dotted, value in overrides.items():
        section = data.get(dotted) if "." not in dotted else None
        if not isinstance(section, dict) or not section:
            continue
        kept = {k.split(".", 2)[1] for k in overrides if k.startswith(f"{dotted}.")}
        if isinstance(value, dict):
            kept |= set(value)
        dropped = [k for k in section if k not in kept]
        if dropped:
            out[dotted] = dropped
    return out


def _warn_replaced_tables(path: Path, data: dict[str, Any], overrides: dict[str, Any]) -> None:
    """Say which of the file's fields a ``--set`` of their whole table leaves unused
    (``replaced_fields``): a rate or a trace the file set would otherwise vanish without a
    word."""
    for dotted, dropped in replaced_fields(data, overrides).items():
        value = overrides[dotted]
        warn_once(
            logger,
            "--set %s=%s replaces %s's [%s] table: its %s not used (--set %s.FIELD=... "
            "gives one again)",
            dotted,
            value if isinstance(value, str) else json.dumps(value),
            path,
            dotted,
            ", ".join(dropped) + (" is" if len(dropped) == 1 else " are"),
            dotted,
        )


def _check_trace_file(path: Path, config: SimConfig) -> None:
    """``check_trace`` naming the config file and the line that sets the trace."""

    def where() -> str:
        line = toml_key_line(read_text(path), "workload.trace")
        return f"{path} line {line}: workload.trace" if line else f"{path}: workload.trace"

    check_trace(config, where)


def check_trace(config: SimConfig, where: Callable[[], str]) -> None:
    """A trace file the config names by path that is missing (or a folder) fails the run before
    it starts: say so now (a catalogued trace's data folder, or a ``fallback_synthetic``
    workload, is the run's to judge).

    Args:
        config: the run's config.
        where: what set the trace, for the message (a config file's line, ``--set
            workload.trace``); called only on an error.

    Raises:
        DataNotFoundError: ``where()``, then what was looked for.
    """
    from kvsim.workload import DataNotFoundError, resolve_trace

    trace = config.workload.trace
    if trace is None or config.workload.fallback_synthetic:
        return
    if _named_not_path("workload.trace", trace):
        return
    try:
        resolve_trace(trace)
    except DataNotFoundError as err:
        raise DataNotFoundError(f"{where()}: {err}") from None


# the fields whose value is a file path (a folder for hf_config and tokenizer)
PATH_FIELDS = (
    "workload.trace",
    "workload.length_table",
    "workload.tokenizer",
    "workload.preset",
    "model.hf_config",
    "cost.calibration",
    "pricing.table",
)


def _named_not_path(field: str, value: str) -> bool:
    """Whether ``value`` of the path field ``field`` names something kvsim ships rather than a
    file: a catalogued trace (by name or file name, read from ``KVSIM_DATA``), a shipped length
    table, the analytic calibration, a workload preset by name."""
    from kvsim.workload.catalog import TRACES
    from kvsim.workload.length_table import shipped_table_path

    if field == "workload.trace":
        return value in TRACES or any(t.file_name == value for t in TRACES.values())
    if field == "workload.length_table":
        return shipped_table_path(value) is not None
    if field == "cost.calibration":
        return value == "analytic"
    if field == "workload.preset":
        return not value.endswith(".toml")
    return False


def check_relative_paths(
    path: Path, data: dict[str, Any], table: str = "", skip: Collection[str] = ()
) -> None:
    """A relative path in a file (``PATH_FIELDS``: a trace, a length table, a tokenizer, a
    workload preset file, an HF config, a calibration or price table) is read from the current
    folder (as ``--set`` gives it), not the file's: say so where the file is only beside it (the
    run failed with "no such file" though it is there), or where both folders hold one (the
    current folder's is read). ``table``: the table of ``path`` that ``data`` is (``base`` in
    an experiment); ``skip``: the fields a later layer sets (``--set``).

    Raises:
        ValueError: a path's file is beside ``path`` but not in the current folder.
    """
    if path.parent.resolve() == Path.cwd():
        return
    workload = data.get("workload")
    for field in PATH_FIELDS:
        if field in skip or field.partition(".")[0] in skip:  # (set again, or its table)
            continue
        section, _, key = field.partition(".")
        values = data.get(section)
        value = values.get(key) if isinstance(values, dict) else None
        if field == "workload.preset" and isinstance(workload, str):
            value = workload  # (``workload = "wl.toml"``)
        if not isinstance(value, str) or not value or Path(value).is_absolute():
            continue
        if _named_not_path(field, value):
            continue
        beside = path.parent / value
        if not beside.exists():
            continue
        here = Path(value)
        shown = field if field != "workload.preset" or not isinstance(workload, str) else "workload"
        dotted = f"{table}.{shown}" if table else shown
        line = toml_key_line(read_text(path), dotted)
        where = f"{path} line {line}" if line else str(path)
        if not here.exists():
            raise ValueError(
                f"{where}: {shown} = {value!r} is read from the current folder "
                f"({Path.cwd()}), which has no such file; the one beside {path.name} is {beside}: "
                f"write its path from here ({str(beside)!r}) or an absolute one"
            )
        if here.resolve() != beside.resolve():
            warn_once(
                logger,
                "%s: %s = %r is read from the current folder (%s), not the %s beside %s; "
                "relative paths are read from where kvsim runs",
                where,
                shown,
                value,
                here.resolve(),
                value,
                path.name,
            )


_TRACE_SUFFIXES = (".csv", ".jsonl", ".json", ".txt")  # (a Parquet file: refused before it is read)


def _read_config_toml(path: Path) -> dict[str, Any]:
    """``read_toml``, its errors saying what a folder or a trace file given instead is for (a
    results folder's: ``kvsim.cli.run``, which knows them)."""
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, expected a config TOML file")
    suffix = path.suffix.lower()
    if suffix == ".parquet" and path.is_file():  # (not text: read as TOML, "save as UTF-8")
        raise ValueError(
            f"{path}: is a Parquet file, expected a config TOML file; a trace is a workload: "
            f"kvsim run --set workload.trace={path}"
        )
    try:
        return read_toml(path)
    except ValueError as err:
        if suffix not in _TRACE_SUFFIXES:
            raise
        fields = _json_config_fields(path)
        if fields:  # (a config written as one JSON object, not a trace's rows)
            raise ValueError(
                f"{err}; {path} is a JSON object of config fields ({', '.join(fields)}): kvsim "
                'reads a config as TOML (the same tables: model = "...", [cache] ...)'
            ) from None
        raise ValueError(
            f"{err}; a trace file is a workload: kvsim run --set workload.trace={path}"
        ) from None


def _json_config_fields(path: Path) -> list[str]:
    """The config fields (``SimConfig``'s top-level names) of a file holding one JSON object,
    else ``[]``."""
    from kvsim.config.sim import SimConfig

    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(data, dict):
        return []
    return [key for key in data if key in SimConfig.model_fields]
