"""One sweep point, simulated in a worker. A Dask worker imports only this module (through the
pickled ``run_point``), so it starts without pandas, tqdm or the sweep's driver code (about half
the start-up of importing ``kvsim.study.sweep``); local workers are forked with everything imported,
or spawned to run ``kvsim.study.sweep.run_and_save``, which also writes the point.
"""

from __future__ import annotations

import logging
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvsim.base.build import source_build
from kvsim.config import SimConfig
from kvsim.config.allocators import has_memory_map
from kvsim.fleet import is_fleet, simulate
from kvsim.results import Results

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class PointOutcome:
    """What a worker returns for one point.

    Attributes:
        key: the point's config key.
        results: the run's tables (``None`` on failure).
        snapshot: the KV pool at ``snapshot_at_s`` (``poolmap``, taken during the run), or
            ``None``.
        error: ``"ExcType: message"`` on failure.
        traceback: the worker's formatted traceback on failure.
        elapsed_s: wall-clock seconds the worker spent.
        warnings: what kvsim warned during the point (the driver prints each text once).
        notes: ``(logger name, text)`` of its INFO notes (the driver logs each once, at INFO
            on that logger: shown where the CLI shows that logger's notes).
        saved: the worker wrote the point itself (``kvsim.study.sweep.run_and_save``); ``results``
            and ``snapshot`` then stay behind.
        build: the fingerprint of the kvsim that ran it (``kvsim.base.build.source_build``).
    """

    key: str
    results: Results | None = None
    snapshot: pd.DataFrame | None = None
    error: str | None = None
    traceback: str | None = None
    elapsed_s: float = 0.0
    warnings: tuple[str, ...] = ()
    notes: tuple[tuple[str, str], ...] = ()
    saved: bool = False
    build: str = ""


class _Collected(logging.Handler):
    """Keeps the texts of kvsim's warnings, and its INFO notes (a workload filter's counts,
    where the CLI shows them), during one point instead of printing them."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.texts: list[str] = []
        self.notes: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            self.texts.append(record.getMessage())
        else:
            self.notes.append((record.name, record.getMessage()))


def run_point(config: SimConfig, snapshot_at_s: float | None = None) -> PointOutcome:
    """Simulate one point (runs in a worker); never raises for a failing simulation."""
    root, workload = logging.getLogger("kvsim"), logging.getLogger("kvsim.workload")
    collected, propagate, level = _Collected(), root.propagate, workload.level
    root.addHandler(collected)
    root.propagate = False  # every point of a sweep warns alike: the driver says it once
    workload.setLevel(logging.INFO)  # its notes too, in a worker that never ran kvsim's main
    try:
        outcome = _run_point(config, snapshot_at_s)
    finally:
        root.removeHandler(collected)
        root.propagate = propagate
        workload.setLevel(level)
    outcome.warnings = tuple(collected.texts)
    outcome.notes = tuple(collected.notes)
    outcome.build = source_build()
    return outcome


def _run_point(config: SimConfig, snapshot_at_s: float | None) -> PointOutcome:
    start = time.perf_counter()
    try:
        # a radix tree has no slot map: its points run without a snapshot
        no_map = snapshot_at_s is None or not has_memory_map(config.cache.allocator)
        no_map = no_map or is_fleet(config)
        at: tuple[float, ...] = () if no_map or snapshot_at_s is None else (snapshot_at_s,)
        results = simulate(config, map_at_s=at)
        snap = None
        if results.mapframes is not None:  # the one frame, taken in this very run
            snap = results.mapframes.drop(columns="frame")
            snap.attrs.update(
                capacity_slots=config.capacity_tokens,
                time_s=snapshot_at_s,
                allocator=config.cache.allocator,
            )
            results.mapframes = results.frames = None
    except Exception as err:
        return PointOutcome(
            config.key(),
            error=f"{type(err).__name__}: {err}",
            traceback=traceback.format_exc(),
            elapsed_s=time.perf_counter() - start,
        )
    return PointOutcome(config.key(), results, snap, elapsed_s=time.perf_counter() - start)
