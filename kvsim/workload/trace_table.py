"""A trace as a table of requests (``Trace``), the formats kvsim reads and their columns, and
the error every reader raises for a bad value (``bad_value``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

import numpy as np

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
