"""``kvsim sweep`` (run an experiment's points, resumably, on a process pool or Dask) and
``kvsim plot`` (draw a sweep's standard figures)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated, Any

import typer

from kvsim.base.tablefile import stored_table
from kvsim.base.units import plural
from kvsim.base.workers import DASK_CONNECT_TIMEOUT_S
from kvsim.cli.common import (
    NoProgress,
    check_out_dir,
    console,
    err_console,
    folder_name,
    guard,
    print_whole,
    refuse_results,
    warn_many_jobs,
)


def sweep(
    experiment: Annotated[
        Path,
        typer.Argument(help="Experiment TOML (e.g. experiments/fig2.toml) or a shipped name."),
    ],
    jobs: Annotated[
        int,
        typer.Option(
            "-j", "--jobs", min=1, metavar="N", help="Points at once: this process and N-1 workers."
        ),
    ] = 1,
    scheduler: Annotated[
        str | None,
        typer.Option(
            help="Dask scheduler: tcp://HOST:PORT, or 'local' for a local Dask cluster "
            "(default: a local process pool)."
        ),
    ] = None,
    out: Annotated[
        Path, typer.Option(parser=folder_name, help="Results root; writes OUT/NAME/.")
    ] = Path("results"),
    quick: Annotated[
        bool,
        typer.Option(
            "--quick", help="Small runs: the TOML's \\[quick] table; results go to OUT/quick/NAME."
        ),
    ] = False,
    no_progress: NoProgress = False,
    connect_timeout: Annotated[
        float,
        typer.Option(
            min=0.1,
            max=3600,
            metavar="SECONDS",
            help="How long to wait for a remote Dask --scheduler to answer.",
        ),
    ] = DASK_CONNECT_TIMEOUT_S,
) -> None:
    """Run every unfinished point of an experiment and write OUT/NAME/summary.parquet."""

    def go() -> None:
        from kvsim.presets import experiments_dir
        from kvsim.study.experiment import load_experiment
        from kvsim.study.sweep import run_sweep
        from kvsim.view.summary import SWEEP_DEFAULT_METRICS, sweep_table

        check_out_dir(out)
        warn_many_jobs(jobs)
        remote = scheduler is not None and scheduler.startswith("tcp://")
        if connect_timeout != DASK_CONNECT_TIMEOUT_S and not remote:
            logging.getLogger("kvsim.cli").warning(
                "--connect-timeout %g is read only with a remote --scheduler tcp://HOST:PORT: "
                "it has no effect here",
                connect_timeout,
            )
        path = experiment
        if not path.exists() and path.suffix != ".toml":
            path = experiments_dir() / f"{experiment}.toml"
        refuse_results(path, "an experiment TOML")
        if path.is_dir():
            raise ValueError(f"{experiment}: is a folder; give an experiment TOML file")
        if not path.is_file():
            from kvsim.base.names import preset_hint
            from kvsim.presets import names as preset_names

            names = preset_names(experiments_dir())
            hint = preset_hint("experiments", str(experiment), names)
            raise ValueError(
                f"{experiment}: no such experiment file{hint or ' (kvsim presets experiments)'}"
            )
        spec = load_experiment(path)
        quick_table = spec.quick_set or spec.quick_grid or spec.quick_snapshot_at_s is not None
        if quick and not quick_table:
            logging.getLogger("kvsim.cli").warning(
                "%s has no [quick] table: --quick runs its points at full size (into %s/quick/%s)",
                path,
                out,
                spec.name,
            )
        report = run_sweep(
            spec,
            out,
            jobs=jobs,
            scheduler=scheduler,
            quick=quick,
            progress=not no_progress,
            connect_timeout_s=connect_timeout,
        )
        stored = stored_table(report.folder / "summary.parquet")
        if len(report.table):
            metrics = spec.analysis.get("vs_metrics") or list(SWEEP_DEFAULT_METRICS)
            swept = spec.swept_fields(quick=quick)
            print_whole(sweep_table(report.table, swept, metrics, spec.name))
            note_saturated_points(report.table, swept)
        console.print(
            f"{report.folder}: {len(report.table)} points in "
            f"{stored.name if stored is not None else 'summary.parquet'} "
            f"({report.num_run} run, {report.num_skipped} resumed, "
            f"{len(report.failures)} failed)",
            highlight=False,
        )
        for f in report.failures:
            err_console.print(
                f"FAILED point {f.index} [{f.point}] key={f.key}: {f.error}",
                highlight=False,
                markup=False,
            )
        if report.failures:
            raise typer.Exit(1)

    guard(go)  # an interrupt: run_sweep has said what is saved and how to resume


def plot(
    results: Annotated[list[Path], typer.Argument(help="Sweep folders, e.g. results/fig2.")],
    out: Annotated[
        Path | None,
        typer.Option(parser=folder_name, help="Where PNGs go (default: RESULTS/figures)."),
    ] = None,
) -> None:
    """Draw the standard figures (PNG) of one or more sweep folders."""

    def go() -> None:
        from kvsim.study.figures import draw_figures

        check_out_dir(out)
        failed = 0
        for folder in results:
            try:
                written = draw_figures(folder, None if out is None else out / folder.name)
            except (ValueError, OSError) as err:
                if len(results) == 1:
                    raise
                # one folder that cannot be drawn does not keep the others from theirs
                err_console.print(f"error: {err}", highlight=False, markup=False)
                failed += 1
                continue
            where = written[0].parent if written else "-"
            console.print(f"{folder}: {len(written)} figures -> {where}", highlight=False)
        if failed:
            raise typer.Exit(2)

    guard(go)


def register(app: typer.Typer) -> None:
    """Add ``sweep`` and ``plot`` to the ``kvsim`` app."""
    app.command("sweep")(sweep)
    app.command("plot")(plot)


def note_saturated_points(table: Any, swept: list[str]) -> None:
    """Warn of the points whose run was past saturation (the summary's ``past_saturation``:
    ``kvsim.results.saturation``), named by label or swept values."""
    if "past_saturation" not in table:
        return
    saturated = table[table["past_saturation"].fillna(False).astype(bool)]
    if not len(saturated):
        return
    names = []
    for _, row in saturated.iterrows():
        label = row.get("label")
        shown = [f"{f} = {row[f]}" for f in swept if f in row and f != "label"]
        names.append(", ".join(([str(label)] if isinstance(label, str) else []) + shown))
    logging.getLogger("kvsim.cli").warning(
        "past saturation (the engine finishing fewer requests a second than arrive: these "
        "points' latencies grow with the run's length rather than measure it): %s of %s: %s",
        len(saturated),
        plural(len(table), "point"),
        "; ".join(names),
    )
