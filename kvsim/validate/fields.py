"""Reading the measured runs' files with errors that name the file, the place in it (line, or
JSON path), the field and the value, and what was expected.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from kvsim.base.extras import require
from kvsim.base.limits import MAX_TIME_S, is_int_at_least
from kvsim.base.textfile import NotANumber, read_json, read_text


def read_yaml(path: Path) -> Any:
    """The YAML file parsed (``yaml.safe_load``).

    Raises:
        FileNotFoundError: no such file.
        ValueError: not UTF-8, or malformed YAML (naming the file and line).
    """
    yaml = require("validate", "kvsim validate (a run's YAML files)")
    text = read_text(path)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = "" if mark is None else f" line {mark.line + 1}"
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ValueError(f"{path}{line}: malformed YAML ({problem})") from None


def read_json_file(path: Path) -> Any:
    """The JSON file parsed (``kvsim.base.textfile.read_json``: errors name the file)."""
    return read_json(path)


def table(value: Any, where: str) -> dict[str, Any]:
    """``value`` as a JSON object / YAML mapping.

    Raises:
        ValueError: ``where: expected an object, got ...``.
    """
    if not isinstance(value, dict):
        raise ValueError(f"{where}: expected an object, got {_shown(value)}")
    return value


def items(value: Any, where: str) -> list[Any]:
    """``value`` as a non-empty JSON array.

    Raises:
        ValueError: ``where: expected a non-empty array, got ...``.
    """
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: expected a non-empty array, got {_shown(value)}")
    return value


def integer(obj: dict[str, Any], key: str, where: str, *, minimum: int = 0) -> int:
    """``obj[key]`` as an integer >= ``minimum`` (``where`` names the object: file and path).

    Raises:
        ValueError: missing, not an integer (a bool, a float, text, NaN) or too small.
    """
    if key not in obj:
        raise ValueError(f"{where}: missing field {key!r}")
    value = obj[key]
    if isinstance(value, float) and value.is_integer() and math.isfinite(value):
        value = int(value)  # YAML and some writers give 128.0
    if not is_int_at_least(value, minimum):
        raise ValueError(f"{where}: {key} must be an integer >= {minimum}, got {_shown(obj[key])}")
    return value


def number(
    obj: dict[str, Any], key: str, where: str, *, minimum: float = 0.0, maximum: float = MAX_TIME_S
) -> float:
    """``obj[key]`` as a finite number in ``[minimum, maximum]``.

    Raises:
        ValueError: missing, not a number (a bool, text, NaN, an infinity) or out of range.
    """
    if key not in obj:
        raise ValueError(f"{where}: missing field {key!r}")
    value = obj[key]
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not minimum <= value <= maximum:
        raise ValueError(
            f"{where}: {key} must be a number from {minimum:g} to {maximum:g}, got {_shown(value)}"
        )
    return float(value)


def flag(obj: dict[str, Any], key: str, where: str, default: bool | None = None) -> bool:
    """``obj[key]`` as a JSON boolean (``default`` when absent and a default is given).

    Raises:
        ValueError: missing without a default, or not ``true``/``false``.
    """
    if key not in obj and default is not None:
        return default
    if key not in obj:
        raise ValueError(f"{where}: missing field {key!r}")
    if not isinstance(obj[key], bool):
        raise ValueError(f"{where}: {key} must be true or false, got {_shown(obj[key])}")
    return bool(obj[key])


def text(obj: dict[str, Any], key: str, where: str) -> str:
    """``obj[key]`` as a non-empty string.

    Raises:
        ValueError: missing, or not a non-empty string.
    """
    value = obj.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: {key} must be a non-empty string, got {_shown(value)}")
    return value


def _shown(value: Any) -> str:
    """How an error shows a value: short, with its JSON type when that is the problem."""
    if isinstance(value, NotANumber):
        return repr(value)
    if isinstance(value, bool):
        return str(value).lower()
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an empty array" if not value else "an array"
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."
