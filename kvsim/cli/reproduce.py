"""``kvsim reproduce NAME``: a paper result (or reference study) through the sweep engine, next to
the published numbers."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from kvsim.cli.common import (
    NoProgress,
    check_out_dir,
    console,
    folder_name,
    guard,
    print_whole,
    warn_many_jobs,
)

if TYPE_CHECKING:
    import pandas as pd


def _cell(column: str, value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "[red]NO[/]"
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        if column == "rel_error":
            return f"{value:+.1%}"
        if column.endswith(("_pct", "_pct_min", "_pct_max")) or column == "paper":
            return f"{value:.1f}"
        return f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def frame_table(frame: pd.DataFrame, title: str) -> Table:
    """A results frame as a rich table, numbers rounded for people."""
    table = Table(title=title, title_justify="left")
    for column in frame.columns:
        table.add_column(  # (folded, not cut to "reserv…", where COLUMNS is narrow)
            column.replace("_", " "),
            justify="left" if frame[column].dtype == object else "right",
            overflow="fold",
        )
    for _, row in frame.iterrows():
        table.add_row(*(_cell(c, row[c]) for c in frame.columns))
    return table


def reproduce(
    name: Annotated[
        str,
        typer.Argument(
            help="fig2 (the main job), fig12 (OPT-13B), fig12-66b, fig12-175b, fig12-alpaca "
            "(its Alpaca panels), fig12-66b-alpaca, fig12-175b-alpaca, fig13, fig14, fig15, "
            "fig16, fig17, fig18b, preemption (§7.3), prefix-caching (Mooncake)."
        ),
    ] = "fig2",
    out: Annotated[
        Path, typer.Option(parser=folder_name, help="Results root; writes OUT/NAME/.")
    ] = Path("results"),
    jobs: Annotated[
        int,
        typer.Option(
            "-j", "--jobs", min=1, metavar="N", help="Points at once: this process and N-1 workers."
        ),
    ] = 1,
    scheduler: Annotated[
        str | None, typer.Option(help="Dask scheduler tcp://HOST:PORT, or 'local'.")
    ] = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Small runs: the experiments' \\[quick] tables.")
    ] = False,
    no_progress: NoProgress = False,
) -> None:
    """Reproduce a PagedAttention paper figure next to its published numbers (fig2: main job)."""
    from kvsim.study.paper import REPRODUCTIONS
    from kvsim.study.paper import reproduce as run_reproduction
    from kvsim.study.paper.run import describe

    def go() -> None:
        check_out_dir(out)
        warn_many_jobs(jobs)
        if name not in REPRODUCTIONS:
            raise ValueError(f"reproduce: unknown {name!r}; choose from {', '.join(REPRODUCTIONS)}")
        if scheduler is not None:  # before anything is said or written
            from kvsim.base.workers import DASK_CONNECT_TIMEOUT_S, check_scheduler

            check_scheduler(scheduler, DASK_CONNECT_TIMEOUT_S)
        console.print(f"[bold]{describe(name)}[/]")
        said: list[str] = []

        def say(msg: str) -> None:
            said.append(msg)
            console.print(f"  {msg}", highlight=False, markup=False)

        rep = run_reproduction(
            name,
            out,
            jobs=jobs,
            quick=quick,
            scheduler=scheduler,
            progress=not no_progress,
            say=say,
        )
        shown = rep.table if rep.view is None else rep.view
        print_whole(frame_table(shown, f"{name}: kvsim (paper)" if rep.beside_paper else name))
        for note in rep.notes:
            if note not in said:  # (fig2's lengths line: said before the runs, once)
                console.print(f"  {note}", highlight=False, markup=False)
        if rep.in_band is not None:
            verdict = (
                "[green]every number within its band[/]"
                if rep.in_band
                else "[red]outside its band[/]"
            )
            console.print(f"  {verdict}")
        console.print(f"wrote {', '.join(str(p) for p in rep.paths)}")

    guard(go)


def register(app: typer.Typer) -> None:
    """Add ``reproduce`` to the ``kvsim`` app."""
    app.command("reproduce")(reproduce)
