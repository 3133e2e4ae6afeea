"""``kvsim report RUN_DIR [RUN_DIR ...] [--out FILE.html]``: the self-contained HTML report.

``kvsim/cli.py`` adds the command with ``register(app)``. Bad input (a missing folder, one
without ``summary.json``) prints one red line and exits with status 2, without a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

err_console = Console(stderr=True)


def report(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(metavar="RUN_DIR", help="run folders written by `kvsim run --out DIR`"),
    ],
    out: Annotated[Path, typer.Option(help="the HTML file to write")] = Path("report.html"),
) -> None:
    """One HTML page (no network, no server): animated KV memory map, memory over time,
    latency ECDFs and summaries; two runs side by side."""
    from kvsim.report import write_report

    try:
        path = write_report(run_dirs, out)
    except (ValueError, OSError) as err:
        err_console.print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)")


def register(app: typer.Typer) -> None:
    """Add ``report`` to a Typer app."""
    app.command("report")(report)
