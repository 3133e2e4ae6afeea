"""Reading a calibration table file (CSV or JSON) with pydantic, so that every bad cell is named.

An error names the file, the row (a CSV file line, or ``rows[i]`` of a JSON file), the column and
the value, and what was expected. Only reading a table for the cost model imports pydantic: the
GPU runbook (``python -m kvsim.calibrate``) writes tables without it.
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kvsim.base.textfile import read_json, read_text
from kvsim.calibrate.columns import ROW_COLUMNS

logger = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)

# paged_s / contiguous_s must lie in cost.paged_attention_factor's range
MIN_LAYOUT_FACTOR = 0.01
MAX_LAYOUT_FACTOR = 100.0


class TableMeta(BaseModel):
    """The metadata every table carries (others, such as ``note``, are kept as they are)."""

    model_config = ConfigDict(extra="allow", coerce_numbers_to_str=True, frozen=True)

    source: Literal["measured", "analytic"]
    device_name: str
    driver_version: str
    cupy_version: str
    date_utc: str


class TableRow(BaseModel):
    """One grid point: counts are integers, times finite seconds > 0 (bytes of K+V read)."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False, frozen=True)

    batch_size: int = Field(ge=1)
    context_tokens: int = Field(ge=1)
    block_size_tokens: int = Field(ge=1)
    contiguous_s: float = Field(gt=0)
    paged_s: float = Field(gt=0)
    kv_bytes: int = Field(ge=0)

    @field_validator("batch_size", "context_tokens", "block_size_tokens", "kv_bytes", mode="before")
    @classmethod
    def _no_bool(cls, value: Any) -> Any:
        """A JSON ``true`` is no count (pydantic reads it as 1: every row's block size 1)."""
        if isinstance(value, bool):
            raise ValueError(f"expected an integer, got {str(value).lower()}")
        return value

    @model_validator(mode="after")
    def _ratio_in_range(self) -> TableRow:
        ratio = self.paged_s / self.contiguous_s
        if not MIN_LAYOUT_FACTOR <= ratio <= MAX_LAYOUT_FACTOR:
            raise ValueError(
                f"paged_s / contiguous_s must be within [{MIN_LAYOUT_FACTOR:g}, "
                f"{MAX_LAYOUT_FACTOR:g}] (the range of cost.paged_attention_factor), got "
                f"{self.paged_s:g} / {self.contiguous_s:g} = {ratio:g}"
            )
        return self


class TableFile(BaseModel):
    """A JSON table: ``{"meta": {...}, "rows": [{...}, ...]}``."""

    model_config = ConfigDict(extra="forbid")

    meta: TableMeta
    rows: list[TableRow] = Field(min_length=1)


def read_table_file(path: Path) -> tuple[dict[str, str], list[dict[str, float]]]:
    """The metadata and rows of a CSV or JSON table (by suffix), checked cell by cell.

    Returns:
        ``(meta, rows)``: metadata strings, and one dict of ``ROW_COLUMNS`` per row.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a folder, not UTF-8, bad JSON, a missing or duplicate column, a short or long
            row, or a bad value (naming the file, the row, the column and the value).
    """
    is_json = path.suffix == ".json"
    content = read_json(path) if is_json else read_text(path)
    if is_json:
        data = _json_object(path, content)
        table = _validate(path, "", TableFile, data)
        meta, rows = table.meta, table.rows
        _warn_unknown(path, {k for r in data["rows"] for k in r})
    else:
        meta, rows = _read_csv(path, content)
    return (
        {k: str(v) for k, v in meta.model_dump().items()},
        [{k: float(v) for k, v in r.model_dump().items()} for r in rows],
    )


def _json_object(path: Path, data: Any) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(
            f'{path}: expected a JSON object {{"meta": {{...}}, "rows": [...]}}, got '
            f"{type(data).__name__} {_short(data)}"
        )
    return data


def _read_csv(path: Path, text: str) -> tuple[TableMeta, list[TableRow]]:
    """``# key: value`` metadata lines, a header line, then one row per line."""
    meta: dict[str, str] = {}
    meta_lines: dict[str, int] = {}
    header: list[str] | None = None
    rows: list[TableRow] = []
    points: dict[tuple[int, int, int], int] = {}  # grid point -> its first line
    repeats: list[tuple[int, int]] = []  # (line, the line it repeats)
    for line_no, line in enumerate(text.splitlines(), start=1):
        if line.startswith("#"):
            key, _, value = line[1:].partition(":")
            if key.strip() in meta_lines and value.strip() != meta[key.strip()]:
                raise ValueError(  # (the last one won: which device the table is of, unsaid)
                    f"{path} line {line_no}: # {key.strip()} is given again ({value.strip()!r}; "
                    f"line {meta_lines[key.strip()]} says {meta[key.strip()]!r}); expected "
                    "each metadata key once"
                )
            meta_lines.setdefault(key.strip(), line_no)
            meta[key.strip()] = value.strip()
        elif not line.strip():
            continue
        elif header is None:
            header = _header(path, line_no, line)
        else:
            fields = next(csv.reader([line]))
            if len(fields) != len(header):
                raise ValueError(
                    f"{path} line {line_no}: {len(fields)} fields, expected {len(header)} "
                    f"({', '.join(header)})"
                )
            cells = dict(zip(header, fields, strict=True))
            row = _validate(path, f" line {line_no}", TableRow, cells)
            point = (row.batch_size, row.context_tokens, row.block_size_tokens)
            if point in points:  # (each counts in its block size's median: a repeat weighs it)
                repeats.append((line_no, points[point]))
            points.setdefault(point, line_no)
            rows.append(row)
    if repeats:
        logger.warning(
            "%s: %d row(s) measure a grid point (batch_size, context_tokens, "
            "block_size_tokens) again (first: line %d, of line %d); every row counts in its "
            "block size's median ratio",
            path,
            len(repeats),
            *repeats[0],
        )
    checked = _validate(path, " metadata", TableMeta, meta)
    if not rows:
        raise ValueError(f"{path}: no rows (expected a header line and one row per grid point)")
    return checked, rows


def _header(path: Path, line_no: int, line: str) -> list[str]:
    header = [c.strip() for c in next(csv.reader([line]))]
    duplicate = sorted({c for c in header if header.count(c) > 1})
    missing = [c for c in ROW_COLUMNS if c not in header]
    if duplicate or missing:
        problem = f"duplicate column(s) {duplicate}" if duplicate else f"no column(s) {missing}"
        raise ValueError(
            f"{path} line {line_no}: {problem} in the header {header}; expected the columns "
            f"{list(ROW_COLUMNS)}"
        )
    _warn_unknown(path, set(header))
    return header


def _warn_unknown(path: Path, columns: set[str]) -> None:
    unknown = sorted(columns - set(ROW_COLUMNS))
    if unknown:
        logger.warning(
            "%s: ignored %d column(s) a calibration table does not have: %s (known: %s)",
            path,
            len(unknown),
            unknown,
            list(ROW_COLUMNS),
        )


def _validate(path: Path, where: str, model: type[M], data: Any) -> M:
    """``model.model_validate(data)``; its first error as one line naming file, place and value."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        e = err.errors()[0]
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"])
        field = f" {loc.lstrip('.')}:" if loc else ""
        msg = e["msg"].removeprefix("Value error, ")
        got = "" if e["type"] == "value_error" else f", got {_short(e['input'])}"
        raise ValueError(f"{path}{where}:{field} {msg}{got}") from None


def _short(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."
