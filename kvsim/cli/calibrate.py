"""``kvsim calibrate``: the command lives in ``kvsim.calibrate.cli`` so that the GPU runbook
(``python -m kvsim.calibrate``) needs nothing but numpy, typer and CuPy; ``--from-runs`` (the fit
on measured vLLM runs, ``kvsim.validate.calibration``) is handed to it from here."""

from __future__ import annotations

from pathlib import Path

import typer

from kvsim.calibrate import cli
from kvsim.cli.common import console, guard

REPLAY_CACHE = Path("results/calibrate/replays.jsonl")
DEFAULT_OUT = Path("kvsim/data/cost_fit.toml")


def from_runs(out: Path | None, max_evaluations: int) -> None:
    """Fit on the train runs, choose on validate, write the fitted table (``out`` or the one
    kvsim ships); replays are cached in ``results/calibrate/replays.jsonl``."""

    def go() -> None:
        from kvsim.validate.calibration import calibrate_from_runs

        target = out or DEFAULT_OUT
        if target.suffix.lower() != ".toml":
            raise ValueError(f"--out: --from-runs writes a .toml table, got {str(target)!r}")
        calibrate_from_runs(
            target,
            cache_path=REPLAY_CACHE,
            max_evaluations=max_evaluations,
            progress=lambda text: console.print(text, highlight=False),
        )

    guard(go)


def register(app: typer.Typer) -> None:
    """Add ``calibrate`` (with ``--from-runs``) to the ``kvsim`` app."""
    cli.register(app, from_runs=from_runs)
