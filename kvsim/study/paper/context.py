"""A reproduction's context (where and how it runs its sweeps) and what it produces."""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from kvsim.base.extras import require
from kvsim.study.experiment import Experiment, load_experiment
from kvsim.study.load import SweepResults, load_sweep


@dataclass
class Context:
    """Where and how a reproduction runs its sweeps and plans.

    Attributes:
        out_root: results root; sweeps go to ``OUT/NAME`` (``OUT/quick/NAME`` when quick).
        jobs: worker processes.
        quick: the experiments' ``[quick]`` tables (small runs for tests).
        scheduler: Dask scheduler address, ``"local"``, or ``None`` for a process pool.
        progress: show progress bars (on a terminal).
        say: where progress messages go.
        said: warning texts the reproduction has given in its own words: its sweeps' points
            do not repeat them.
    """

    out_root: Path
    jobs: int = 1
    quick: bool = False
    scheduler: str | None = None
    progress: bool = False
    say: Callable[[str], None] = lambda _msg: None
    said: set[str] = field(default_factory=set)

    def experiment(self, name: str) -> Experiment:
        """``experiments/NAME.toml``."""
        from kvsim.study.sweep import experiments_dir

        return load_experiment(experiments_dir() / f"{name}.toml")

    def sweep(self, experiment: Experiment, **base: Any) -> SweepResults:
        """Run (or resume) ``experiment`` with dotted ``base`` overrides; its results.

        Raises:
            ValueError: a point failed (the message lists them).
        """
        from kvsim.config import apply_overrides
        from kvsim.study.sweep import run_sweep

        if base:
            data = copy.deepcopy(experiment.base)  # the experiment's nested tables stay as loaded
            apply_overrides(data, {k.replace("__", "."): v for k, v in base.items()})
            experiment = dataclasses.replace(experiment, base=data)
        self.say(f"sweep {experiment.name}: {len(experiment.points(quick=self.quick))} points")
        report = run_sweep(
            experiment,
            self.out_root,
            jobs=self.jobs,
            scheduler=self.scheduler,
            quick=self.quick,
            progress=self.progress,
            said=self.said,
        )
        if report.num_skipped:
            self.say(
                f"sweep {experiment.name}: {report.num_skipped} point(s) reused from "
                f"{report.folder} (finished before; delete the folder to rerun them)"
            )
        if report.failures:
            lines = "; ".join(f"point {f.index} [{f.point}]: {f.error}" for f in report.failures)
            raise ValueError(f"{experiment.name}: {len(report.failures)} point(s) failed: {lines}")
        return load_sweep(report.folder)

    def fit(
        self,
        experiment: Experiment,
        field: str,
        metric: str,
        target: float,
        bracket: tuple[float, float],
        xtol: float,
    ) -> float:
        """The value of ``field`` at which ``experiment`` (one point, possibly over seeds) gives
        ``metric`` = ``target`` on average: a root of ``mean(metric) - target`` found by Brent's
        method (``scipy.optimize.brentq``), each evaluation a stored sweep (rounded to
        ``xtol / 1000`` so that reruns resume it). The metric must rise with the field.

        Raises:
            ValueError: the bracket does not contain ``target`` (the message gives the range).
        """
        require("fit", f"fitting {field} ({experiment.name})")
        from scipy.optimize import brentq

        digits = max(0, -math.floor(math.log10(xtol)) + 3)

        def excess(value: float) -> float:
            sweep = self.sweep(experiment, **{field: round(value, digits)})
            return float(sweep.summary[metric].mean()) - target

        lo, hi = bracket
        low, high = excess(lo), excess(hi)
        if low > 0 or high < 0:
            raise ValueError(
                f"{experiment.name}: {field} in [{lo}, {hi}] gives {metric} "
                f"{low + target:.4g}..{high + target:.4g}, not the paper's {target}"
            )
        return round(float(brentq(excess, lo, hi, xtol=xtol)), digits)


@dataclass
class Reproduction:
    """What a reproduction produced.

    Attributes:
        name: the reproduction (``fig2`` ...).
        table: kvsim's numbers next to the paper's, one row per system (or point).
        paths: files written (CSV, PNG).
        notes: what data and which fitted parameters were used.
        in_band: every number with a band lands in it (``None`` when nothing has a band).
        view: the few columns to print (``None``: all of ``table``).
        beside_paper: the table sets published numbers beside kvsim's (``False``: a study of
            kvsim's own, such as ``prefix-caching``).
    """

    name: str
    table: pd.DataFrame
    paths: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    in_band: bool | None = None
    view: pd.DataFrame | None = None
    beside_paper: bool = True


def write_outputs(
    rep: Reproduction, folder: Path, figure: Any, *, float_format: str = "%.4g"
) -> Reproduction:
    """Write ``folder/NAME.csv`` and ``folder/NAME.png`` (``figure``: a matplotlib Figure)."""
    folder.mkdir(parents=True, exist_ok=True)
    csv_path = folder / f"{rep.name}.csv"
    rep.table.to_csv(csv_path, index=False, float_format=float_format)
    png_path = folder / f"{rep.name}.png"
    figure.savefig(png_path)
    rep.paths += [csv_path, png_path]
    return rep
