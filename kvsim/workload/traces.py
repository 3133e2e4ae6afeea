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
import gzip
import json
import lzma
import zipfile
from pathlib import Path

from kvsim.base.textfile import parse_json
from kvsim.workload.trace_table import (
    JSONL_FORMATS,
    TEXT_FORMATS,
    TRACE_FORMATS,
    Trace,
)


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
            a missing column, an unknown format, or a TOML file.
    """
    if fmt is not None and fmt not in TRACE_FORMATS:
        raise ValueError(f"unknown trace format {fmt!r}; choose from {sorted(TRACE_FORMATS)}")
    shown = Path(path).expanduser()
    if shown.suffix.lower() == ".toml":  # (read as CSV, its first line was a header of no rows)
        raise ValueError(
            f"{shown}: is a TOML file (a config or a preset?), expected a trace file (CSV, "
            "Parquet, JSON Lines or ShareGPT JSON); a config is `kvsim run FILE`, a workload "
            "preset `--set workload=FILE`"
        )
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
    _check_compression(path)
    try:
        return _read(path, fmt, tokenizer)
    except (EOFError, zipfile.BadZipFile, lzma.LZMAError, gzip.BadGzipFile) as err:
        raise ValueError(_unreadable(path, err)) from None
    except OSError as err:  # (a corrupt .bz2: "Invalid data stream"; not a missing file)
        if isinstance(err, (FileNotFoundError, IsADirectoryError, PermissionError)):
            raise
        raise ValueError(_unreadable(path, err)) from None
    except ValueError as err:  # (pandas' message names no file)
        if "Multiple files found in ZIP file" in str(err):
            raise ValueError(f"{path}: a .zip trace holds one file, got several") from None
        raise


# what a compressed file starts with, and the suffixes pandas reads it by
_MAGIC = {
    b"\x1f\x8b": ("gzip", ".gz"),
    b"BZh": ("bzip2", ".bz2"),
    b"\xfd7zXZ\x00": ("xz", ".xz"),
    b"PK\x03\x04": ("zip", ".zip"),
}
_COMPRESSED = {".gz", ".bz2", ".xz", ".zip"}


def _check_compression(path: Path) -> None:
    """Refuse a compressed, Parquet or JSON Lines file whose name does not say so (it was read
    as text: "invalid JSON", "not UTF-8", or as a CSV of JSON fragments) and compressed JSON
    traces (read by suffix as a table).

    Raises:
        ValueError: naming the file, its compression and the name or step that reads it.
    """
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in _COMPRESSED:
        if len(suffixes) > 1 and suffixes[-2] in (".json", ".jsonl"):
            raise ValueError(
                f"{path}: compressed JSON traces are not read (CSV and Parquet are); "
                f"decompress it to {path.with_suffix('').name}"
            )
        return
    with path.open("rb") as handle:
        head = handle.read(64)
    named_json = bool(suffixes) and suffixes[-1] in (".json", ".jsonl")
    if head.removeprefix(b"\xef\xbb\xbf").lstrip().startswith(b"{") and not named_json:
        raise ValueError(  # (read as a CSV its first line is a header of JSON fragments)
            f"{path}: the file holds JSON objects but its name does not say so; name it "
            f"{path.with_suffix('.jsonl').name} (JSON Lines: Mooncake, Qwen-Bailian)"
        )
    if head.startswith(b"PAR1") and (not suffixes or suffixes[-1] != ".parquet"):
        raise ValueError(
            f"{path}: the file is Parquet but its name does not say so; name it "
            f"{path.with_suffix('.parquet').name}"
        )
    for magic, (kind, suffix) in _MAGIC.items():
        if head.startswith(magic):
            json_named = bool(suffixes) and suffixes[-1] in (".json", ".jsonl")
            way = "decompress it" if json_named else f"name it {path.name}{suffix} or decompress it"
            raise ValueError(
                f"{path}: the file is {kind}-compressed but its name does not say so; {way}"
                + (" (compressed JSON traces are not read)" if json_named else "")
            )


def _unreadable(path: Path, err: BaseException) -> str:
    """The message for a compressed trace that cannot be read to its end."""
    return (
        f"{path}: a compressed trace that cannot be read ({type(err).__name__}: {err}); "
        "expected a whole .gz, .bz2, .xz or .zip file holding one trace"
    )


def _read(path: Path, fmt: str | None, tokenizer: tuple[str, int] | None) -> Trace:
    """The trace in ``path``, read by ``fmt`` (detected when ``None``)."""
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
