"""Reading the user's files (TOML configs, experiments, plans, JSON, Parquet results) with errors
that name the file: a folder, a missing file, bytes that are not UTF-8, malformed TOML or JSON and
a corrupt Parquet file all become one ``ValueError`` (or ``FileNotFoundError``) line starting
with the path. ``json_text`` writes strict JSON (NaN and infinities as ``null``)."""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd


def read_text(path: str | Path) -> str:
    """The file's text, decoded as UTF-8.

    Raises:
        FileNotFoundError: no such file (the message names it).
        ValueError: the path is a folder or unreadable, or the bytes are not UTF-8 (the message
            names the file, the offending byte and its offset).
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{path}: is a folder, expected a file")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except OSError as err:
        raise ValueError(f"{path}: cannot read ({err.strerror or err})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ValueError(
            f"{path} line {line}: not UTF-8 text (byte 0x{data[err.start]:02x} at offset "
            f"{err.start}); save the file as UTF-8"
        ) from None


def read_toml(path: str | Path) -> dict[str, Any]:
    """The file parsed as TOML (see ``read_text`` for the errors).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a folder, not UTF-8, or invalid TOML (naming the file, line and column).
    """
    text = read_text(path)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: invalid TOML: {err}") from None


def read_json(path: str | Path) -> Any:
    """The file parsed as JSON (see ``read_text`` for the errors).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a folder, not UTF-8, or invalid JSON (naming the file, line and column).
    """
    return parse_json(read_text(path), path)


def parse_json(text: str, path: str | Path) -> Any:
    """``text`` (read from ``path``) parsed as JSON.

    Raises:
        ValueError: invalid JSON (naming the file, line and column).
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{path} line {err.lineno} column {err.colno}: invalid JSON ({err.msg})"
        ) from None


def read_parquet(path: str | Path) -> pd.DataFrame:
    """The Parquet file as a DataFrame.

    Raises:
        FileNotFoundError: no such file.
        ValueError: not a readable Parquet file (truncated, corrupt, another format).
    """
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    try:
        return pd.read_parquet(path)
    except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
        reason = " ".join(str(err).split())[:200]
        raise ValueError(f"{path}: not a readable Parquet file ({reason})") from None


def sha256_file(path: str | Path) -> str:
    """SHA-256 (hex) of a file's bytes, read in 1 MiB chunks.

    Raises:
        OSError: the file cannot be read.
    """
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def json_text(value: Any, **options: Any) -> str:
    """``value`` as strict JSON (RFC 8259 has no NaN or infinity): non-finite floats, at any
    depth, become ``null``. ``options`` go to ``json.dumps`` (``indent``, ``sort_keys``)."""
    return json.dumps(_finite_or_none(value), allow_nan=False, **options)


def _finite_or_none(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value
