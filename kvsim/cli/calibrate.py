"""``kvsim calibrate``: the command lives in ``kvsim.calibrate.cli`` so that the GPU runbook
(``python -m kvsim.calibrate``) needs nothing but numpy, typer and CuPy; ``--from-runs`` (the fit
on measured vLLM runs, ``kvsim.validate.calibration``) is handed to it from here."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import typer

from kvsim.calibrate import cli
from kvsim.cli.common import check_out_file, console, guard

REPLAY_CACHE = Path("results/calibrate/replays.jsonl")


def shipped_fit_path() -> Path:
    """The fitted table kvsim reads (``kvsim/data/cost_fit.toml`` of the kvsim that runs:
    a checkout's file, or the installed package's), ``--from-runs``' default ``--out``; a path
    relative to the current folder wrote a table nothing read."""
    from kvsim.config.cost_spec import COST_FIT_FILE

    return Path(str(resources.files("kvsim.data").joinpath(COST_FIT_FILE)))


def from_runs(out: Path | None, max_evaluations: int) -> None:
    """Fit on the train runs, choose on validate, write the fitted table (``out`` or the one
    kvsim ships); replays are cached in ``results/calibrate/replays.jsonl``."""

    def go() -> None:
        from kvsim.validate.calibration import calibrate_from_runs

        target = out or shipped_fit_path()
        check_out_file(target, "--out", "the fitted table (TOML)", suffixes=(".toml",))
        calibrate_from_runs(
            target,
            cache_path=REPLAY_CACHE,
            max_evaluations=max_evaluations,
            progress=lambda text: console.print(text, highlight=False),
        )

    guard(go)


def fit_parts(folder: Path, out: Path | None, gpu: str | None) -> None:
    """Fit the GPU-side step cost on the steps timed in ``folder`` (``kvsim calibrate --parts``),
    print the report, write ``out`` and its figure beside it (``.png``; default
    ``results/calibration/<gpu>-steps.toml``; the
    shipped one is ``kvsim/data/calibration/<gpu>-steps.toml``). A
    ``<folder>-repeat`` beside it (a second run) gives the run-to-run spread; the kernel table
    shipped for the GPU (``kvsim/data/calibration/<gpu>.csv``) the paged factors.

    Raises:
        typer.Exit: status 2 when ``folder`` is no folder, a file in it is malformed or of
            another device, ``--gpu`` names no GPU preset, or ``--out`` is no ``.toml``.
    """

    def go() -> None:
        from kvsim.calibrate.table import shipped_table_path
        from kvsim.config.hardware import preset_table
        from kvsim.validate.gpu_steps import fit_parts as fit
        from kvsim.validate.gpu_steps import report, write_fit
        from kvsim.validate.parts_files import read_parts

        if not folder.is_dir():
            what = "is a file" if folder.exists() else "does not exist"
            raise ValueError(
                f"--fit-parts: {str(folder)!r} {what}; expected a folder of parts files (hbm.csv, "
                "gemm.csv, sdpa.csv, steps.csv: what `kvsim calibrate --parts` writes)"
            )
        device = read_parts(folder).meta["device_name"]
        name = gpu or cli.device_slug(device)
        if name not in preset_table("gpus"):
            raise ValueError(
                f"--gpu: {name!r} is not a GPU preset (the files say {device!r}); expected one of "
                f"{sorted(preset_table('gpus'))}"
            )
        if gpu is not None and cli.device_slug(device) != gpu:
            console.print(
                f"warning: the files were measured on {device!r}; fitting them as the {gpu!r} "
                "preset (its datasheet peaks)",
                highlight=False,
                markup=False,
            )
        target = out or Path("results/calibration") / f"{name}-steps.toml"
        check_out_file(target, "--out", "the fitted table (TOML)", suffixes=(".toml",))
        check_out_file(target.with_suffix(".png"), "--out", "its figure beside it")
        repeat = folder.with_name(folder.name + "-repeat")
        kernel = shipped_table_path(name)
        table = fit(folder, name, repeat=repeat if repeat.is_dir() else None, kernel_table=kernel)
        report(table, lambda text: console.print(text, highlight=False, markup=False))
        console.print(f"wrote {write_fit(table, target)}", highlight=False)
        from kvsim.view.calibration_plots import steps_figure

        figure = target.with_suffix(".png")
        p = table["provenance"]
        title = f"Synthetic steps on {p['device_name']}: the cost model ({p['chosen']} form)"
        steps_figure(table["points"], title=title).savefig(figure, dpi=110)
        console.print(f"wrote {figure}", highlight=False)

    guard(go)


def register(app: typer.Typer) -> None:
    """Add ``calibrate`` (with ``--from-runs`` and ``--fit-parts``) to the ``kvsim`` app."""
    cli.register(app, from_runs=from_runs, fit_parts=fit_parts)
