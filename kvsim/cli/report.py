"""``kvsim report RUN_DIR [RUN_DIR ...] [--out FILE.html]``: the self-contained HTML report.

Bad input (a missing folder, one
without ``summary.json``, an ``--out`` not named ``*.html``, or naming an HTML file an earlier
report did not write) prints one red line and exits with status 2, without a traceback.
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
        if out.is_file() and not written_by_report(out):
            raise ValueError(
                f"--out: {str(out)!r} is an HTML file kvsim report did not write; give another "
                "name, or remove it first"
            )
        path = write_report(run_dirs, out)
        console.print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)", highlight=False)

    guard(go)


REPORT_MARK = b'<meta name="generator" content="kvsim report">'  # (assets/report.html's)


def written_by_report(path: Path) -> bool:
    """Whether the HTML file ``path`` is an earlier report (its head names kvsim as the
    generator), which a new one may replace; a file that cannot be read is not."""
    try:
        with path.open("rb") as file:
            return REPORT_MARK in file.read(4096)
    except OSError:
        return False


def register(app: typer.Typer) -> None:
    """Add ``report`` to a Typer app."""
    app.command("report")(report)
