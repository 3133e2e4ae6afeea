"""``kvsim sweep`` and ``kvsim plot``: typer commands, added to the main app by ``register``.

Also runnable alone: ``python -m kvsim.cli_sweep sweep experiments/fig2.toml -j 2``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from kvsim.experiment import load_experiment


def sweep(
    experiment: Annotated[Path, typer.Argument(help="experiment TOML, e.g. experiments/fig2.toml")],
    jobs: Annotated[int, typer.Option("-j", "--jobs", min=1, help="worker processes")] = 1,
    scheduler: Annotated[
        str | None,
        typer.Option(
            help="Dask scheduler: tcp://HOST:PORT, or 'local' for a local Dask cluster "
            "(default: a local process pool)"
        ),
    ] = None,
    out: Annotated[Path, typer.Option(help="results root; writes OUT/NAME/")] = Path("results"),
    quick: Annotated[
        bool,
        typer.Option(
            help="small runs: apply the TOML's \\[quick] table; results go to OUT/quick/NAME"
        ),
    ] = False,
    progress: Annotated[bool, typer.Option(help="show a progress bar")] = True,
) -> None:
    """Run every unfinished point of an experiment and write OUT/NAME/summary.parquet."""
    from kvsim.sweep import run_sweep

    try:
        spec = load_experiment(experiment)
    except FileNotFoundError as err:
        typer.echo(f"error: no such experiment file: {err.filename or experiment}", err=True)
        raise typer.Exit(2) from None
    except ValueError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    try:
        report = run_sweep(
            spec, out, jobs=jobs, scheduler=scheduler, quick=quick, progress=progress
        )
    except ValueError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        typer.echo(
            "interrupted: finished points are saved; run the same command to resume", err=True
        )
        raise typer.Exit(130) from None
    typer.echo(
        f"{report.folder}: {len(report.table)} points in summary.parquet "
        f"({report.num_run} run, {report.num_skipped} resumed, "
        f"{len(report.failures)} failed)"
    )
    for f in report.failures:
        typer.echo(f"FAILED point {f.index} [{f.point}] key={f.key}: {f.error}", err=True)
    if report.failures:
        raise typer.Exit(1)


def plot(
    results: Annotated[list[Path], typer.Argument(help="sweep folders, e.g. results/fig2")],
    out: Annotated[
        Path | None, typer.Option(help="where PNGs go (default: RESULTS/figures)")
    ] = None,
) -> None:
    """Draw the standard figures (PNG) of one or more sweep folders."""
    from kvsim.figures import draw_figures

    for folder in results:
        try:
            written = draw_figures(folder, None if out is None else out / folder.name)
        except FileNotFoundError as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(2) from None
        typer.echo(f"{folder}: {len(written)} figures -> {written[0].parent if written else '-'}")


def register(app: typer.Typer) -> None:
    """Add ``sweep`` and ``plot`` to the ``kvsim`` app."""
    app.command("sweep")(sweep)
    app.command("plot")(plot)


def main() -> None:
    """Entry point for ``python -m kvsim.cli_sweep``."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    app = typer.Typer(add_completion=False, no_args_is_help=True)
    register(app)
    app()


if __name__ == "__main__":
    main()
