"""``kvsim compare RUN_A RUN_B``: two runs' summaries side by side with their differences."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from kvsim.cli.common import guard, print_whole


def load_summary(folder: Path) -> dict[str, Any]:
    """A run's ``summary.json`` (a folder written by ``kvsim run --out``, a sweep point, or the
    file itself); ``null`` metrics read as NaN.

    Raises:
        ValueError: no such file, or not UTF-8, invalid JSON, not a JSON object, a value
            ``read_summary`` refuses, or no run's (no ``config_key``), naming it.
    """
    path = folder / "summary.json" if folder.is_dir() else folder
    if not path.is_file() or path.suffix != ".json":  # (a run's folder or its summary.json)
        from kvsim.results.folders import check_folder

        check_folder(folder, "run", str(folder))  # (says what it is instead)
    from kvsim.results import read_summary
    from kvsim.results.tables import is_run_summary

    summary = read_summary(path)
    if not is_run_summary(summary):  # ({} printed a table of dashes)
        raise ValueError(
            f"{path}: not a kvsim run's summary (no config_key); expected the summary.json "
            "of kvsim run --out, or a sweep point's"
        )
    return summary


def compare(
    run_a: Annotated[Path, typer.Argument(help="A results folder (kvsim run --out A).")],
    run_b: Annotated[Path, typer.Argument(help="Another results folder.")],
) -> None:
    """Print two runs' summaries side by side with their differences (B - A)."""

    def go() -> None:
        from kvsim.view.summary import compare_table

        a, b = load_summary(run_a), load_summary(run_b)
        print_whole(compare_table(a, b, str(run_a), str(run_b)))

    guard(go)


def register(app: typer.Typer) -> None:
    """Add ``compare`` to the ``kvsim`` app."""
    app.command("compare")(compare)
