"""Reading the user's files (TOML configs, experiments, plans, JSON, Parquet results) with errors
that name the file: a folder, a missing file, bytes that are not UTF-8, malformed TOML or JSON and
a corrupt Parquet file all become one ``ValueError`` (or ``FileNotFoundError``) line starting
with the path. ``json_text`` writes strict JSON (NaN and infinities as ``null``)."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import re
import tomllib
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)


def read_text(path: str | Path) -> str:
    """The file's text, decoded as UTF-8 (a leading byte-order mark, as some Windows editors
    write, dropped).

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
    if data.startswith(b"\xef\xbb\xbf"):  # (Windows editors write one: not text, but meant)
        logger.warning("%s: starts with a UTF-8 byte-order mark; read without it", path)
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ValueError(
            f"{path} line {line}: not UTF-8 text (got byte 0x{data[err.start]:02x} at offset "
            f"{err.start}); save the file as UTF-8"
        ) from None


# JSON nests a trace a few levels deep; Python's parser recurses once per level and gives up
# near 1,000 with a RecursionError that names neither the file nor the line.
MAX_JSON_DEPTH = 500
# Python refuses to convert integers of more than 4,300 digits (sys.get_int_max_str_digits()).
MAX_INT_DIGITS = 4300


class NotANumber:
    """What ``parse_json`` gives for a value no field takes: JSON's non-standard ``NaN`` and
    ``Infinity``, or an integer of more than ``MAX_INT_DIGITS`` digits. Its ``repr`` is how an
    error shows it (``NaN``, ``an integer of 200,000 digits``), so the field check that refuses
    it names the field and the value instead of the parser's "invalid JSON"."""

    def __init__(self, shown: str, *, integer: bool = False) -> None:
        self.shown = shown
        self.integer = integer  # an integer too long to convert (else NaN or an infinity)

    def __repr__(self) -> str:
        return self.shown


def _json_int(text: str) -> int | NotANumber:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        return NotANumber(f"an integer of {digits:,} digits", integer=True)
    return int(text)


class DuplicateKeyError(Exception):  # (not a ValueError: parse_json reads those as its own)
    """A JSON object names ``key`` more than once (``json`` would keep the last value)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key

    def __str__(self) -> str:
        return (
            f"key {self.key!r} appears more than once in one object; expected each key once "
            "(JSON readers differ on which value they keep)"
        )


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``json``'s ``object_pairs_hook`` (``parse_json(..., object_pairs_hook=unique_keys)``)
    that refuses a key given twice in one object.

    Raises:
        DuplicateKeyError: naming the first key given again.
    """
    obj = dict(pairs)
    if len(obj) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return obj


def parse_json(text: str, where: str, *, markers: bool = True, **hooks: Any) -> Any:
    """``json.loads(text)`` with ``NaN``, ``Infinity`` and integers of more than
    ``MAX_INT_DIGITS`` digits read as ``NotANumber`` (for the field checks to name), and nesting
    deeper than Python's recursion refused with the line where it passes ``MAX_JSON_DEPTH``.

    Args:
        text: the JSON text.
        where: how errors name it (``"trace.jsonl line 3"``, ``"config.json"``); the line of
            a text of several lines is added to it as `` line N`` unless it names one.
        markers: read NaN, infinities and overlong integers as ``NotANumber``; ``False``: NaN
            and infinities as floats (``json``'s reading) and an overlong integer refused.
        hooks: more keyword arguments of ``json.loads`` (``object_pairs_hook``).

    Raises:
        json.JSONDecodeError: malformed JSON (the caller words it).
        ValueError: nesting too deep for Python's parser, or (``markers=False``) an integer of
            more than ``MAX_INT_DIGITS`` digits.
    """
    try:
        if markers:
            return json.loads(text, parse_constant=NotANumber, parse_int=_json_int, **hooks)
        return json.loads(text, **hooks)
    except json.JSONDecodeError:
        raise
    except ValueError:  # json's int(): more than 4,300 digits
        found = long_integer_line(text)
        if found is None:
            raise
        at = "" if " line " in where or "\n" not in text else f" line {found[0]}"
        raise ValueError(
            f"{where}{at}: an integer of more than {MAX_INT_DIGITS:,} digits"
        ) from None
    except RecursionError:
        line = deep_json_line(text)
        at = "" if " line " in where or "\n" not in text or line is None else f" line {line}"
        raise ValueError(
            f"{where}{at}: JSON nested more than {MAX_JSON_DEPTH} levels deep (traces and "
            "configs nest a few)"
        ) from None


def deep_json_line(text: str, limit: int = MAX_JSON_DEPTH) -> int | None:
    """The 1-based line where the nesting of JSON arrays and objects in ``text`` (strings
    skipped) first passes ``limit`` levels, or ``None``."""
    depth, line, in_string, skip = 0, 1, False, -1
    for match in re.finditer(r'[\[\]{}"\\\n]', text):
        at, char = match.start(), match.group()
        if at == skip:
            continue
        if char == "\n":
            line += 1
        elif in_string:
            if char == "\\":
                skip = at + 1  # the escaped character
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            if depth > limit:
                return line
        elif char in "]}":
            depth -= 1
    return None


def long_integer_line(text: str) -> tuple[int, str] | None:
    """The first line of ``text`` holding an integer of more than ``MAX_INT_DIGITS`` digits, and
    the key it is set to there (``""`` when the line sets none), or ``None``."""
    match = re.search(rf"\d{{{MAX_INT_DIGITS + 1},}}", text)
    if match is None:
        return None
    start = text.rfind("\n", 0, match.start()) + 1
    key = re.match(r"\s*([\w.\"'-]+)\s*=", text[start : match.start()])
    return text.count("\n", 0, match.start()) + 1, key.group(1).strip("\"'") if key else ""


def toml_key_line(text: str, dotted: str, *, set_only: bool = False) -> int | None:
    """The line (1-based) of TOML ``text`` that sets the dotted field ``dotted``, or the table
    or inline table holding it (``[cache]`` then ``block_size_tokens = 0``; ``cache =
    { block_size_tokens = 0 }``; ``cache.block_size_tokens = 0``); ``None`` when no line does.
    ``set_only``: not a table header's line (the table may not set the field at all). Read
    line by line (table headers and ``key =`` lines), enough to point at a field."""
    table = ""
    best: int | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        header = re.match(r"\[\[?\s*([^\]]+?)\s*\]\]?", line)
        if header:
            table = header.group(1).replace('"', "").replace("'", "").replace(" ", "")
            if not set_only and (dotted == table or dotted.startswith(f"{table}.")):
                best = number  # the table holding it, until the key itself is found
            continue
        key = re.match(r"([\w.\"' -]+?)\s*=", line)
        if key is None:
            continue
        name = key.group(1).replace('"', "").replace("'", "").replace(" ", "")
        full = f"{table}.{name}" if table else name
        if full == dotted:
            return number
        if dotted.startswith(f"{full}."):  # an inline table that holds it
            best = number
    return best


def at_lines(path: str | Path, message: str, table: str = "") -> str:
    """``message`` (one problem a line, each ``field: ...``) with each problem prefixed by the
    file and the line that sets its field (``c.toml line 2: cache.block_size_tokens: ...``;
    the file alone where no line does). ``table``: the table of the file the fields sit in
    (``question`` for a plan's ``[question] hi``); an item's field (``zip[0]``) is its key's."""
    text = read_text(path)
    out = []
    for problem in message.splitlines():
        named, _, rest = problem.partition(": ")
        field = named.split("[", 1)[0]
        number = None
        item = re.fullmatch(r"([\w.]+)\[(\d+)\]", named)
        if item is not None:  # (the item's own [[table]], and the field the rest names in it)
            inner = rest.split(": ", 1)[0]
            number = array_table_line(text, item.group(1), int(item.group(2)), inner)
        if number is None and field and " " not in field:
            number = toml_key_line(text, f"{table}.{field}" if table else field)
        out.append(f"{path} line {number}: {problem}" if number else f"{path}: {problem}")
    return "\n".join(out)


def array_table_line(text: str, table: str, index: int, inner: str = "") -> int | None:
    """The line (1-based) of TOML ``text`` of item ``index`` of the array of tables ``table``
    (its ``[[table]]`` header, the ``index + 1``-th), or of the line inside it setting the
    dotted field ``inner``; ``None`` where the text has no such item (an inline array)."""
    lines = text.splitlines()
    seen = -1
    for number, raw in enumerate(lines, start=1):
        header = re.fullmatch(r"\[\[\s*([^\]]+?)\s*\]\]", raw.strip().split("#", 1)[0].strip())
        if header is None or header.group(1).replace('"', "").replace(" ", "") != table:
            continue
        seen += 1
        if seen != index:
            continue
        end = next(
            (n for n in range(number, len(lines)) if lines[n].strip().startswith("[")),
            len(lines),
        )
        found = None
        if inner and " " not in inner:
            found = toml_key_line("\n".join(lines[number:end]), inner, set_only=True)
        return number + found if found is not None else number
    return None


def _overwrite_hint(message: str, text: str) -> str:
    """What tomllib's "Cannot overwrite a value" means at its line: a table header there opens
    a key already given a value; a key there is set twice."""
    found = re.search(r"Cannot overwrite a value \(at line (\d+)", message)
    if found is None:
        return ""
    lines = text.splitlines()
    number = int(found.group(1))
    line = lines[number - 1].strip() if 0 < number <= len(lines) else ""
    if line.startswith("["):
        return (
            '; a key given a value cannot also be opened as a table (model = "llama-3.1-8b" '
            'then [model.attention]: write [model] with preset = "llama-3.1-8b" and the '
            "table under it)"
        )
    return "; a key is set twice in one table (keep one)"


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
        raise ValueError(f"{path}: invalid TOML: {err}{_overwrite_hint(str(err), text)}") from None
    except ValueError:  # an integer Python refuses to convert (more than 4,300 digits)
        found = long_integer_line(text)
        if found is None:
            raise
        line, key = found
        digits = len(max(re.findall(r"\d+", text.splitlines()[line - 1]), key=len))
        raise ValueError(
            f"{path} line {line}: {key + ' = ' if key else ''}an integer of {digits:,} digits; "
            "no setting takes a number that long"
        ) from None


def read_json(path: str | Path) -> Any:
    """The file parsed as JSON (see ``read_text`` for the errors).

    Raises:
        FileNotFoundError: no such file.
        ValueError: a folder, not UTF-8, or invalid JSON (naming the file, line and column).
    """
    return json_from_text(read_text(path), path)


def json_from_text(text: str, path: str | Path) -> Any:
    """``read_json`` of ``text`` read from ``path``.

    Raises:
        ValueError: invalid JSON (naming the file, line and column).
    """
    try:
        return parse_json(text, str(path), markers=False)
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{path} line {err.lineno} column {err.colno}: invalid JSON ({err.msg})"
        ) from None


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


def cached_sha256_file(path: Path) -> str:
    """``sha256_file``, remembered per path and modification time (a changed file is hashed
    again). Raises ``OSError`` as ``sha256_file``."""
    return _sha256_at(str(path), path.stat().st_mtime_ns)


@functools.cache
def _sha256_at(path: str, mtime_ns: int) -> str:
    return sha256_file(path)


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
