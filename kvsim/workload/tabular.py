"""Tabular traces (CSV, or Parquet for kvsim's own format): header detection and column parsing.

A CSV error names the file line (the header is line 1); a Parquet error names the 1-based row.
kvsim's own format (``kvsim``) takes these columns, in any order:

- ``prompt_tokens``, ``output_tokens`` (required): prompt length and tokens generated.
- ``arrival_time_s``: arrival in seconds on the trace's own time axis, kept as written (a row at
  100 arrives 100 s after the axis' zero; ``workload.start_s`` selects on this axis); without
  it, lengths only.
- ``session_id``: conversation id; a turn whose prompt holds the previous turn's prompt and
  output shares them as its prefix (``kvsim.workload.identity``).
- ``n``, ``beam_width``: parallel samples and beam width (default 1; not both above 1).
- ``hash_ids``: prefix-block hashes, space-separated (a list in Parquet), in blocks of
  ``workload.hash_block_size_tokens``.
- ``prefix_group`` with ``prefix_tokens``: rows of one group share their first
  ``prefix_tokens`` prompt tokens (a system prompt, a few-shot preamble).

Blank optional cells mean "none" (``n`` and ``beam_width``: 1). Other columns are ignored, with a
warning; a CSV header naming a column twice is refused.
"""

from __future__ import annotations

import csv
import itertools
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from kvsim.base.extras import require
from kvsim.base.limits import MAX_INT64, MAX_SEQS_PER_REQUEST, MAX_TIME_S
from kvsim.base.say_once import warn_once
from kvsim.base.textfile import read_text
from kvsim.base.units import plural
from kvsim.workload.trace_table import CSV_FORMATS, TRACE_FORMATS, Trace, bad_value

logger = logging.getLogger(__name__)

Where = Callable[[int], str]  # 0-based data row -> "line 3" / "row 2"
KVSIM_OPTIONAL = (
    "arrival_time_s",
    "session_id",
    "n",
    "beam_width",
    "hash_ids",
    "prefix_group",
    "prefix_tokens",
)
_OFFSET = r"(?:Z|[+-]\d\d:?\d\d)$"


def read_table(path: Path, fmt: str | None) -> Trace:
    """Read a CSV (any tabular format) or Parquet file (``.parquet``) into a :class:`Trace`.

    Raises:
        ValueError: unreadable file, unknown header, missing column or a bad cell (file, line or
            row, column, value and what was expected).
    """
    frame, where, lines = _read_frame(path)
    if frame.empty:
        raise ValueError(f"{path}: the trace holds no requests (expected at least one row)")
    fmt = fmt or detect_format(path, list(frame.columns))
    if fmt not in CSV_FORMATS:
        raise ValueError(
            f"{path}: trace format {fmt!r} is not tabular; a CSV or Parquet trace is one of "
            f"{sorted(CSV_FORMATS)} (all formats: {sorted(TRACE_FORMATS)})"
        )
    spec = CSV_FORMATS[fmt]
    needed = [spec.prompt_column, spec.output_column]
    if spec.time_column and not spec.time_optional:
        needed.append(spec.time_column)
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{path}: missing column(s) {missing} for the {fmt!r} trace format "
            f"(expected columns {needed}, found {list(frame.columns)})"
        )
    prompt = int_column(path, frame, spec.prompt_column, where)
    output = int_column(path, frame, spec.output_column, where)
    arrivals = None
    if spec.time_column is not None and spec.time_column in frame.columns:
        arrivals = _time_column(path, frame, spec.time_column, spec.time_kind, where)
    extras = _kvsim_extras(path, frame, prompt, where) if fmt == "kvsim" else {}
    return Trace(path, fmt, prompt, output, arrivals, **extras, line_numbers=lines)


def _is_parquet(path: Path) -> bool:
    return path.suffix.lower() == ".parquet"


def _read_frame(path: Path) -> tuple[pd.DataFrame, Where, np.ndarray | None]:
    """The table, how to name its row ``i``, and each row's file line (``None``: Parquet)."""
    if _is_parquet(path):
        require("parquet", f"reading the Parquet trace {path}")
        import pyarrow.parquet as pq

        try:
            names = pq.read_schema(path).names
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: unreadable Parquet file: {exc}") from None
        _check_duplicate_columns(path, names)  # (pyarrow's error names every column)
        try:
            frame = pd.read_parquet(path)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{path}: unreadable Parquet file: {exc}") from None
        return frame.reset_index(drop=True), lambda row: f"row {row + 1}", None
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skip_blank_lines=False)
    except UnicodeDecodeError as exc:
        read_text(path)  # (raises naming the line and the byte)
        raise ValueError(f"{path}: malformed CSV: {exc}") from None
    except pd.errors.EmptyDataError:
        raise ValueError(
            f"{path}: empty, expected a CSV header line and a row for each request"
        ) from None
    except pd.errors.ParserError as exc:
        raise ValueError(f"{path}: malformed CSV: {_one_based(str(exc))}") from None
    _check_duplicate_columns(path)
    if not isinstance(frame.index, pd.RangeIndex):  # pandas made the extra fields an index
        _refuse_long_rows(path, [str(c) for c in frame.columns])
    frame = _strip_trailing_blank_rows(frame)
    _check_short_rows(path, frame)
    found = _record_lines(path)
    starts = np.arange(len(frame), dtype=np.int64) + 2 if found is None else found[: len(frame)]
    return frame, lambda row: f"line {starts[row]}", starts


def _record_lines(path: Path) -> np.ndarray | None:
    """The file line each data row of a CSV starts on, where a quoted field spans lines (a
    row then is not line ``row + 2``); ``None`` where none can (no quote in the file)."""
    if b'"' not in path.read_bytes():
        return None
    with path.open(encoding="utf-8-sig", errors="replace", newline="") as handle:
        reader = csv.reader(handle)
        next(reader, None)  # (the header)
        starts, line = [], reader.line_num + 1
        for _ in reader:
            starts.append(line)
            line = reader.line_num + 1
    return np.asarray(starts, dtype=np.int64)


def _check_duplicate_columns(path: Path, header: list[str] | None = None) -> None:
    """Refuse a header naming a column twice: pandas would read the first copy and rename the
    second ``name.1``, and which copy holds the values is the user's to say. ``header``: a
    Parquet file's column names (else the CSV's first line is read).

    Raises:
        ValueError: naming the file, the column and its two positions.
    """
    where = f"{path} line 1: the header" if header is None else f"{path}: the schema"
    if header is None:
        with path.open(encoding="utf-8-sig", errors="replace", newline="") as handle:
            header = next(csv.reader(handle), [])
    first: dict[str, int] = {}
    for number, name in enumerate(header, start=1):
        if name in first:
            raise ValueError(
                f"{where} names column {name!r} twice (columns {first[name]} and {number}); "
                "expected each column once"
            )
        first[name] = number


def _check_short_rows(path: Path, frame: pd.DataFrame) -> None:
    """Refuse a row with fewer fields than the header, as pandas refuses one with more.

    pandas fills the missing cells with blanks, which would read as a blank value (``got ''``);
    only rows whose last cell is blank can be short, so the file is re-read only when one is.

    Raises:
        ValueError: naming the file, the line and the fields found and expected.
    """
    blank_last = np.flatnonzero((frame.iloc[:, -1] == "").to_numpy())
    if blank_last.size == 0:
        return
    columns = [str(c) for c in frame.columns]
    candidates = set(blank_last.tolist())
    with path.open(encoding="utf-8", errors="replace", newline="") as handle:
        reader = csv.reader(handle)
        records = itertools.islice(reader, 1, int(blank_last[-1]) + 2)  # past the header
        try:
            for row, fields in enumerate(records):
                if row in candidates and len(fields) < len(columns):
                    found = f"{len(fields)} field{'s' if len(fields) != 1 else ''}"
                    blank = " (a blank line)" if not fields else ""
                    raise ValueError(  # line_num: the file's line, past quoted line breaks
                        f"{path} line {reader.line_num}: {found}{blank}, expected "
                        f"{len(columns)} ({', '.join(columns)})"
                    )
        except csv.Error:  # pandas read the file; its own messages stand
            return


def _refuse_long_rows(path: Path, columns: list[str]) -> None:
    """Refuse rows with more fields than the header. pandas refuses such a row among others,
    but where every row has them it reads their first fields as the rows' index and the rest
    shifted left under the header (``100,20,7`` under ``prompt_tokens,output_tokens`` would be
    a 20-token prompt).

    Raises:
        ValueError: naming the file, the first such line and the fields found and expected.
    """
    with path.open(encoding="utf-8-sig", errors="replace", newline="") as handle:
        reader = csv.reader(handle)
        header = len(next(reader, []))
        for fields in reader:
            if len(fields) > header:
                blank = all(not f.strip() for f in fields[header:])
                hint = "; a comma at the end of each line?" if blank else ""
                raise ValueError(
                    f"{path} line {reader.line_num}: {len(fields)} fields, expected {header} "
                    f"({', '.join(columns)}){hint}"
                )


def _one_based(message: str) -> str:
    """pandas' C parser counts "row N" from 0 over file lines; say "line N + 1" as every
    other message does (its "line N" is already 1-based)."""
    message = message.removeprefix("Error tokenizing data. C error: ")
    return re.sub(r"\brow (\d+)", lambda m: f"line {int(m.group(1)) + 1}", message)


def _strip_trailing_blank_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Drop empty rows at the end of the file (a trailing blank line is not malformed)."""
    if frame.empty:
        return frame
    nonblank = (frame != "").any(axis=1).to_numpy()
    last = int(np.flatnonzero(nonblank)[-1]) + 1 if nonblank.any() else 0
    return frame.iloc[:last]


def detect_format(path: Path, columns: list[str]) -> str:
    """The tabular format sharing the most columns with the header (ties: registry order)."""
    best, best_overlap = None, 0
    for name, spec in CSV_FORMATS.items():
        wanted = {spec.prompt_column, spec.output_column, spec.time_column} - {None}
        overlap = len(wanted & set(columns))
        if overlap > best_overlap:
            best, best_overlap = name, overlap
    if best is None:
        expected = {n: [s.prompt_column, s.output_column] for n, s in CSV_FORMATS.items()}
        raise ValueError(
            f"{path}: unrecognised CSV header {columns}; expected the columns of one of "
            f"these trace formats: {expected}"
        )
    others = [  # (another format's lengths are in the header too: which ones ran is a choice)
        name
        for name, spec in CSV_FORMATS.items()
        if name != best and {spec.prompt_column, spec.output_column} <= set(columns)
    ]
    if others:
        chosen = CSV_FORMATS[best]
        logger.warning(
            "%s: the header holds the lengths of the %s trace format and of %s; read as %s "
            "(%s, %s: the most columns shared), the others' columns ignored; set "
            "workload.trace_format to choose",
            path,
            best,
            " and ".join(others),
            best,
            chosen.prompt_column,
            chosen.output_column,
        )
    return best


def text_column(frame: pd.DataFrame, column: str) -> pd.Series:
    """The column as stripped strings: blanks for missing cells, integral floats without ``.0``
    (Parquet stores an integer column holding nulls as floats), lists space-joined."""
    series = frame[column]
    if series.dtype == object or pd.api.types.is_string_dtype(series):
        return series.map(_cell_text).astype(str).str.strip()
    if pd.api.types.is_float_dtype(series):
        return series.map(_cell_text).astype(str)
    return series.astype(str)


def _cell_text(value: Any) -> str:
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple, np.ndarray)):
        return " ".join(str(v) for v in value)
    return str(value)


def int_column(
    path: Path, frame: pd.DataFrame, column: str, where: Where, *, blank: int | None = None
) -> np.ndarray:
    """A column of non-negative integers (``blank`` fills empty cells when given)."""
    text = text_column(frame, column)
    if blank is not None:
        text = text.mask(text == "", str(blank))
    ok = text.str.fullmatch(r"[0-9]+").to_numpy(dtype=bool)
    if not ok.all():
        row = int(np.flatnonzero(~ok)[0])
        raise bad_value(path, where(row), column, frame[column].iloc[row], "a non-negative integer")
    long = np.flatnonzero(text.str.len().to_numpy() >= 19)  # int64 holds 18 digits for sure
    for row in long.tolist():
        if not _fits_int64(text.iloc[row]):
            raise bad_value(
                path, where(row), column, frame[column].iloc[row], f"an integer <= {MAX_INT64:,}"
            )
    values: np.ndarray = text.astype(np.int64).to_numpy()
    return values


def _fits_int64(digits: str) -> bool:
    """``digits`` (an optional sign, then 0-9) is an integer within 64 bits, decided without
    converting more than 19 digits (Python refuses to convert more than 4,300)."""
    magnitude = digits.lstrip("-+").lstrip("0")
    return len(magnitude) <= 19 and abs(int(digits)) <= MAX_INT64


_UNIX_TIME_S = MAX_TIME_S  # 2001-09-09 in Unix time: no run's own axis reaches it
_UNIX_TIME_END_S = 1e10  # year 2286


def _time_column(
    path: Path, frame: pd.DataFrame, column: str, kind: str | None, where: Where
) -> np.ndarray:
    """Arrival times in seconds: numbers as written (the trace's own time axis), wall-clock
    timestamps, and numbers that are all Unix times (>= 1e9 s), as seconds after the earliest
    one (they have no zero of their own; the latter with a warning)."""
    text = text_column(frame, column)
    if kind == "datetime":
        return _seconds_after_earliest(path, frame, column, text, where)
    seconds: np.ndarray = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
    if len(seconds) and seconds.min() >= _UNIX_TIME_S and seconds.max() < _UNIX_TIME_END_S:
        logger.warning(
            "%s: %s holds Unix times (%.0f to %.0f s); they are read as wall-clock stamps, as "
            "seconds after the earliest row",
            path,
            column,
            seconds.min(),
            seconds.max(),
        )
        after_earliest: np.ndarray = seconds - seconds.min()
        return after_earliest
    bad = ~np.isfinite(seconds) | (seconds < 0) | (seconds > MAX_TIME_S)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        expected = (
            f"a non-negative number (s) at most {MAX_TIME_S:g}, or Unix times (s) in every row"
        )
        raise bad_value(path, where(row), column, frame[column].iloc[row], expected)
    return seconds


def _seconds_after_earliest(
    path: Path, frame: pd.DataFrame, column: str, text: pd.Series, where: Where
) -> np.ndarray:
    stamps = pd.to_datetime(text, format="ISO8601", utc=True, errors="coerce")
    bad = stamps.isna().to_numpy()
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        expected = (
            "a timestamp like '2023-11-16 18:15:46.6805900' or "
            "'2024-05-10 00:00:00.009930+00:00' (ISO 8601)"
        )
        raise bad_value(path, where(row), column, frame[column].iloc[row], expected)
    with_offset = int(text.str.contains(_OFFSET).sum())
    if 0 < with_offset < len(text):
        logger.warning(
            "%s: %d of %d %s values carry a UTC offset and the others none; those are read as UTC",
            path,
            with_offset,
            len(text),
            column,
        )
    nanos = stamps.dt.tz_localize(None).to_numpy(dtype="datetime64[ns]").astype(np.int64)
    relative_s: np.ndarray = (nanos - nanos.min()).astype(np.float64) / 1e9
    return relative_s


def _kvsim_extras(
    path: Path, frame: pd.DataFrame, prompt: np.ndarray, where: Where
) -> dict[str, Any]:
    """The optional columns of kvsim's own format, as :class:`Trace` fields."""
    known = {"prompt_tokens", "output_tokens", *KVSIM_OPTIONAL}
    unknown = [c for c in frame.columns if c not in known]
    if unknown:
        logger.warning(
            "%s: ignored %d column(s) the kvsim trace format does not have: %s (known: %s)",
            path,
            len(unknown),
            unknown,
            sorted(known),
        )
    out: dict[str, Any] = {}
    if "session_id" in frame.columns:
        out["session_ids"] = _session_ids(text_column(frame, "session_id"))
    for column in ("n", "beam_width"):
        if column in frame.columns:
            values = int_column(path, frame, column, where, blank=1)
            if (values < 1).any():
                row = int(np.flatnonzero(values < 1)[0])
                value = frame[column].iloc[row]
                raise bad_value(path, where(row), column, value, "an integer >= 1")
            if (values > MAX_SEQS_PER_REQUEST).any():  # each sequence is simulated
                row = int(np.flatnonzero(values > MAX_SEQS_PER_REQUEST)[0])
                value = frame[column].iloc[row]
                expected = f"at most {MAX_SEQS_PER_REQUEST:,} (sequences of one request)"
                raise bad_value(path, where(row), column, value, expected)
            out[column] = values
    if "n" in out and "beam_width" in out:
        both = (out["n"] > 1) & (out["beam_width"] > 1)
        if both.any():
            row = int(np.flatnonzero(both)[0])
            raise ValueError(
                f"{path} {where(row)}: n = {out['n'][row]} and beam_width = "
                f"{out['beam_width'][row]}: a request is parallel sampling or beam search, not "
                "both; set one of them to 1"
            )
    if "hash_ids" in frame.columns:
        out["prefix_hash_ids"] = _hash_ids(path, frame, where)
    if "prefix_group" in frame.columns or "prefix_tokens" in frame.columns:
        out.update(_prefix_groups(path, frame, prompt, where))
    hashes, groups = out.get("prefix_hash_ids"), out.get("prefix_groups")
    if hashes is not None and groups is not None:
        for row, (ids, group) in enumerate(zip(hashes, groups, strict=True)):
            if ids and group is not None:
                raise ValueError(
                    f"{path} {where(row)}: hash_ids and prefix_group both name the prompt's "
                    f"shared prefix, got {list(ids)} and {group!r}; keep one"
                )
    return out


def _session_ids(text: pd.Series) -> tuple[int | None, ...]:
    """Integer ids as they are; other labels numbered by first appearance (so are ids written
    with leading zeros: ``01`` and ``1`` are two sessions, as their text says)."""
    given = [t for t in text.tolist() if t != ""]
    if all(re.fullmatch(r"-?(0|[1-9][0-9]*)", t) and _fits_int64(t) for t in given):
        return tuple(int(t) if t != "" else None for t in text.tolist())
    numbers: dict[str, int] = {}
    for label in given:
        numbers.setdefault(label, len(numbers))
    return tuple(numbers[t] if t != "" else None for t in text.tolist())


def _hash_ids(path: Path, frame: pd.DataFrame, where: Where) -> tuple[tuple[int, ...] | None, ...]:
    out: list[tuple[int, ...] | None] = []
    for row, text in enumerate(text_column(frame, "hash_ids").tolist()):
        if text == "":  # a blank cell: no hash blocks; "[]" is an empty list of them
            out.append(None)
            continue
        if text.count("[") > 1:  # (a list of lists: flattened, its blocks would be others)
            value = _plain(frame["hash_ids"].iloc[row])
            raise bad_value(path, where(row), "hash_ids", value, "a flat list of integers")
        parts = [p for p in re.split(r"[\s,;\[\]]+", text) if p]
        if not all(re.fullmatch(r"-?[0-9]+", p) for p in parts):
            raise bad_value(
                path,
                where(row),
                "hash_ids",
                frame["hash_ids"].iloc[row],
                "integers separated by spaces (or a JSON list)",
            )
        if not all(_fits_int64(p) for p in parts):
            value = frame["hash_ids"].iloc[row]
            raise bad_value(path, where(row), "hash_ids", value, "64-bit integers")
        out.append(tuple(int(p) for p in parts))
    return tuple(out)


def _plain(value: Any) -> Any:
    """A Parquet cell's lists (numpy arrays, nested) as Python lists, to show in an error."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in value]
    return value.item() if isinstance(value, np.generic) else value


def _prefix_groups(
    path: Path, frame: pd.DataFrame, prompt: np.ndarray, where: Where
) -> dict[str, Any]:
    for column in ("prefix_group", "prefix_tokens"):
        if column not in frame.columns:
            other = "prefix_tokens" if column == "prefix_group" else "prefix_group"
            raise ValueError(
                f"{path}: column {other!r} needs the column {column!r} (a group id and its "
                "shared prompt tokens go together)"
            )
    groups = text_column(frame, "prefix_group")
    tokens = int_column(path, frame, "prefix_tokens", where, blank=0)
    in_group = (groups != "").to_numpy()
    bad = in_group & ((tokens < 1) | (tokens > prompt))
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise bad_value(
            path,
            where(row),
            "prefix_tokens",
            frame["prefix_tokens"].iloc[row],
            f"between 1 and the row's prompt_tokens ({prompt[row]}) for prefix_group "
            f"{groups.iloc[row]!r}",
        )
    stray = ~in_group & (tokens > 0)
    if stray.any():
        row = int(np.flatnonzero(stray)[0])
        raise bad_value(
            path,
            where(row),
            "prefix_tokens",
            frame["prefix_tokens"].iloc[row],
            "blank or 0 when prefix_group is blank",
        )
    _warn_mixed_prefix_lengths(path, groups[in_group], tokens[in_group], where)
    labels = tuple(g if g != "" else None for g in groups.tolist())
    return {"prefix_groups": labels, "prefix_tokens": tokens}


def _warn_mixed_prefix_lengths(
    path: Path, groups: pd.Series, tokens: np.ndarray, where: Where
) -> None:
    """Warn of prefix groups whose rows give different ``prefix_tokens`` (legal: two rows share
    the shorter of their two prefixes, as a group's one stream cut at each length; but a typo
    as often as not)."""
    table = pd.DataFrame({"group": groups.to_numpy(), "tokens": tokens}, index=groups.index)
    lengths = table.groupby("group", sort=False)["tokens"]
    mixed = lengths.nunique()
    mixed = mixed[mixed > 1]
    if mixed.empty:
        return
    first = str(mixed.index[0])
    rows = table[table["group"] == first]
    values = sorted(set(rows["tokens"].tolist()))
    other = rows.index[rows["tokens"] != rows["tokens"].iloc[0]][0]
    warn_once(
        logger,
        f"{path}: {plural(len(mixed), 'prefix group')} with rows of different prefix_tokens "
        f"(group {first!r}: {', '.join(map(str, values))}; {where(int(rows.index[0]))} and "
        f"{where(int(other))}); two rows of a group share the shorter of their prefixes",
    )
