"""The ``kvsim`` command line, one package of commands in one style (typer):

``run`` · ``compare`` · ``plan`` · ``sweep`` · ``plot`` · ``report`` · ``reproduce`` ·
``presets`` · ``calibrate`` · ``data`` (``fetch``, ``list``) · ``validate``.

Every command goes through ``common.guard``: a user error prints one line naming the file, field,
line or value and exits with status 2; ``kvsim --debug COMMAND`` shows tracebacks instead.
"""

from __future__ import annotations

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


def main() -> None:
    """Console-script entry point."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        app()
    except KeyboardInterrupt:  # outside a command's guard (while the command line loads)
        sys.stderr.write("interrupted\n")
        raise SystemExit(130) from None


__all__ = ["app", "main"]
