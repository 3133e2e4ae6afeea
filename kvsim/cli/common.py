"""What every ``kvsim`` command shares: the consoles, the one error path, ``--set`` parsing and
results-folder checks.

The error path (``guard``): a user error (a wrong value, a malformed file, missing data) prints
one ``error:`` line naming the file, field, line or value and what was expected, and exits with
status 2; an interrupt exits with 130; anything else is a kvsim bug and prints one line asking
for ``--debug``, which shows the traceback instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

console = Console()
err_console = Console(stderr=True)
T = TypeVar("T")


class _State:
    debug = False


STATE = _State()

# folders that must never be a results root (written into, or cleaned of stale temp folders)
SYSTEM_ROOTS = frozenset(
    Path(p)
    for p in (
        "/",
        "/bin",
        "/boot",
        "/dev",
        "/etc",
        "/home",
        "/lib",
        "/lib64",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/sbin",
        "/srv",
        "/sys",
        "/tmp",
        "/usr",
        "/var",
    )
)


def _user_error_types() -> tuple[type[BaseException], ...]:
    from pydantic import ValidationError

    from kvsim.workload import DataNotFoundError

    return (ValueError, OSError, DataNotFoundError, ValidationError, UnicodeDecodeError)


def one_line(err: BaseException) -> str:
    """An exception's message on one line (whitespace runs folded)."""
    return " ".join(str(err).split()) or type(err).__name__


def guard(fn: Callable[[], T]) -> T:
    """Run ``fn`` through the one error path (see the module docstring).

    Raises:
        typer.Exit: status 2 (user error), 130 (interrupted) or 1 (internal error).
    """
    if STATE.debug:
        return fn()
    try:
        return fn()
    except typer.Exit:
        raise
    except KeyboardInterrupt:
        err_console.print("interrupted", highlight=False)
        raise typer.Exit(130) from None
    except _user_error_types() as err:
        err_console.print(
            f"[bold red]error:[/] {escape(one_line(err))}", highlight=False, soft_wrap=True
        )
        raise typer.Exit(2) from None
    except Exception as err:  # a kvsim bug: one line, the traceback behind --debug
        err_console.print(
            f"[bold red]internal error:[/] {type(err).__name__}: {escape(one_line(err))} "
            "(rerun with kvsim --debug ... for the traceback, and please report it)",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(1) from None


def check_out_dir(out: Path | None, option: str = "--out") -> None:
    """Fail before simulating when ``out`` cannot be a results folder: an existing file, or a
    system root such as ``/`` or ``/usr``.

    Raises:
        ValueError: naming the option and the path.
    """
    if out is None:
        return
    if out.exists() and not out.is_dir():
        raise ValueError(f"{option}: expected a folder, got the existing file {str(out)!r}")
    resolved = out.expanduser().resolve()
    if resolved in SYSTEM_ROOTS:
        raise ValueError(
            f"{option}: {str(out)!r} is a system folder; give a results folder such as "
            "results/ or ./out"
        )


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["cache.block_size_tokens=32"]`` -> ``{"cache.block_size_tokens": 32}`` (JSON values,
    else the text).

    Raises:
        ValueError: a pair without ``=`` or with an empty key.
    """
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(
                f"--set: expected KEY=VALUE (e.g. cache.block_size_tokens=32), got {pair!r}"
            )
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out
