"""Readers for public LLM-serving trace files, with line-precise errors and a per-file cache.

Formats (detected from the CSV header or the ``.jsonl`` suffix):

- ``azure``: Azure LLM inference traces (``TIMESTAMP, ContextTokens, GeneratedTokens``);
  wall-clock timestamps become seconds after the earliest row (the first row: files are sorted).
- ``mooncake``: JSON Lines with ``timestamp`` (ms), ``input_length``, ``output_length`` and
  ``hash_ids`` (prefix-block hashes of 512 tokens).
- ``sharegpt_opt``: the PagedAttention paper's lengths (``input_len, output_len``).
- ``alpaca``: the paper's Alpaca lengths under OPT's tokenizer (``input_tokens, output_tokens``).
- ``vidur``: Vidur/Sarathi processed traces (``num_prefill_tokens, num_decode_tokens, ...``).
- ``burstgpt``: BurstGPT (``Timestamp`` in s, ``Request tokens``, ``Response tokens``).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

MOONCAKE_BLOCK_SIZE_TOKENS = 512
_AZURE_TIME_FORMAT = "%Y-%m-%d %H:%M:%S.%f"


@dataclass(frozen=True, slots=True)
class CsvFormat:
    """Column names of one CSV trace format (``time_column`` is ``None`` for lengths only)."""

    prompt_column: str
    output_column: str
    time_column: str | None = None
    time_kind: str | None = None  # "datetime" or "seconds"


CSV_FORMATS: dict[str, CsvFormat] = {
    "azure": CsvFormat("ContextTokens", "GeneratedTokens", "TIMESTAMP", "datetime"),
    "sharegpt_opt": CsvFormat("input_len", "output_len"),
    "alpaca": CsvFormat("input_tokens", "output_tokens"),
    "vidur": CsvFormat("num_prefill_tokens", "num_decode_tokens"),
    "burstgpt": CsvFormat("Request tokens", "Response tokens", "Timestamp", "seconds"),
}


@dataclass(frozen=True, slots=True)
class Trace:
    """Rows of one trace file, in file order. Arrays are read-only (they are cached).

    Attributes:
        path: the file read.
        fmt: its format name.
        prompt_tokens: int64[num_rows], input tokens per row.
        output_tokens: int64[num_rows], output tokens per row.
        arrival_time_s: float64[num_rows] seconds from the trace start, or ``None``.
        prefix_hash_ids: one tuple of prefix-block hashes per row, or ``None``.
        hash_block_size_tokens: tokens per prefix hash block, or ``None``.
    """

    path: Path
    fmt: str
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival_time_s: np.ndarray | None = None
    prefix_hash_ids: tuple[tuple[int, ...], ...] | None = None
    hash_block_size_tokens: int | None = None

    @property
    def num_rows(self) -> int:
        """Number of requests in the file."""
        return int(self.prompt_tokens.shape[0])

    @property
    def has_arrivals(self) -> bool:
        """Whether rows carry arrival times."""
        return self.arrival_time_s is not None


def load_trace(path: str | Path, fmt: str | None = None) -> Trace:
    """Read a trace file (cached per resolved path, modification time and size).

    Args:
        path: the file.
        fmt: format name (see module docstring); detected from the file when ``None``.

    Returns:
        The parsed :class:`Trace`.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a malformed line (naming file, 1-based line, field, value, expectation),
            a missing column, or an unknown format.
    """
    resolved = Path(path).expanduser().resolve()
    stat = resolved.stat()
    return _load_cached(str(resolved), stat.st_mtime_ns, stat.st_size, fmt)


@functools.lru_cache(maxsize=16)
def _load_cached(path_str: str, mtime_ns: int, size_bytes: int, fmt: str | None) -> Trace:
    del mtime_ns, size_bytes  # only part of the cache key
    path = Path(path_str)
    if fmt == "mooncake" or (fmt is None and path.suffix.lower() in {".jsonl", ".json"}):
        trace = _read_mooncake(path)
    else:
        trace = _read_csv(path, fmt)
    if len(trace.prompt_tokens) == 0:
        raise ValueError(f"{path.name}: the trace holds no requests (expected at least one row)")
    return trace


def _read_csv(path: Path, fmt: str | None) -> Trace:
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False, skip_blank_lines=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path.name}: malformed CSV: {exc}") from None
    frame = _strip_trailing_blank_rows(frame)
    if frame.empty:
        raise ValueError(f"{path.name}: the trace holds no requests (expected at least one row)")
    fmt = fmt or _detect_csv_format(path, list(frame.columns))
    if fmt not in CSV_FORMATS:
        raise ValueError(f"{path.name}: unknown trace format {fmt!r}; choose from {_fmt_names()}")
    spec = CSV_FORMATS[fmt]
    needed = [spec.prompt_column, spec.output_column]
    if spec.time_column:
        needed.append(spec.time_column)
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{path.name}: missing column(s) {missing} for the {fmt!r} trace format "
            f"(expected columns {needed}, found {list(frame.columns)})"
        )
    prompt = _int_column(path, frame, spec.prompt_column)
    output = _int_column(path, frame, spec.output_column)
    arrivals = None
    if spec.time_column is not None:
        arrivals = _time_column(path, frame, spec.time_column, spec.time_kind)
    return Trace(path, fmt, _frozen(prompt), _frozen(output), _frozen_or_none(arrivals))


def _strip_trailing_blank_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Drop empty rows at the end of the file (a trailing blank line is not malformed)."""
    if frame.empty:
        return frame
    nonblank = (frame != "").any(axis=1).to_numpy()
    last = int(np.flatnonzero(nonblank)[-1]) + 1 if nonblank.any() else 0
    return frame.iloc[:last]


def _detect_csv_format(path: Path, columns: list[str]) -> str:
    best, best_overlap = None, 0
    for name, spec in CSV_FORMATS.items():
        wanted = {spec.prompt_column, spec.output_column, spec.time_column} - {None}
        overlap = len(wanted & set(columns))
        if overlap > best_overlap:
            best, best_overlap = name, overlap
    if best is None:
        expected = {n: [s.prompt_column, s.output_column] for n, s in CSV_FORMATS.items()}
        raise ValueError(
            f"{path.name}: unrecognised CSV header {columns}; expected the columns of one of "
            f"these trace formats: {expected}"
        )
    return best


def _fmt_names() -> list[str]:
    return [*sorted(CSV_FORMATS), "mooncake"]


def _bad_value(path: Path, row: int, field: str, value: object, expected: str) -> ValueError:
    """ValueError for data row ``row`` (0-based); CSV line = row + 2 (the header is line 1)."""
    return ValueError(f"{path.name} line {row + 2}: {field} must be {expected}, got {value!r}")


def _int_column(path: Path, frame: pd.DataFrame, column: str) -> np.ndarray:
    text = frame[column].str.strip()
    ok = text.str.fullmatch(r"\d+").to_numpy(dtype=bool)
    if not ok.all():
        row = int(np.flatnonzero(~ok)[0])
        raise _bad_value(path, row, column, frame[column].iloc[row], "a non-negative integer")
    values: np.ndarray = text.astype(np.int64).to_numpy()
    return values


def _time_column(path: Path, frame: pd.DataFrame, column: str, kind: str | None) -> np.ndarray:
    text = frame[column].str.strip()
    if kind == "datetime":
        stamps = pd.to_datetime(text, format=_AZURE_TIME_FORMAT, errors="coerce")
        bad = stamps.isna().to_numpy()
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            expected = "a timestamp like '2023-11-16 18:15:46.6805900'"
            raise _bad_value(path, row, column, frame[column].iloc[row], expected)
        nanos = stamps.to_numpy(dtype="datetime64[ns]").astype(np.int64)
        relative_s: np.ndarray = (nanos - nanos.min()).astype(np.float64) / 1e9
        return relative_s
    seconds = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(seconds) | (seconds < 0)
    if bad.any():
        row = int(np.flatnonzero(bad)[0])
        raise _bad_value(path, row, column, frame[column].iloc[row], "a non-negative number (s)")
    relative: np.ndarray = seconds - seconds.min()
    return relative


def _read_mooncake(path: Path) -> Trace:
    prompt: list[int] = []
    output: list[int] = []
    stamps_ms: list[float] = []
    hashes: list[tuple[int, ...]] = []
    any_hashes = False
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            row = _parse_json_line(path, line_no, line)
            stamps_ms.append(_json_number(path, line_no, row, "timestamp"))
            prompt.append(_json_int(path, line_no, row, "input_length"))
            output.append(_json_int(path, line_no, row, "output_length"))
            hashes.append(_json_hash_ids(path, line_no, row))
            any_hashes = any_hashes or "hash_ids" in row
    if not prompt:
        raise ValueError(f"{path.name}: no requests (the file is empty)")
    arrivals = np.asarray(stamps_ms, dtype=np.float64) / 1000.0
    return Trace(
        path,
        "mooncake",
        _frozen(np.asarray(prompt, dtype=np.int64)),
        _frozen(np.asarray(output, dtype=np.int64)),
        _frozen(arrivals),
        tuple(hashes) if any_hashes else None,
        MOONCAKE_BLOCK_SIZE_TOKENS if any_hashes else None,
    )


def _parse_json_line(path: Path, line_no: int, line: str) -> dict[str, object]:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path.name} line {line_no}: invalid JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        raise ValueError(
            f"{path.name} line {line_no}: expected a JSON object, got {line.strip()!r}"
        )
    return row


def _json_field(path: Path, line_no: int, row: dict[str, object], key: str) -> object:
    if key not in row:
        raise ValueError(f"{path.name} line {line_no}: missing field {key!r}")
    return row[key]


def _json_int(path: Path, line_no: int, row: dict[str, object], key: str) -> int:
    value = _json_field(path, line_no, row, key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"{path.name} line {line_no}: {key} must be a non-negative integer, got {value!r}"
        )
    return value


def _json_number(path: Path, line_no: int, row: dict[str, object], key: str) -> float:
    value = _json_field(path, line_no, row, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(
            f"{path.name} line {line_no}: {key} must be a non-negative number (ms), got {value!r}"
        )
    return float(value)


def _json_hash_ids(path: Path, line_no: int, row: dict[str, object]) -> tuple[int, ...]:
    value = row.get("hash_ids", [])
    if not isinstance(value, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in value
    ):
        raise ValueError(
            f"{path.name} line {line_no}: hash_ids must be a list of integers, got {value!r}"
        )
    return tuple(value)


def _frozen(array: np.ndarray) -> np.ndarray:
    array.setflags(write=False)
    return array


def _frozen_or_none(array: np.ndarray | None) -> np.ndarray | None:
    return None if array is None else _frozen(array)
