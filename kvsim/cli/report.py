"""``kvsim report RUN_DIR [RUN_DIR ...] [--out FILE.html]``: the self-contained HTML report.

Bad input (a missing folder, one
without ``summary.json``, an ``--out`` not named ``*.html``) prints one red line and exits with
status 2, without a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvsim.cli.common import check_out_file, console, guard


def report(
    run_dirs: Annotated[
        list[Path],
        typer.Argument(
            metavar="RUN_DIR", help="One or two run folders written by `kvsim run --out DIR`."
        ),
    ],
    out: Annotated[Path, typer.Option(help="The HTML file to write.")] = Path("report.html"),
) -> None:
    """Write one self-contained HTML page of one or two runs (animated memory map, charts).

    No network, no server: the KV memory map animated over time, memory over time, latency ECDFs
    and summaries; two runs side by side.
    """

    def go() -> None:
        from kvsim.view.report import write_report

        # (anything else, a run's summary.json or a .png, would be overwritten with HTML)
        check_out_file(out, "--out", "an HTML file", suffixes=(".html", ".htm"))
        path = write_report(run_dirs, out)
        console.print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)", highlight=False)

    guard(go)


def register(app: typer.Typer) -> None:
    """Add ``report`` to a Typer app."""
    app.command("report")(report)
