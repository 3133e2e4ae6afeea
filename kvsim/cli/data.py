"""``kvsim data``: download the real traces (``fetch``) and show what the data folder holds
(``list``).

The work is done by
:mod:`kvsim.workload.fetch`. Errors (network, checksum, bad pickle, unwritable folder) print one
line naming the file and URL and exit with status 2.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from kvsim.cli.common import OneLineErrors, check_out_dir, guard
from kvsim.workload import fetch as datafetch
from kvsim.workload.catalog import ENV_VAR, data_dir, data_dir_searched, default_data_dir

data_app = typer.Typer(
    cls=OneLineErrors,
    no_args_is_help=True,
    help="Download and verify the public real traces kvsim reads ($KVSIM_DATA).",
)


@data_app.command("fetch")
def fetch(
    dest: Annotated[
        Path | None,
        typer.Option(
            help=f"Folder to store the files in (default: ${ENV_VAR}, else the folder kvsim "
            "reads traces from without it: shared/data/traces beside the repository, or "
            "../shared/data/traces from the current folder; kvsim data list names it); created."
        ),
    ] = None,
    mirror: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="Download every file from URL/<file name> instead of the upstream hosts "
            "(an http(s):// or file:// URL, or a local folder).",
        ),
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME",
            help="Fetch only this trace (e.g. azure_conv, sharegpt_opt); repeatable.",
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            min=1.0, max=3600, metavar="SECONDS", help="Seconds to wait for a connection or a read."
        ),
    ] = datafetch.DEFAULT_TIMEOUT_S,
) -> None:
    """Download the traces from pinned public sources, check SHA-256s, convert, store."""

    def go() -> None:
        folder = datafetch.destination(dest)
        option = "--dest" if dest is not None and str(dest) else f"${ENV_VAR} (or its default)"
        check_out_dir(folder, option, "data folder")
        results = datafetch.fetch(
            folder, names=only, base_url=mirror, timeout=timeout, on_progress=typer.echo
        )
        for result in results:
            typer.echo(f"{result.status:<9} {result.source.file_name}  sha256 ok")
        typer.echo(f"{len(results)} file(s) verified in {folder}")
        env_value = os.environ.get(ENV_VAR)
        here = folder.expanduser().resolve()
        reads = Path(env_value).expanduser() if env_value else default_data_dir()
        if reads.resolve() != here:
            typer.echo(f"kvsim reads traces from ${ENV_VAR}: export {ENV_VAR}={here}")

    guard(go)


@data_app.command("list")
def list_(
    dest: Annotated[
        Path | None,
        typer.Option(help=f"Data folder to inspect (default: ${ENV_VAR}, else kvsim's default)."),
    ] = None,
) -> None:
    """List the traces kvsim can fetch and whether each is present and verified."""

    def go() -> None:
        if dest is not None:
            folder: Path | None = dest.expanduser()
            if dest.exists() and not dest.is_dir():
                raise ValueError(f"--dest: expected a folder, got the file {str(dest)!r}")
        else:
            try:
                folder = data_dir()
            except FileNotFoundError:  # catalog.DataNotFoundError: no data folder yet
                folder = None
        statuses = datafetch.status(folder)
        if folder is None:
            typer.echo(f"data folder: none found; looked in {data_dir_searched()}")
        else:
            typer.echo(f"data folder: {folder}")
        width = max(len(s.source.file_name) for s in statuses)
        state_width = max(len(s.state) for s in statuses)
        name_width = max(len(s.source.trace) for s in statuses)
        for item in statuses:
            typer.echo(
                f"{item.state:<{state_width}}  {item.source.trace:<{name_width}}  "
                f"{item.source.file_name:<{width}}  {item.source.licence}"
            )
        if any(s.state == "unreadable" for s in statuses):
            typer.echo("make the unreadable files readable (kvsim cannot check or use them)")
        if any(s.state in ("missing", "differs") for s in statuses):
            typer.echo("fetch the missing or differing files with `kvsim data fetch`")

    guard(go)


def register(app: typer.Typer) -> None:
    """Add the ``data`` sub-app (``fetch``, ``list``) to a Typer app."""
    app.add_typer(data_app, name="data")
