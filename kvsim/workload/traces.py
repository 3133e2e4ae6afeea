"""Readers for LLM-serving trace files, with line-precise errors and a per-file cache.

Formats (``TRACE_FORMATS``; detected from a CSV or Parquet header, the keys of the first JSON
Lines record, or a ``.json`` file that is one array; ``workload.trace_format`` forces one):

- ``kvsim``: kvsim's own trace, CSV or Parquet: ``prompt_tokens, output_tokens`` and optional
  ``arrival_time_s`` (s), ``session_id``, ``n``, ``beam_width``, ``hash_ids`` or
  ``prefix_group`` + ``prefix_tokens`` (``kvsim.workload.tabular``).
- ``azure``: Azure LLM inference traces 2023 and 2024 (``TIMESTAMP, ContextTokens,
  GeneratedTokens``); ISO 8601 timestamps with or without an offset (2024: ``+00:00``).
- ``vidur``: Vidur/Sarathi traces (``num_prefill_tokens, num_decode_tokens``), with arrivals when
  ``arrived_at`` (s) is present (Vidur's trace-replay CSV).
- ``burstgpt``: BurstGPT (``Timestamp`` in s, ``Request tokens``, ``Response tokens``).
- ``sharegpt_opt``, ``alpaca``: the PagedAttention paper's length lists (lengths only).
- ``mooncake``: JSON Lines ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids`` of
  512-token blocks; ``bailian``: the same schema with ``timestamp`` in s, 16-token blocks and
  ``chat_id``/``parent_chat_id`` session links (Qwen-Bailian; ``kvsim.workload.jsonl``).
- ``sharegpt``, ``sharegpt_multiturn``: ShareGPT JSON conversations tokenized with a local
  Hugging Face ``tokenizer.json`` (``kvsim.workload.sharegpt``).

Arrival times given as numbers (``arrival_time_s``, ``arrived_at``, BurstGPT's ``Timestamp``, the
JSON Lines ``timestamp``) are kept as written, in seconds: they are the trace's time axis, on which
``workload.start_s`` selects. Azure's wall-clock ``TIMESTAMP`` has no zero of its own: it becomes
seconds after the file's earliest row.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import numpy as np

from kvsim.textfile import parse_json

BAILIAN_BLOCK_SIZE_TOKENS = 16


@dataclass(frozen=True, slots=True)
class CsvFormat:
    """Column names of one tabular trace format (``time_column`` is ``None`` for lengths only).

    Attributes:
        time_kind: ``"datetime"`` (ISO 8601 wall clock) or ``"seconds"``.
        time_optional: the format has arrivals only when ``time_column`` is present.
    """

    prompt_column: str
    output_column: str
    time_column: str | None = None
    time_kind: str | None = None
    time_optional: bool = False


CSV_FORMATS: dict[str, CsvFormat] = {
    "kvsim": CsvFormat("prompt_tokens", "output_tokens", "arrival_time_s", "seconds", True),
    "azure": CsvFormat("ContextTokens", "GeneratedTokens", "TIMESTAMP", "datetime"),
    "sharegpt_opt": CsvFormat("input_len", "output_len"),
    "alpaca": CsvFormat("input_tokens", "output_tokens"),
    "vidur": CsvFormat("num_prefill_tokens", "num_decode_tokens", "arrived_at", "seconds", True),
    "burstgpt": CsvFormat("Request tokens", "Response tokens", "Timestamp", "seconds"),
}
JSONL_FORMATS = ("mooncake", "bailian")
TEXT_FORMATS = ("sharegpt", "sharegpt_multiturn")
TraceFormat = Literal[
    "kvsim",
    "azure",
    "sharegpt_opt",
    "alpaca",
    "vidur",
    "burstgpt",
    "mooncake",
    "bailian",
    "sharegpt",
    "sharegpt_multiturn",
]
TRACE_FORMATS: tuple[str, ...] = get_args(TraceFormat)
assert (*CSV_FORMATS, *JSONL_FORMATS, *TEXT_FORMATS) == TRACE_FORMATS, "format lists disagree"


@dataclass(frozen=True, slots=True)
class Trace:
    """Rows of one trace file, in file order. Arrays are read-only (they are cached).

    Attributes:
        path: the file read, as the user named it (messages show it so).
        fmt: its format name.
        prompt_tokens: int64[num_rows], input tokens per row.
        output_tokens: int64[num_rows], output tokens per row.
        arrival_time_s: float64[num_rows] seconds from the trace start, or ``None``.
        prefix_hash_ids: per row, its tuple of prefix-block hashes (``()`` for an empty list)
            or ``None`` (a blank cell, a missing key: the row names no blocks); or ``None``.
        hash_block_size_tokens: tokens per prefix hash block (the format's), or ``None``.
        session_ids: conversation of each row (``None`` for a row outside any), or ``None``.
        n: int64[num_rows] parallel samples per row, or ``None`` (all 1).
        beam_width: int64[num_rows] beam width per row, or ``None`` (all 1).
        prefix_groups: shared-prefix group of each row (``None`` for none), or ``None``.
        prefix_tokens: int64[num_rows] tokens of the row's group prefix, or ``None``.
        line_numbers: int64[num_rows] 1-based file line of each row, or ``None`` (Parquet and
            ShareGPT JSON: rows are named by their 1-based row number).
    """

    path: Path
    fmt: str
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival_time_s: np.ndarray | None = None
    prefix_hash_ids: tuple[tuple[int, ...] | None, ...] | None = None
    hash_block_size_tokens: int | None = None
    session_ids: tuple[int | None, ...] | None = None
    n: np.ndarray | None = None
    beam_width: np.ndarray | None = None
    prefix_groups: tuple[str | None, ...] | None = None
    prefix_tokens: np.ndarray | None = None
    line_numbers: np.ndarray | None = None

    def __post_init__(self) -> None:
        arrays = (self.prompt_tokens, self.output_tokens, self.arrival_time_s, self.n)
        for array in (*arrays, self.beam_width, self.prefix_tokens, self.line_numbers):
            if array is not None:
                array.setflags(write=False)

    @property
    def num_rows(self) -> int:
        """Number of requests in the file."""
        return int(self.prompt_tokens.shape[0])

    @property
    def has_arrivals(self) -> bool:
        """Whether rows carry arrival times."""
        return self.arrival_time_s is not None

    def where(self, row: int) -> str:
        """Where 0-based ``row`` sits in the file: ``"line 4"`` (text) or ``"row 3"`` (Parquet)."""
        if self.line_numbers is None:
            return f"row {row + 1}"
        return f"line {int(self.line_numbers[row])}"


def load_trace(
    path: str | Path, fmt: str | None = None, *, tokenizer: str | Path | None = None
) -> Trace:
    """Read a trace file (cached per resolved path, modification time and size).

    Args:
        path: the file; messages name it as given here.
        fmt: format name (see module docstring); detected from the file when ``None``.
        tokenizer: a Hugging Face ``tokenizer.json`` (or its folder), needed by the ShareGPT
            formats and refused by the others.

    Returns:
        The parsed :class:`Trace`.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: a malformed line (naming file, 1-based line, field, value, expectation),
            a missing column, or an unknown format.
    """
    if fmt is not None and fmt not in TRACE_FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}; choose from {sorted(TRACE_FORMATS)}")
    shown = Path(path).expanduser()
    resolved = shown.resolve()
    stat = resolved.stat()
    tok_key: tuple[str, int] | None = None
    if tokenizer is not None:
        from kvsim.workload.sharegpt import tokenizer_file

        tok_path = tokenizer_file(tokenizer)
        tok_key = (str(tok_path), tok_path.stat().st_mtime_ns)
    return _load_cached(str(shown), str(resolved), stat.st_mtime_ns, stat.st_size, fmt, tok_key)


@functools.lru_cache(maxsize=16)
def _load_cached(
    path_str: str,
    resolved_str: str,
    mtime_ns: int,
    size_bytes: int,
    fmt: str | None,
    tokenizer: tuple[str, int] | None,
) -> Trace:
    # the path as given (``path_str``) names the file in messages; the rest is only cache key
    del resolved_str, mtime_ns, size_bytes
    path = Path(path_str)
    fmt = fmt or _detect_by_content(path)
    if tokenizer is not None and fmt not in TEXT_FORMATS:
        raise ValueError(
            f"workload.tokenizer applies to ShareGPT conversations (text); {path} is a "
            f"{fmt or 'tabular'!r} trace of token counts: drop workload.tokenizer"
        )
    if fmt in TEXT_FORMATS:
        from kvsim.workload.sharegpt import read_sharegpt

        if tokenizer is None:
            raise ValueError(
                f"{path}: ShareGPT conversations are text; set workload.tokenizer to a "
                "local Hugging Face tokenizer.json (or the folder holding it)"
            )
        trace = read_sharegpt(path, Path(tokenizer[0]), multiturn=fmt == "sharegpt_multiturn")
    elif fmt in JSONL_FORMATS:
        from kvsim.workload.jsonl import read_jsonl

        trace = read_jsonl(path, fmt)
    else:
        from kvsim.workload.tabular import read_table

        trace = read_table(path, fmt)
    if trace.num_rows == 0:
        raise ValueError(f"{path}: the trace holds no requests (expected at least one row)")
    return trace


def _detect_by_content(path: Path) -> str | None:
    """``sharegpt`` for a ``.json`` array, ``bailian``/``mooncake`` for JSON Lines, else ``None``
    (a table: its header decides)."""
    suffix = path.suffix.lower()
    if suffix not in (".json", ".jsonl"):
        return None
    with path.open(encoding="utf-8-sig", errors="replace") as handle:  # a BOM is no JSON
        head = handle.read(4096).lstrip()
        if suffix == ".json" and head.startswith("["):
            return "sharegpt"
        handle.seek(0)
        for line_no, line in enumerate(handle, start=1):
            if line.strip():
                where = f"{path} line {line_no}"
                try:
                    record = parse_json(line, where)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{where}: invalid JSON ({exc.msg})") from None
                is_bailian = isinstance(record, dict) and (
                    "chat_id" in record or "parent_chat_id" in record
                )
                return "bailian" if is_bailian else "mooncake"
    return "mooncake"


def bad_value(path: Path, where: str, field: str, value: object, expected: str) -> ValueError:
    """``ValueError("data/trace.csv line 3: ContextTokens must be ..., got 'abc'")`` (a value
    longer than 80 characters shown by its start and its length)."""
    if isinstance(value, np.generic):  # a Parquet cell: show -3, not np.int64(-3)
        value = value.item()
    shown = repr(value)
    if len(shown) > 80:  # a 200,000-digit cell: its start and its length
        text = str(value)
        shown = f"{text[:30]!r}... ({len(text):,} characters)"
    return ValueError(f"{path} {where}: {field} must be {expected}, got {shown}")
