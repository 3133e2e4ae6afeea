"""JSON Lines traces with prefix-block hashes: Mooncake and Qwen-Bailian.

- ``mooncake`` (kvcache-ai/Mooncake ``FAST25-release/traces``): ``timestamp`` in **milliseconds**,
  ``input_length``, ``output_length``, ``hash_ids`` of 512-token blocks.
- ``bailian`` (alibaba-edu/qwen-bailian-usagetraces-anon, README "Data Specification"): the same
  fields with ``timestamp`` in **seconds** and 16-token blocks, plus ``chat_id`` and
  ``parent_chat_id`` (-1 for a conversation's first request); a row's session is the root of its
  parent chain (the parent's id when the parent is not in the file; none without ``chat_id``).
  A ``chat_id`` given twice, a row its own parent, or a parent whose row comes after its child's
  is refused, naming the lines.

Errors name the file, the 1-based line, the field and the value (``NaN``, ``Infinity`` and
integers too long to convert too); a key given twice in one object is refused. Other keys are
ignored, with a warning; a leading UTF-8 BOM is skipped, as in CSV. A row without ``hash_ids``
shares no prefix; one with them (``[]`` included) is checked against its prompt length
(``kvsim.workload.identity.count_hash_mismatches``).
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import numpy as np

from kvsim.base.limits import MAX_INT64, MAX_TIME_S
from kvsim.base.textfile import DuplicateKeyError, NotANumber, parse_json, unique_keys
from kvsim.workload.tokens import MOONCAKE_BLOCK_SIZE_TOKENS
from kvsim.workload.trace_table import BAILIAN_BLOCK_SIZE_TOKENS, Trace

logger = logging.getLogger(__name__)

_TIME_UNIT = {"mooncake": ("ms", 1000.0), "bailian": ("s", 1.0)}
_BLOCK_SIZE = {"mooncake": MOONCAKE_BLOCK_SIZE_TOKENS, "bailian": BAILIAN_BLOCK_SIZE_TOKENS}
_MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
_KEYS = {  # Bailian's type and turn are its own, unread here
    "mooncake": frozenset(_MOONCAKE_KEYS),
    "bailian": frozenset((*_MOONCAKE_KEYS, "chat_id", "parent_chat_id", "type", "turn")),
}
_UTF8_BOM = b"\xef\xbb\xbf"


def read_jsonl(path: Path, fmt: str) -> Trace:
    """Read a Mooncake or Qwen-Bailian JSON Lines file (``fmt``: ``"mooncake"``/``"bailian"``).

    Raises:
        ValueError: invalid JSON, a missing field or a bad value, naming file, line and field.
    """
    unit, per_s = _TIME_UNIT[fmt]
    prompt: list[int] = []
    output: list[int] = []
    stamps: list[float] = []
    hashes: list[tuple[int, ...] | None] = []
    sessions: list[int | None] = []
    line_numbers: list[int] = []  # blank lines are skipped: a row's line is not its index + 1
    chats = _Chats()
    unknown: dict[str, int] = {}  # key -> rows holding it
    data = path.read_bytes().removeprefix(_UTF8_BOM)
    for line_no, raw in enumerate(data.splitlines(), start=1):
        line = _decode_line(path, line_no, raw)
        if line.strip():
            row = _parse_json_line(path, line_no, line)
            line_numbers.append(line_no)
            stamps.append(_json_number(path, line_no, row, "timestamp", unit))
            prompt.append(_json_int(path, line_no, row, "input_length"))
            output.append(_json_int(path, line_no, row, "output_length"))
            hashes.append(_json_hash_ids(path, line_no, row))
            if fmt == "bailian":
                sessions.append(_session(path, line_no, row, chats))
            for key in row.keys() - _KEYS[fmt]:
                unknown[key] = unknown.get(key, 0) + 1
    if not prompt:
        raise ValueError(f"{path}: no requests (the file is empty)")
    if unknown:
        _warn_unknown_keys(path, fmt, unknown, len(prompt))
    any_hashes = any(ids is not None for ids in hashes)
    return Trace(
        path,
        fmt,
        np.asarray(prompt, dtype=np.int64),
        np.asarray(output, dtype=np.int64),
        np.asarray(stamps, dtype=np.float64) / per_s,
        tuple(hashes) if any_hashes else None,
        _BLOCK_SIZE[fmt] if any_hashes else None,
        tuple(sessions) if fmt == "bailian" else None,
        line_numbers=np.asarray(line_numbers, dtype=np.int64),
    )


def _warn_unknown_keys(path: Path, fmt: str, unknown: dict[str, int], num_rows: int) -> None:
    held = ", ".join(f"{key!r} (on {unknown[key]} of {num_rows} rows)" for key in sorted(unknown))
    logger.warning(
        "%s: ignored %d key(s) the %s trace format does not have: %s (known: %s)",
        path,
        len(unknown),
        fmt,
        held,
        sorted(_KEYS[fmt]),
    )


class _Chats:
    """A Qwen-Bailian file's ``chat_id`` values read so far: each one's line and session (the
    root of its parent chain), and the parents its rows named before their own row came (a
    parent absent from the file is legal: its id names the session)."""

    def __init__(self) -> None:
        self.line_of: dict[int, int] = {}
        self.session_of: dict[int, int] = {}
        self.named_by: dict[int, int] = {}  # a parent not seen yet -> the line of its child


def _session(
    path: Path,
    line_no: int,
    row: dict[str, object],
    chats: _Chats,
) -> int | None:
    """The row's session: the root of its parent chain.

    Raises:
        ValueError: a ``chat_id`` given twice (its rows would merge into one conversation), a
            row its own parent, or a parent whose row comes after its child's, naming the lines.
    """
    if "chat_id" not in row:
        return None
    chat = _json_int(path, line_no, row, "chat_id")
    parent = row.get("parent_chat_id", -1)
    if isinstance(parent, bool) or not isinstance(parent, int) or not -1 <= parent <= MAX_INT64:
        raise ValueError(
            f"{path} line {line_no}: parent_chat_id must be -1 or a chat_id, got {_short(parent)}"
        )
    where = f"{path} line {line_no}"
    if chat in chats.line_of:
        raise ValueError(
            f"{where}: chat_id {chat} again (first on line {chats.line_of[chat]}); each request "
            "has its own chat_id, its turns linked by parent_chat_id"
        )
    if parent == chat:
        raise ValueError(f"{where}: parent_chat_id {parent} is the row's own chat_id")
    if chat in chats.named_by:
        raise ValueError(
            f"{where}: chat_id {chat} is the parent of line {chats.named_by[chat]}, an earlier "
            "row; a conversation's turns come in order, each after its parent"
        )
    chats.line_of[chat] = line_no
    if parent != -1 and parent not in chats.line_of:
        chats.named_by.setdefault(parent, line_no)
    root = chat if parent == -1 else chats.session_of.get(parent, parent)
    chats.session_of[chat] = root
    return root


def _decode_line(path: Path, line_no: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path} line {line_no}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
            f"{exc.start + 1})"
        ) from None


def _parse_json_line(path: Path, line_no: int, line: str) -> dict[str, object]:
    try:  # (NaN, Infinity and overlong integers come back for the field checks to name)
        row = parse_json(line, f"{path} line {line_no}", object_pairs_hook=unique_keys)
    except DuplicateKeyError as exc:
        raise ValueError(f"{path} line {line_no}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} line {line_no}: invalid JSON ({exc.msg})") from None
    if not isinstance(row, dict):
        raise ValueError(f"{path} line {line_no}: expected a JSON object, got {line.strip()!r}")
    return row


def _json_field(path: Path, line_no: int, row: dict[str, object], key: str) -> object:
    if key not in row:
        raise ValueError(f"{path} line {line_no}: missing field {key!r}")
    return row[key]


def _json_int(path: Path, line_no: int, row: dict[str, object], key: str) -> int:
    value = _json_field(path, line_no, row, key)
    if isinstance(value, NotANumber) and value.integer:
        raise ValueError(
            f"{path} line {line_no}: {key} must be at most {MAX_INT64:,} (a 64-bit integer), "
            f"got {value!r}"
        )
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"{path} line {line_no}: {key} must be a non-negative integer, got {_short(value)}"
        )
    if value > MAX_INT64:
        raise ValueError(
            f"{path} line {line_no}: {key} must be at most {MAX_INT64:,} (a 64-bit "
            f"integer), got {_short(value)}"
        )
    return value


def _json_number(path: Path, line_no: int, row: dict[str, object], key: str, unit: str) -> float:
    value = _json_field(path, line_no, row, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ValueError(
            f"{path} line {line_no}: {key} must be a non-negative number ({unit}), "
            f"got {_short(value)}"
        )
    if value > MAX_TIME_S * 1000 or not math.isfinite(value):  # ms or s, within 1e9 s
        raise ValueError(
            f"{path} line {line_no}: {key} must be a finite number ({unit}) below "
            f"{MAX_TIME_S * 1000:g}, got {_short(value)}"
        )
    return float(value)


def _json_hash_ids(path: Path, line_no: int, row: dict[str, object]) -> tuple[int, ...] | None:
    if "hash_ids" not in row:
        return None
    value = row["hash_ids"]
    if not isinstance(value, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) for h in value
    ):
        raise ValueError(
            f"{path} line {line_no}: hash_ids must be a list of integers, got {_short(value)}"
        )
    if any(abs(h) > MAX_INT64 for h in value):
        raise ValueError(
            f"{path} line {line_no}: hash_ids must be 64-bit integers, got {_short(value)}"
        )
    return tuple(value)


def _short(value: object) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."
