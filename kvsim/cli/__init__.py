"""The ``kvsim`` command line, one package of commands in one style (typer):

``run`` · ``compare`` · ``plan`` · ``sweep`` · ``plot`` · ``report`` · ``reproduce`` ·
``presets`` · ``calibrate`` · ``data`` (``fetch``, ``list``) · ``validate``.

Every command goes through ``common.guard``: a user error prints one line naming the file, field,
line or value and exits with status 2; ``kvsim --debug COMMAND`` shows tracebacks instead.
"""

from __future__ import annotations

import inspect
import logging
import sys
from typing import Annotated

import typer

from kvsim.cli import (
    calibrate,
    compare,
    data,
    plan,
    presets,
    report,
    reproduce,
    run,
    sweep,
    validate,
)
from kvsim.cli.common import STATE, OneLineErrors

app = typer.Typer(
    cls=OneLineErrors,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="kvsim: simulate KV-cache allocation policies for LLM serving.",
    context_settings={"help_option_names": ["-h", "--help"]},  # every command inherits them
)


def _print_version(asked: bool) -> None:
    if asked:
        import kvsim

        typer.echo(f"kvsim {kvsim.__version__}")
        raise typer.Exit


@app.callback()
def _options(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print kvsim's version and exit.",
        ),
    ] = False,
) -> None:
    STATE.debug = debug


for module in (run, compare, plan, sweep, report, reproduce, presets, calibrate, data, validate):
    module.register(app)


def _reflow_help(group: typer.Typer) -> None:
    """Give each command its docstring as help with every paragraph on one line: typer's rich
    help keeps a docstring's line breaks, so a paragraph written at 100 columns broke into ragged
    lines on an 80-column terminal ("fig12-alpaca (its" / "Alpaca" / "panels)")."""
    for command in group.registered_commands:
        if command.help is None and command.callback is not None and command.callback.__doc__:
            paragraphs = inspect.cleandoc(command.callback.__doc__).split("\n\n")
            command.help = "\n\n".join(" ".join(p.split()) for p in paragraphs)
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _reflow_help(sub.typer_instance)


_reflow_help(app)


def main() -> None:
    """Console-script entry point."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # a dataset filter's counts (rows dropped by overflow = "drop" or a user's minimum lengths)
    # are notes, not warnings, but they reach the terminal: no rows dropped without a count
    logging.getLogger("kvsim.workload").setLevel(logging.INFO)
    try:
        app()
    except KeyboardInterrupt:  # outside a command's guard (while the command line loads)
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None


__all__ = ["app", "main"]
