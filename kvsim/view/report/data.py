"""Run folders -> the report's data: loaded, checked, and downsampled to what a browser animates.

``load_run`` reads a folder written by ``kvsim run --out`` (``Results.load``). ``map_payload``
turns its memory-map frames into cell arrays (``mapcells``), zlib-compressed and base64-encoded,
keeping at most ``MAX_FRAMES`` frames and ``MAX_CELLS`` cells. ``memory_bins`` averages the
memory series into at most ``MAX_POINTS`` time bins; ``ecdf_points`` keeps at most
``MAX_POINTS`` points of an empirical CDF.
"""

from __future__ import annotations

import base64
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from kvsim.config.allocators import has_memory_map
from kvsim.results import Results
from kvsim.results.columns import CATEGORIES
from kvsim.results.folders import check_folder
from kvsim.results.offload import DISK_COLUMNS, TIER_COLUMNS
from kvsim.view.report.mapcells import CellGrid, PoolShape, frame_cells

MAX_CELLS = 4096  # cells of the map canvas
MAX_FRAMES = 600  # map frames kept per run
MAX_FRAME_CELLS = 1_500_000  # frames x cells kept per run (bounds the page's size)
MAX_POINTS = 2000  # points of a time series or an ECDF
MAX_WAITING_IDS = 48  # queued req_ids listed per frame


@dataclass(frozen=True)
class Run:
    """One run folder, loaded.

    Attributes:
        name: the folder's name (labels the run on the page).
        path: the folder.
        results: its tables (``kvsim.results.Results``); a fleet's memory rows those of its
            first replica (``load_run``).
        num_replicas: the run's replicas (1: one engine).
    """

    name: str
    path: Path
    results: Results
    num_replicas: int = 1

    @property
    def config(self) -> dict[str, Any]:
        """``config.json`` as plain JSON values."""
        return self.results.config.model_dump(mode="json")

    @property
    def capacity_slots(self) -> int:
        """KV pool size in token slots (``summary["capacity_tokens"]``)."""
        return int(self.results.summary["capacity_tokens"])


def load_run(folder: str | Path) -> Run:
    """Read a run folder written by ``kvsim run --out``.

    Raises:
        ValueError: ``folder`` is not a run folder (``kvsim.results.folders.check_folder``).
    """
    path = Path(folder)
    check_folder(path, "run", f"RUN_DIR {str(path)!r}")
    results = Results.load(path)
    _check_pool_numbers(path / "summary.json", results.summary)
    memory = results.memory
    num_replicas = 1
    if "replica" in memory.columns and memory["replica"].nunique() > 1:
        # one engine's pool over time: the replicas' rows interleave in time, each its own pool
        num_replicas = int(memory["replica"].nunique())
        first = memory["replica"].min()
        results.memory = memory[memory["replica"] == first].reset_index(drop=True)
    return Run(path.resolve().name, path, results, num_replicas)


def _whole(value: object) -> bool:
    """A finite, non-negative whole number (``True`` and ``False`` are not)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value == int(value) and value >= 0


# the summary's numbers the page draws the pool from: whole token slots
_POOL_NUMBERS = ("capacity_tokens", "usable_capacity_tokens", "max_model_len")


def _check_pool_numbers(path: Path, summary: dict[str, Any]) -> None:
    """The pool's sizes in ``summary.json`` are whole numbers (a NaN or a text there was
    "cannot convert float NaN to integer", naming neither the file nor the field).

    Raises:
        ValueError: naming the file, the field and the value.
    """
    for key in _POOL_NUMBERS:
        if key not in summary and key != "capacity_tokens":
            continue
        value = summary.get(key)
        missing = value is None or (isinstance(value, float) and math.isnan(value))
        if missing and summary.get("num_replicas"):
            raise ValueError(
                f"{path}: a fleet whose replicas hold different KV pools ({key} is null: no one "
                "value); the report draws one pool: report a fleet of one pool, or a replica's "
                "config run alone"
            )
        if key not in summary:  # (an edited summary.json: a field taken out)
            raise ValueError(
                f"{path}: no {key} (the pool's size in token slots every run writes); "
                "rewrite the run with `kvsim run --out`"
            )
        if not _whole(value):
            raise ValueError(
                f"{path}: {key} must be a whole number of token slots, got {value!r}; "
                "rewrite the run with `kvsim run --out`"
            )


def load_runs(folders: Sequence[str | Path]) -> list[Run]:
    """``load_run`` of each folder; runs whose folder names clash are named ``parent/name``."""
    runs = [load_run(f) for f in folders]
    names = [r.name for r in runs]
    return [
        replace(r, name=f"{r.path.resolve().parent.name}/{r.name}")
        if names.count(r.name) > 1
        else r
        for r in runs
    ]


def end_time_s(run: Run) -> float:
    """When the run's last engine event ends, simulated seconds (0 for an empty run)."""
    memory = run.results.memory
    if not len(memory):
        return 0.0
    return float(memory["time_s"].iloc[-1] + memory["duration_s"].iloc[-1])


def map_missing_reason(run: Run) -> str | None:
    """Why ``run`` has no memory map, or ``None`` when it has one."""
    allocator = run.results.config.cache.allocator
    if run.num_replicas > 1:
        return (
            f"A fleet of {run.num_replicas} replicas captures no memory-map frames (kvsim run "
            "--map-frames draws one engine's pool): run a replica's config alone for its map."
        )
    if not has_memory_map(allocator):
        return (
            f"The {allocator} allocator has no physical memory map: its slots are shared "
            "through a tree, not owned by one request each."
        )
    if run.results.mapframes is None or run.results.frames is None or not len(run.results.frames):
        return (
            "This run captured no memory-map frames (no mapframes.parquet): run it with "
            "`kvsim run --out DIR --map-frames N` (N > 0; 200 by default)."
        )
    return None


def pick(num: int, keep: int) -> npt.NDArray[np.int64]:
    """At most ``keep`` indices of ``range(num)``, evenly spaced, first and last included."""
    if num <= keep:
        return np.arange(num, dtype=np.int64)
    return np.unique(np.rint(np.linspace(0, num - 1, keep)).astype(np.int64))


def blob(array: npt.NDArray[Any]) -> str:
    """``array``'s little-endian bytes, zlib-compressed, base64 (the page inflates it with
    ``DecompressionStream("deflate")``)."""
    raw = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("<")).tobytes()
    return base64.b64encode(zlib.compress(raw, 6)).decode("ascii")


def map_payload(
    run: Run, max_cells: int = MAX_CELLS, max_frames: int = MAX_FRAMES
) -> dict[str, Any]:
    """The run's map frames on a cell grid, for the page (see ``mapcells``).

    Returns:
        ``capacity_slots``, ``slots_per_cell``, ``num_cells``, ``num_frames_captured``, per kept
        frame (lists): ``frame``, ``time_s``, ``running``, ``waiting``, ``head_need_slots``,
        ``waiting_ids`` (the first ``MAX_WAITING_IDS`` of the queue), ``live_slots``,
        ``held_slots``, ``hole_slots``, ``free_slots``; and the blobs ``owner`` (int32),
        ``live``, ``held``, ``hole`` (uint8), frames x cells, row-major.
    """
    mapframes, frames = run.results.mapframes, run.results.frames
    assert mapframes is not None, "map_payload of a run without mapframes"
    assert frames is not None, "map_payload of a run without frames"
    pool = PoolShape.of_run(run.config, run.results.summary)
    grid = CellGrid.for_pool(pool, max_cells)
    keep = pick(len(frames), min(max_frames, max(1, MAX_FRAME_CELLS // grid.num_cells)))
    kept = frames.iloc[keep].reset_index(drop=True)
    cols = ("req_id", "start_slot", "num_slots", "num_tokens")
    by_frame = mapframes.sort_values(["frame", "start_slot"]).groupby("frame")
    groups = {int(f): g for f, g in by_frame}
    empty = {c: np.zeros(0, np.int64) for c in cols}
    cells = []
    for f, need in zip(kept["frame"], kept["head_need_slots"], strict=True):
        g = groups.get(int(f))
        rows = empty if g is None else {c: g[c].to_numpy(np.int64) for c in cols}
        cells.append(frame_cells(pool, grid, rows, int(need)))
    payload: dict[str, Any] = {
        "capacity_slots": pool.capacity_slots,
        "slots_per_cell": grid.slots_per_cell,
        "num_cells": grid.num_cells,
        "block_size_slots": pool.block_size_slots,
        "num_frames_captured": len(frames),
        "frame": kept["frame"].astype(int).tolist(),
        "time_s": kept["time_s"].astype(float).tolist(),
        "running": kept["num_requests_running"].astype(int).tolist(),
        "waiting": kept["num_requests_waiting"].astype(int).tolist(),
        "head_need_slots": kept["head_need_slots"].astype(int).tolist(),
        "waiting_ids": [[int(r) for r in ids[:MAX_WAITING_IDS]] for ids in kept["waiting_req_ids"]],
    }
    for key in ("live", "held", "hole", "free"):
        payload[f"{key}_slots"] = [c.totals[key] for c in cells]
    for key in ("owner", "live", "held", "hole"):
        payload[key] = blob(np.stack([getattr(c, key) for c in cells]))
    return payload


def memory_bins(memory: pd.DataFrame, max_points: int = MAX_POINTS) -> pd.DataFrame:
    """The memory series (``recorder.MEMORY_COLUMNS``) in at most ``max_points`` rows.

    Rows are engine events ``[time_s, time_s + duration_s)``; longer series are cut into
    ``max_points`` equal time bins, each the duration-weighted mean of the events starting in
    it (slot counts stay slots). Returns ``time_s``, ``duration_s``, ``allocated`` and the
    ``CATEGORIES`` columns, and the CPU tier's ``TIER_COLUMNS`` and a disk tier's
    ``DISK_COLUMNS`` (blocks) of a run that offloads.
    """
    tiers = (*TIER_COLUMNS, *DISK_COLUMNS)
    cols = ["allocated", *CATEGORIES, *(c for c in tiers if c in memory.columns)]
    if len(memory) <= max_points:
        return memory[["time_s", "duration_s", *cols]].reset_index(drop=True)
    t = memory["time_s"].to_numpy()
    w = memory["duration_s"].to_numpy()
    end = float(t[-1] + w[-1])
    edges = np.linspace(float(t[0]), end, max_points + 1)
    b = np.clip(np.searchsorted(edges, t, side="right") - 1, 0, max_points - 1)
    weight = np.bincount(b, weights=w, minlength=max_points)
    count = np.bincount(b, minlength=max_points)
    # a bin whose events all last 0 s averages them unweighted
    wt = np.where(weight[b] > 0, w, 1.0)
    norm = np.bincount(b, weights=wt, minlength=max_points)
    denom = np.where(norm > 0, norm, 1.0)
    out = {"time_s": edges[:-1], "duration_s": np.diff(edges)}
    for c in cols:
        out[c] = np.bincount(b, weights=wt * memory[c].to_numpy(), minlength=max_points) / denom
    frame = pd.DataFrame(out)
    return frame[count > 0].reset_index(drop=True)


def ecdf_points(
    values: pd.Series | npt.NDArray[Any], max_points: int = MAX_POINTS
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Empirical CDF of the finite ``values``: ``(x, p)``, x sorted, ``p = rank / n`` (at most
    ``max_points`` points, the smallest and largest value kept)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    x = x[np.isfinite(x)]
    p = np.arange(1, len(x) + 1) / max(len(x), 1)
    idx = pick(len(x), max_points)
    return x[idx], p[idx]
