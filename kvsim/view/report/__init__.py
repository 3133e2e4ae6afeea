"""``kvsim report``: one self-contained HTML page per set of runs.

For each run folder (``kvsim run --out DIR``) the page animates the physical KV memory map over
simulated time (cells coloured by owning request, filled by live tokens, dark red where allocated
but empty, holes hatched), with the waiting queue, the memory-over-time and waste charts under a
moving cursor, latency ECDFs, and the summary and config side by side. Data is embedded as JSON
and plotly.js is inlined: the file opens without network or server.

    from kvsim.view.report import write_report
    write_report(["results/contiguous", "results/paged"], "report.html")
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kvsim.base.extras import require

__all__ = ["write_report"]


def write_report(run_dirs: Sequence[str | Path], out: str | Path) -> Path:
    """Write the report of ``run_dirs`` (shown in that order) to the HTML file ``out``.

    Raises:
        MissingExtraError: plotly (the ``report`` extra) is not installed.
        ValueError: no run folder given, more than two, the same one twice, or one is not a
            folder with a ``summary.json``.
    """
    require("report", "kvsim report")  # plotly: the charts and the inlined plotly.js
    from kvsim.view.report.build import render
    from kvsim.view.report.data import load_runs

    if not run_dirs:
        raise ValueError("RUN_DIR: expected at least one run folder, got none")
    if len(run_dirs) > 2:
        raise ValueError(
            f"RUN_DIR: one or two run folders (shown side by side), got {len(run_dirs)}; "
            "write a report per pair"
        )
    if len(run_dirs) == 2 and Path(run_dirs[0]).resolve() == Path(run_dirs[1]).resolve():
        raise ValueError(
            f"RUN_DIR: {str(run_dirs[0])!r} and {str(run_dirs[1])!r} are the same folder; give "
            "one, or two runs to set side by side"
        )
    runs = load_runs(run_dirs)
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"--out: expected an HTML file, got the folder {str(out)!r}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(runs), encoding="utf-8")
    return out
