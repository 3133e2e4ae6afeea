"""What every ``kvsim`` command shares: the consoles, the one error path, ``--set`` parsing and
results-folder checks.

The error path (``guard``): a user error (a wrong value, a malformed file, missing data) prints
one ``error:`` line naming the file, field, line or value and what was expected, and exits with
status 2; an interrupt exits with 130; a sweep worker that died (a signal, the out-of-memory
killer) prints one ``error:`` line saying a rerun resumes, and exits with 1; anything else is a
kvsim bug and prints one line asking for ``--debug``, which shows the traceback instead.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import sys
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperGroup


def _columns_set() -> bool:
    """The user set a width (rich reads ``COLUMNS`` only when it is a whole number)."""
    return os.environ.get("COLUMNS", "").isdigit()


# Off a terminal (logs, CI), rich would lay tables out in 80 columns and cut their cells; 120
# keeps the widest (the Figure 2 table, `kvsim compare`) whole. COLUMNS still wins.
_LOG_WIDTH = None if sys.stdout.isatty() or _columns_set() else 120
console = Console(soft_wrap=True, width=_LOG_WIDTH)  # paths and messages on one line in logs


def print_whole(renderable: Any) -> None:
    """Print on ``console``, off a terminal as wide as ``renderable`` needs (a table wider than
    the log width would otherwise have its cells cut); a terminal, or a ``COLUMNS`` the user
    set, wraps it to that width."""
    if console.is_terminal or _columns_set():
        console.print(renderable)
        return
    wide = console.options.update(max_width=10_000)
    width = max(console.width, console.measure(renderable, options=wide).maximum)
    Console(width=width, file=console.file, soft_wrap=True).print(renderable)


err_console = Console(stderr=True, soft_wrap=True)
T = TypeVar("T")
# the option run, sweep, plan and reproduce share (a plain flag: progress bars are the default)
NoProgress = Annotated[
    bool, typer.Option("--no-progress", help="No progress bar (shown on a terminal).")
]


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


# trees nothing of kvsim's may be written into, at any depth
SYSTEM_TREES = frozenset(
    Path(p)
    for p in ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib64", "/proc", "/sbin", "/sys", "/usr")
)


def _user_error_types() -> tuple[type[BaseException], ...]:
    from pydantic import ValidationError

    from kvsim.base.extras import MissingExtraError
    from kvsim.core.scheduler.core import PreemptionLivelockError
    from kvsim.workload import DataNotFoundError

    # a livelock is the config's fault (a pool too small for the running set): its message
    # names the request, the count and the pool
    return (
        ValueError,
        OSError,
        DataNotFoundError,
        ValidationError,
        UnicodeDecodeError,
        PreemptionLivelockError,
        MissingExtraError,
    )


# click's base error, whether typer vendors click (typer._click) or uses the package
_CLICK_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


class OneLineErrors(TyperGroup):
    """The ``kvsim`` command group: a usage error (unknown option, bad option value, missing
    argument) prints one ``error:`` line naming the option and exits with status 2, like every
    other user error (click's default is a usage block and a framed message)."""

    def main(  # type: ignore[override]
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except _CLICK_ERROR as exc:
            err: Any = exc  # click's ClickException: ctx, format_message(), exit_code
            where = err.ctx.command_path if getattr(err, "ctx", None) is not None else "kvsim"
            what = one_line_text(err.format_message())
            err_console.print(
                f"[bold red]error:[/] {escape(where)}: {escape(what)} (see {escape(where)} --help)",
                highlight=False,
                soft_wrap=True,
            )
            sys.exit(err.exit_code)
        except Exception as err:  # click's Abort (vendored by typer or not): an interrupt
            if type(err).__name__ != "Abort":
                raise
            err_console.print("interrupted", highlight=False)
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)

    def get_params(self, ctx: Any) -> list[Any]:
        return _without_flag_types(super().get_params(ctx))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            _without_flag_types(command.get_params(ctx))  # (its --help option is kept)
        return command


def _without_flag_types(params: list[Any]) -> list[Any]:
    """``params`` with each on/off flag's type label (typer shows ``<bool>``, which reads as
    if the flag took a value) left out of the help: its metavar set to empty."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


def one_line_text(text: str) -> str:
    """``text`` on one line: its lines (one problem each, as ``format_validation_error`` gives
    several) joined by ``"; "``, whitespace runs within a line folded to one space."""
    return "; ".join(" ".join(line.split()) for line in text.splitlines() if line.strip())


def one_line(err: BaseException) -> str:
    """An exception's message on one line (whitespace runs folded)."""
    return one_line_text(str(err)) or type(err).__name__


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
    except BrokenPipeError:  # (piped into head: the reader has what it wanted)
        with contextlib.suppress(OSError):  # (nothing more reaches the closed pipe at exit)
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(141) from None  # (a shell's status for a command ended by SIGPIPE)
    except _user_error_types() as err:
        err_console.print(
            f"[bold red]error:[/] {escape(one_line(err))}", highlight=False, soft_wrap=True
        )
        raise typer.Exit(2) from None
    except Exception as err:  # a kvsim bug: one line, the traceback behind --debug
        if _worker_died(err):  # the machine's doing (a signal, memory): status 1, no report
            err_console.print(
                f"[bold red]error:[/] {escape(one_line(err))}", highlight=False, soft_wrap=True
            )
            raise typer.Exit(1) from None
        err_console.print(
            f"[bold red]internal error:[/] {type(err).__name__}: {escape(one_line(err))} "
            "(rerun with kvsim --debug ... for the traceback, and please report it)",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(1) from None


def _worker_died(err: Exception) -> bool:
    """``err`` is ``kvsim.base.workers.WorkerDiedError`` (looked up only where a pool was loaded, so
    that the CLI starts without multiprocessing)."""
    workers = sys.modules.get("kvsim.base.workers")
    return workers is not None and isinstance(err, workers.WorkerDiedError)


def check_out_dir(out: Path | None, option: str = "--out", what: str = "results folder") -> None:
    """Fail before simulating when ``out`` cannot be a results folder: an existing file (or a
    file where a parent folder should be), a link to nothing, a system root such as ``/`` or
    ``/usr``, a folder inside a system tree (``/proc``, ``/etc``, ``/usr``...), or one this user
    may not write.

    Args:
        out: the folder (``None``: nothing to check).
        option: the option or variable that named it, for the message.
        what: what the folder is for, for the message.

    Raises:
        ValueError: naming the option and the path.
    """
    if out is None:
        return
    _refuse_tilde(out, option)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{option}: expected a folder, got the existing file {str(out)!r}")
    for link in (out, *out.parents):  # (mkdir would say "File exists", after the run)
        if link.is_symlink() and not link.exists():
            loop = False
            try:
                link.resolve(strict=True)  # (raises: its target is missing, or links loop)
            except RuntimeError:  # (a loop, as Python before 3.13 says it)
                loop = True
            except OSError as err:
                loop = err.errno == errno.ELOOP
            where = (
                "in a loop of links"
                if loop
                else f"to {str(link.readlink())!r}, which does not exist"
            )
            raise ValueError(
                f"{option}: {str(link)!r} is a link {where}; remove the link or create its folder"
            )
    resolved = out.expanduser().resolve()
    for parent in resolved.parents:
        if parent.exists() and not parent.is_dir():
            raise ValueError(
                f"{option}: cannot create the {what} {str(out)!r}: {str(parent)!r} is a file"
            )
    if resolved in SYSTEM_ROOTS or _in_system_tree(resolved):
        example = "results/ or ./out" if what == "results folder" else "one in your home folder"
        raise ValueError(
            f"{option}: {str(out)!r} is a system folder; give a {what} such as {example}"
        )
    _check_writable(resolved, out, option, f"the {what}")


def check_run_out(out: Path | None) -> None:
    """Fail before simulating when ``kvsim run --out`` would overwrite, or mix its results with,
    files the user has: ``out`` exists, is a folder that holds no earlier run
    (``kvsim.results.tables.is_run_folder``, a save cut short included) and holds a file that is
    not hidden; or it holds a folder or a pipe by the name of a file a run writes. A folder
    holding an earlier run is taken (``kvsim.results.replace`` replaces that run's files;
    other files stay), as is a new one.

    Raises:
        ValueError: naming the folder and the first few files it holds, or the entry in the way.
    """
    from kvsim.results.tables import blocking_entries, is_run_folder

    if out is None or not out.is_dir():
        return
    blocked = blocking_entries(out)
    if blocked:  # (found after the run, the save would fail or block: the results lost)
        raise ValueError(
            f"--out: {str(out / blocked[0])!r} is a folder or a pipe, where a run writes a file "
            "of that name; move it or choose another folder"
        )
    if (out / "point.json").exists():  # (a sweep's or a plan's: its rerun would call it damaged)
        raise ValueError(
            f"--out: {str(out)!r} is a point of a sweep or a plan (point.json), which kvsim "
            "sweep and kvsim plan keep; choose another folder"
        )
    if is_run_folder(out):
        return
    held = sorted(p.name for p in out.iterdir() if not p.name.startswith("."))
    if held:  # (even a config.json: a model's, not a run's, without a run's summary.json)
        first = ", ".join(held[:3]) + (f" and {len(held) - 3:,} more" if len(held) > 3 else "")
        raise ValueError(
            f"--out: {str(out)!r} holds files of its own ({first}) and no kvsim run (no run's "
            "summary.json): the results would overwrite or mix with them; choose an empty or "
            "new folder"
        )


def folder_name(value: str | Path) -> Path:
    """An option's parser for a folder to write: the path, refusing an empty one (which would be
    the current folder); a default given as a ``Path`` passes through.

    Raises:
        typer.BadParameter: an empty value.
    """
    if isinstance(value, Path):
        return value
    if not value.strip():
        raise typer.BadParameter(f"expected a folder name, got {value!r}")
    return Path(value)


def _check_writable(resolved: Path, out: Path, option: str, what: str) -> None:
    """Fail when the folder, or the nearest existing folder above it where it would be
    created, does not let this user write (found after the simulation, it lost the run)."""
    existing = next((p for p in (resolved, *resolved.parents) if p.exists()), None)
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == resolved else f" in {str(existing)!r}"
        raise ValueError(
            f"{option}: cannot write {what} {str(out)!r}{where}: permission denied; "
            "give a folder you can write"
        )


def check_out_file(
    out: Path, option: str = "--out", what: str = "a file", suffixes: tuple[str, ...] = ()
) -> None:
    """Fail before working when ``out`` cannot be an output file: a name not ending in one of
    ``suffixes`` (any case; ``()``: any name), an existing folder, a link, pipe or device, or a
    path inside a system tree (``/etc``, ``/proc``...), directly in ``/``, under a file, or
    where this user may not write.

    Raises:
        ValueError: naming the option and the path.
    """
    if suffixes and out.suffix.lower() not in suffixes:
        raise ValueError(
            f"{option}: expected {what}, a name ending in {' or '.join(suffixes)}; got {str(out)!r}"
        )
    _refuse_tilde(out, option)
    if out.is_dir():
        raise ValueError(f"{option}: expected {what}, got the folder {str(out)!r}")
    if out.is_symlink() or (out.exists() and not out.is_file()):  # (written through, or blocks)
        raise ValueError(
            f"{option}: {str(out)!r} is a link, a pipe or a device; expected {what} to write"
        )
    resolved = out.expanduser().resolve()
    for parent in resolved.parents:
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"{option}: {str(out)!r} lies under the file {str(parent)!r}")
    if _in_system_tree(resolved) or resolved.parent == Path("/"):
        raise ValueError(f"{option}: {str(out)!r} is in a system folder; write it elsewhere")
    if resolved.exists() and not os.access(resolved, os.W_OK):
        raise ValueError(f"{option}: cannot write {what} {str(out)!r}: permission denied")
    _check_writable(resolved.parent, out, option, what)


def _refuse_tilde(out: Path, option: str) -> None:
    """A path beginning with ``~`` the shell did not expand (it was quoted): the files would go
    to a folder named ``~`` here, not the home folder."""
    if out.parts and out.parts[0].startswith("~"):
        raise ValueError(
            f"{option}: {str(out)!r} begins with ~, which the shell expands only unquoted; "
            "write the folder out (e.g. $HOME/...)"
        )


def _in_system_tree(path: Path) -> bool:
    return any(path == tree or tree in path.parents for tree in SYSTEM_TREES)


SET_EXAMPLE = "cache.kv_cache_gib=4"  # short: the help column is about 23 characters at 80

# a KEY=VALUE override: a dotted field name, then "="
_OVERRIDE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*=.*", re.DOTALL)


def not_an_override(value: Any) -> Any:
    """A positional argument's callback (a config or plan path): refuse one that is no existing
    file but reads as ``KEY=VALUE``, an override given after another under one ``--set``
    (``--set a=1 b=2``), which would otherwise be taken for the path.

    Raises:
        typer.BadParameter: naming the value and saying each override needs its own ``--set``.
    """
    text = "" if value is None else str(value)
    if _OVERRIDE.fullmatch(text) and not Path(text).exists():
        raise typer.BadParameter(
            f"{text!r} is no file but reads as a KEY=VALUE override: each override needs its "
            f"own --set (--set {text})"
        )
    return value


def warn_many_jobs(jobs: int) -> None:
    """Warn when ``-j/--jobs`` asks for more processes than this machine has CPUs: the extra
    ones only share them (the pool also starts no more processes than there are points)."""
    cpus = os.cpu_count() or 1
    if jobs > cpus:
        logging.getLogger("kvsim.cli").warning(
            "-j %d: more processes than this machine's %d CPUs; they share them, and no more "
            "start than there are points to run",
            jobs,
            cpus,
        )


def _toml_value(raw: str, key: str) -> Any:
    """``raw`` read as a TOML value when it is a number, boolean, array or inline table that
    JSON lacks (``65_536``, ``nan``, ``[nan, 0.4]``, ``{ a = 1 }``), as a config file reads it;
    else the text itself (a name, a path, a date).

    Raises:
        ValueError: a value nested too deeply, an integer of more than 4,300 digits (the
            guards ``parse_json`` keeps on the JSON path), an inline table that gives one key
            twice, or a table or array that neither JSON nor TOML reads."""
    if "\n" in raw or "\r" in raw:
        return raw
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError as err:
        key_twice = re.match(r"Duplicate inline table key ('.*') \(", str(err))
        if key_twice:  # an inline table, not text: TOML forbids the key given twice
            raise ValueError(_key_twice(key, key_twice.group(1), raw)) from None
        if raw.lstrip().startswith(("{", "[")):  # a table or list cut short, not a name
            raise ValueError(
                f"--set {key}: {raw} is neither a JSON nor a TOML table or array ({err}); "
                f"a text value that begins so is quoted: --set '{key}=\"...\"'"
            ) from None
        return raw
    except RecursionError:
        raise ValueError(f"--set {key}: value nested too deeply") from None
    except ValueError:  # (Python's limit on converting a long integer)
        raise ValueError(
            f"--set {key}: an integer of more than 4,300 digits; no setting takes a number "
            "that long"
        ) from None
    return value if isinstance(value, int | float | list | dict) else raw


def _key_twice(key: str, twice: str, raw: str) -> str:
    """The error for a ``--set`` table value that gives one key twice (``twice`` quoted)."""
    return (
        f"--set {key}: key {twice} appears more than once in one table ({raw}); expected each "
        "key once (TOML forbids a key given twice)"
    )


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["cache.block_size_tokens=32"]`` -> ``{"cache.block_size_tokens": 32}`` (JSON values,
    else TOML ones, else the text). Within the pairs, order does not matter: a whole table
    (``workload=NAME``) is set before the fields under it (``config.apply_overrides``); a key
    given twice takes its last value, with a warning when the values differ.

    Raises:
        ValueError: a pair without ``=`` or with an empty key, a value nested too deeply, a
            table value (JSON or TOML) that gives one key twice, or a number no field takes
            (NaN, an infinity, an integer of more than 4,300 digits).
    """
    from kvsim.base.textfile import DuplicateKeyError, NotANumber, parse_json, unique_keys

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(
                f"--set: expected KEY=VALUE (e.g. cache.block_size_tokens=32), got {pair!r}"
            )
        if re.search(r"\s", key):  # (no field name has one: the key would read as unknown)
            bare = re.sub(r"\s+", "", key)
            raise ValueError(
                f"--set: the key {key!r} holds white space, which no field name has; "
                f"write --set {bare}={raw}"
            )
        indexed = re.search(r"\[[^\]]*\]|\.\d+(\.|$)", key)
        if indexed:  # (fleet.replica_overrides[0].cache...: read as a field of that name)
            listed = key[: indexed.start()]
            raise ValueError(
                f"--set {key}: an item of a list cannot be set alone; set the whole list "
                f"{listed} as JSON: --set '{listed}=[...]'"
            )
        try:
            value = parse_json(raw, f"--set {key}", object_pairs_hook=unique_keys)
        except json.JSONDecodeError:
            value = _toml_value(raw, key)
        except DuplicateKeyError as err:  # (json would keep the last value)
            raise ValueError(_key_twice(key, repr(err.key), raw)) from None
        if isinstance(value, NotANumber) and value.integer:
            raise ValueError(f"--set {key}: {value!r}; no setting takes a number that long")
        if isinstance(value, NotANumber):  # NaN, Infinity: the text, for the field to refuse
            value = raw
        elif _holds_not_a_number(value):  # (inside a list or table: no field names it)
            shown = raw if len(raw) <= 80 else f"{raw[:60]}... ({len(raw):,} characters)"
            raise ValueError(
                f"--set {key}: {shown} holds NaN, an infinity or an overlong integer; no setting "
                "takes one"
            )
        if key in out and out[key] != value:
            logging.getLogger("kvsim.cli").warning(
                "--set %s given twice (%r, then %r): the last is used", key, out[key], value
            )
        out[key] = value
    return out


def _holds_not_a_number(value: Any) -> bool:
    """Whether a list or table parsed by ``parse_sets`` holds a ``NotANumber`` at any depth."""
    from kvsim.base.textfile import NotANumber

    if isinstance(value, NotANumber):
        return True
    if isinstance(value, dict):
        return any(_holds_not_a_number(v) for v in value.values())
    if isinstance(value, list):
        return any(_holds_not_a_number(v) for v in value)
    return False


def refuse_results(path: Path, expected: str) -> None:
    """A results folder, or a file of one, given where ``expected`` (``"a config TOML"``) is:
    say what reads it.

    Raises:
        ValueError: ``path`` is a run, sweep or plan folder (``kvsim.results.folders``), or a
            file other than a TOML one inside such a folder.
    """
    from kvsim.results.folders import folder_kind, read_by

    if path.is_dir() and (kind := folder_kind(path)) is not None:
        raise ValueError(f"{path}: is a {kind} folder ({read_by(kind)}), expected {expected}")
    if path.is_file() and path.suffix.lower() != ".toml":
        kind = folder_kind(path.parent)
        if kind is not None:
            raise ValueError(
                f"{path}: is part of the {kind} folder {path.parent} ({read_by(kind)}), "
                f"expected {expected}"
            )


def say_if_another_answer_goes(
    folder: Path,
    question: tuple[str | None, str | None, dict[str, float], float | None],
) -> None:
    """Warn when ``folder`` holds the answer to another question than ``question``, ``(field,
    direction, targets, min_window_s)`` (``(None, None, targets, None)`` for ``--cheapest``),
    which this answer replaces."""
    from kvsim.base.textfile import read_json

    try:
        earlier = read_json(folder / "answer.json")
    except (OSError, ValueError):  # (none, or not one kvsim wrote)
        return
    if not isinstance(earlier, dict):
        return
    window = earlier.get("min_window_s")
    asked = (earlier.get("field"), earlier.get("direction"), earlier.get("targets"), window)
    if asked == question:
        return
    bounds = ", ".join(f"{m} <= {b:g}" for m, b in (earlier.get("targets") or {}).items())
    what = "the cheapest fleet" if asked[0] is None else f"{asked[1]} {asked[0]}"
    if isinstance(window, (int, float)):
        bounds += f" over at least {window:g} s of arrivals"
    logging.getLogger("kvsim.cli").warning(
        "plan %s: replacing the answer in %s/ to another question (%s with %s); give another "
        "--name to keep it",
        folder.name,
        folder,
        what,
        bounds,
    )
