"""Run an experiment's points on a local process pool or a Dask cluster, resumably.

Each point's results go to ``OUT/NAME/points/KEY/`` (``KEY = SimConfig.key()``), written into a
temporary folder and renamed into place, so a killed sweep leaves only finished points behind and a
rerun skips them. A point records the kvsim that ran it (``kvsim.base.build``); one that another
kvsim finished (its source has changed since) is run again, with a warning, never reused. Local
workers write their own points (``run_and_save``); Dask workers only simulate and return their
``Results`` and the driver writes, so a remote cluster needs no shared filesystem. Every point's
config is validated before any runs: one invalid point (a value out of range, a misspelt field)
fails the sweep up front, with nothing run. A point that fails while running is logged with its
swept values and listed in ``failures.json``; the others go on. ``summary.parquet`` has one row
per finished point, in expansion order: the swept fields, then the summary metrics.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from kvsim.base.build import source_build
from kvsim.base.say_once import warn_once
from kvsim.base.tablefile import csv_twin, stored_table, write_table
from kvsim.base.textfile import cached_sha256_file, json_text, sha256_file
from kvsim.base.workers import DASK_CONNECT_TIMEOUT_S, check_scheduler, dask_map, pool_map
from kvsim.config import SimConfig
from kvsim.config.allocators import has_memory_map
from kvsim.results import read_summary
from kvsim.study.experiment import LABEL, Experiment, Point, check_name, load_experiment
from kvsim.study.load import SweepResults, load_sweep
from kvsim.study.point import PointOutcome, run_point

logger = logging.getLogger(__name__)

POINTS = "points"
SUMMARY = "summary.parquet"
FAILURES = "failures.json"
SNAPSHOT = "snapshot.parquet"
EXPERIMENT = "experiment.json"
_TMP_PREFIX = ".tmp-"


@dataclass
class Failure:
    """A point that failed while running: its swept values, key and error."""

    index: int
    point: str
    key: str
    error: str
    traceback: str | None = None


@dataclass
class SweepReport:
    """The outcome of ``run_sweep``.

    Attributes:
        folder: ``OUT/NAME``.
        table: the summary table (also in ``folder/summary.parquet``).
        num_run: points simulated by this call.
        num_skipped: points already finished before this call (resumed).
        failures: points that failed (also in ``folder/failures.json``).
    """

    folder: Path
    table: pd.DataFrame
    num_run: int = 0
    num_skipped: int = 0
    failures: list[Failure] = field(default_factory=list)


def point_dir(folder: Path, key: str) -> Path:
    """Where one point's results live."""
    return folder / POINTS / key


BUILD = "kvsim_build"  # point.json's field: the fingerprint of the kvsim that ran the point


DAMAGED = "\0damaged"  # ``finished_by`` of a point whose summary.json cannot be read back
INCOMPLETE = "\0incomplete"  # ``finished_by`` of a point that lacks a file it wrote
FILES = "files"  # point.json's field: the files the point wrote besides point.json
SHA256 = "sha256"  # point.json's field: each of those files' SHA-256 as written
# what every finished point holds (its tables also as CSV twins, without pyarrow)
POINT_FILES = ("summary.json", "config.json", "requests.parquet", "memory.parquet")


# what a sweep's or a plan's results folder holds (a cheapest-fleet plan: its answer, no points)
RESULTS_MARKERS = (POINTS, "experiment.json", "answer.json", "summary.parquet", "summary.csv")


def check_results_folder(folder: Path, out_root: Path) -> None:
    """Fail before anything is run or written when a sweep's or a plan's results folder
    ``folder`` (under ``--out`` ``out_root``) cannot hold them: a file where it or a folder
    above it, or its ``points`` folder, belongs; or it holds another kvsim run's files or files
    of the user's (not a sweep's or plan's: no ``points`` folder), which the results would mix
    with (``RESULTS_MARKERS``: what makes it a sweep's or a plan's).

    A results root that is itself a run's folder, or a sweep's or a plan's, is legal (the
    results go in a folder of their own inside it) but likely a slip: it is warned.

    Raises:
        ValueError: naming ``--out``, the path and what is in the way.
    """
    _warn_nested_root(out_root)
    above = [out_root / part for part in reversed(folder.relative_to(out_root).parents)]
    for where in (*above, folder, folder / POINTS):
        if where.exists() and not where.is_dir():
            raise ValueError(
                f"--out: {str(where)!r} is a file, where the results need a folder; move it "
                "or choose another --out"
            )
    if not folder.is_dir() or any((folder / name).exists() for name in RESULTS_MARKERS):
        return
    held = sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
    if held:
        from kvsim.results.tables import is_run_folder

        first = ", ".join(held[:3]) + (f" and {len(held) - 3:,} more" if len(held) > 3 else "")
        what = "a kvsim run's results" if is_run_folder(folder) else "files of its own"
        raise ValueError(
            f"--out: {str(folder)!r} holds {what} ({first}) and no sweep or plan (no points "
            "folder, answer.json or experiment.json): the results would mix with them; choose "
            "another --out"
        )


def _warn_nested_root(out_root: Path) -> None:
    """Warn when ``--out`` (``out_root``) is a run's, a sweep's or a plan's own folder."""
    from kvsim.results.tables import is_run_folder

    if not out_root.is_dir():
        return
    if is_run_folder(out_root):
        what = "a kvsim run's results folder"
    elif any((out_root / name).exists() for name in RESULTS_MARKERS):
        what = "a sweep's or a plan's results folder"
    else:
        return
    warn_once(
        logger,
        "--out: %r is %s; these results go in a folder of their own inside it (--out names "
        "the folder that holds results folders, such as results/)",
        str(out_root),
        what,
    )


def finished_by(folder: Path, key: str) -> str | None:
    """The fingerprint of the kvsim that finished the point (``""``: unrecorded or unreadable),
    ``DAMAGED`` when its ``summary.json`` is not a readable summary of this point (a JSON object
    whose ``config_key`` is ``key``: an edited or truncated file) or a file's bytes are not those
    it wrote (``point.json``'s SHA-256 of each), ``INCOMPLETE`` when a file it
    wrote (``POINT_FILES``, and those ``point.json`` lists) is missing, or ``None`` while its
    results are not completely written (the folder appears atomically). A file or link where
    the point's folder belongs, or a ``point.json`` that is not a JSON object, is ``DAMAGED``."""
    where = point_dir(folder, key)
    if where.is_symlink() or (where.exists() and not where.is_dir()):
        return DAMAGED
    if not (where / "summary.json").is_file():
        return None
    try:
        summary = read_summary(where / "summary.json")
    except (OSError, ValueError):
        return DAMAGED
    if summary.get("config_key") != key:
        return DAMAGED
    if _missing(where, POINT_FILES):  # (a plot of the point would fail on it)
        return INCOMPLETE
    try:
        meta = json.loads((where / "point.json").read_text())
    except FileNotFoundError:
        return ""  # (unrecorded: another kvsim's)
    except (OSError, ValueError):
        return DAMAGED
    if not isinstance(meta, dict):
        return DAMAGED
    files = meta.get(FILES, [])  # (a snapshot, a fleet's replicas: written by some points only)
    if isinstance(files, list) and _missing(where, [str(name) for name in files]):
        return INCOMPLETE
    if _changed(where, meta.get(SHA256)):
        return DAMAGED
    build = meta.get(BUILD, "")
    return build if isinstance(build, str) else ""


def _changed(where: Path, hashes: Any) -> bool:
    """Whether a file of ``where`` whose SHA-256 ``hashes`` records (a point of an older kvsim
    records none) now holds other bytes: edited, or cut short."""
    if not isinstance(hashes, dict):
        return False
    for name, digest in hashes.items():
        path = where / str(name)
        if path.name != str(name) or not path.is_file():
            continue  # (a name out of the folder is no file of the point's; a CSV twin: _missing)
        if cached_sha256_file(path) != digest:
            return True
    return False


def _missing(where: Path, names: Iterable[str]) -> bool:
    """Whether a file of ``names`` is not in ``where`` (a table's CSV twin stands for it)."""
    return not all(_present(where / name) for name in names)


def _present(path: Path) -> bool:
    return stored_table(path) is not None if path.suffix == ".parquet" else path.is_file()


def is_done(folder: Path, key: str) -> bool:
    """Whether this kvsim finished the point: its results can be reused."""
    return finished_by(folder, key) == source_build()


def is_stale(build: str | None) -> bool:
    """Whether a point ``finished_by`` ``build`` was finished by another kvsim, or its summary
    is damaged, or it lacks a file: it runs again."""
    return build is not None and build != source_build()


def warn_stale(folder: Path, builds: Iterable[str | None], name: str) -> None:
    """Say how many of the points ``finished_by`` ``builds`` in ``folder`` run again: those
    another kvsim finished, those whose summary is damaged, and those that lack a file."""
    builds = list(builds)
    damaged = builds.count(DAMAGED)
    incomplete = builds.count(INCOMPLETE)
    other = sum(1 for b in builds if b not in (DAMAGED, INCOMPLETE) and is_stale(b))
    if other:
        logger.warning(
            "%s: %d point(s) in %s were finished by another kvsim (its source or data differ "
            "from this one's): running them again",
            name,
            other,
            folder,
        )
    if damaged:
        logger.warning(
            "%s: %d point(s) in %s have a damaged file (a summary.json or point.json that is not "
            "valid JSON or not its point's, a file whose bytes changed since the point wrote "
            "it, or a file where the point's folder belongs): running them again",
            name,
            damaged,
            folder,
        )
    if incomplete:
        logger.warning(
            "%s: %d point(s) in %s lack a file they wrote (deleted or moved since): running "
            "them again",
            name,
            incomplete,
            folder,
        )


def save_outcome(folder: Path, point: Point, outcome: PointOutcome) -> Path:
    """Write a finished point atomically: into a temporary folder, then one ``rename``."""
    assert outcome.results is not None, f"save_outcome: point {outcome.key} has no results"
    final = point_dir(folder, outcome.key)
    tmp = folder / POINTS / f"{_TMP_PREFIX}{outcome.key}-{uuid.uuid4().hex[:8]}"
    outcome.results.save(tmp, exports=False)  # sweep points keep parquet only
    if outcome.snapshot is not None:
        write_table(outcome.snapshot, tmp / SNAPSHOT)
    meta = {
        "overrides": point.overrides,
        LABEL: point.label,
        "elapsed_s": outcome.elapsed_s,
        BUILD: outcome.build or source_build(),
        FILES: sorted(p.name for p in tmp.iterdir()),  # (what resuming checks is all there)
        SHA256: {p.name: sha256_file(p) for p in sorted(tmp.iterdir())},
    }
    (tmp / "point.json").write_text(json_text(meta, indent=2, sort_keys=True))
    if is_stale(finished_by(folder, outcome.key)):  # another kvsim's: this one replaces it
        if final.is_dir() and not final.is_symlink():
            shutil.rmtree(final, ignore_errors=True)
        else:  # (a file or link where the folder belongs)
            final.unlink(missing_ok=True)
    try:
        tmp.rename(final)
    except OSError:  # another writer finished the same point first
        shutil.rmtree(tmp, ignore_errors=True)
        if not is_done(folder, outcome.key):
            raise OSError(
                f"{final}: the point's results could not be written there (it is not a folder "
                "of this point's results); move it away and run again"
            ) from None
    return final


def _write_atomic(path: Path, write: Any) -> None:
    tmp = path.with_name(f"{_TMP_PREFIX}{path.name}-{uuid.uuid4().hex[:8]}")
    write(tmp)
    os.replace(tmp, path)


def _write_table_atomic(frame: pd.DataFrame, path: Path) -> None:
    """``write_table`` through a temporary file and one rename; the other format's file of the
    same table, left by an earlier run with or without pyarrow, is removed (a reader would take
    it first)."""
    tmp = path.with_name(f"{_TMP_PREFIX}{uuid.uuid4().hex[:8]}-{path.name}")
    written = write_table(frame, tmp)
    final = path if written.suffix == path.suffix else csv_twin(path)
    os.replace(written, final)
    (csv_twin(path) if final == path else path).unlink(missing_ok=True)


def _clean_stale(folder: Path) -> None:
    """Remove temporary folders left by a killed run (they never hold finished points)."""
    for stale in (folder / POINTS).glob(f"{_TMP_PREFIX}*"):
        logger.info("removing partial point %s left by an interrupted run", stale.name)
        shutil.rmtree(stale, ignore_errors=True)


def _config(point: Point) -> SimConfig:
    assert point.config is not None, f"point {point.index} has no valid config"
    return point.config


def _serial(todo: list[Point], snapshot_at_s: float | None) -> Iterator[tuple[Point, PointOutcome]]:
    for point in todo:
        yield point, run_point(_config(point), snapshot_at_s)


def run_and_save(
    config: SimConfig, snapshot_at_s: float | None, folder: Path, point: Point
) -> PointOutcome:
    """``run_point``, then write the finished point where it runs (a local worker shares the
    driver's filesystem): the tables need not travel back, and their writing is spread over the
    workers instead of queueing in the driver."""
    outcome = run_point(config, snapshot_at_s)
    if outcome.error is None:
        save_outcome(folder, point, outcome)
        outcome.results = outcome.snapshot = None
        outcome.saved = True
    return outcome


def _pool(
    todo: list[Point], jobs: int, snapshot_at_s: float | None, folder: Path | None
) -> Iterator[tuple[Point, PointOutcome]]:
    if folder is None:
        calls = [(p, (_config(p), snapshot_at_s)) for p in todo]
        yield from pool_map(run_point, calls, jobs)  # workers die with the driver
        return
    saving = [(p, (_config(p), snapshot_at_s, folder, p)) for p in todo]
    yield from pool_map(run_and_save, saving, jobs)


def _dask(
    todo: list[Point],
    jobs: int,
    scheduler: str,
    snapshot_at_s: float | None,
    connect_timeout_s: float,
) -> Iterator[tuple[Point, PointOutcome]]:
    calls = [(p, (p.config, snapshot_at_s), f"kvsim-point-{p.key}") for p in todo]
    yield from dask_map(run_point, calls, scheduler, jobs, connect_timeout_s)


def outcomes(
    todo: list[Point],
    *,
    jobs: int = 1,
    scheduler: str | None = None,
    snapshot_at_s: float | None = None,
    connect_timeout_s: float = DASK_CONNECT_TIMEOUT_S,
    folder: Path | None = None,
    said: set[str] | None = None,
) -> Iterator[tuple[Point, PointOutcome]]:
    """Run ``todo`` and yield ``(point, outcome)`` as each finishes, logging each distinct
    warning of the points once (workers' warnings come back with their outcomes, however
    the points ran).

    Args:
        todo: valid points (``config`` set), one per key.
        jobs: worker processes (local pool, or a local Dask cluster's workers).
        scheduler: ``None`` for the local pool; ``"local"`` for a local Dask cluster;
            ``"tcp://HOST:PORT"`` for a running Dask scheduler.
        snapshot_at_s: simulated second of the memory-map snapshot (``None``: none).
        connect_timeout_s: seconds to wait for a remote Dask scheduler.
        folder: the sweep's folder: local pool workers write their points into it
            (``run_and_save``); ``None``: every outcome comes back with its tables.
        said: warning texts already logged, added to as more are (a plan's rounds share one,
            so a warning every point gives is said once per plan); ``None``: a fresh set.

    Raises:
        ValueError: (when iterated) an unreachable or malformed Dask scheduler address.
    """
    if scheduler is not None:
        stream = _dask(todo, jobs, scheduler, snapshot_at_s, connect_timeout_s)
    elif jobs <= 1:
        stream = _serial(todo, snapshot_at_s)
    else:
        stream = _pool(todo, jobs, snapshot_at_s, folder)
    return _warn_once_each(stream, set() if said is None else said)


def _warn_once_each(
    stream: Iterator[tuple[Point, PointOutcome]], said: set[str]
) -> Iterator[tuple[Point, PointOutcome]]:
    """Pass outcomes through, logging each warning text of their points not in ``said`` (once),
    and each INFO note on the logger that noted it."""
    for point, outcome in stream:
        for text in outcome.warnings:
            if text not in said:
                said.add(text)
                logger.warning("%s", text)
        for name, text in outcome.notes:
            if text not in said:
                said.add(text)
                logging.getLogger(name).info("%s", text)
        yield point, outcome


def check_points(experiment: Experiment, points: list[Point], *, quick: bool = False) -> None:
    """Fail before anything runs when a point's config is invalid (a misspelt field, a value out
    of range): a sweep runs all of its points or none, so no result of a half-valid grid is
    written. ``Experiment.points`` has already validated every config (no workload is generated).

    Raises:
        ValueError: naming the first invalid point, its swept values, the field at fault and
            the line of the experiment's file that sets it, and how many points are invalid.
    """
    invalid = [p for p in points if p.config is None]
    if not invalid:
        return
    first, name = invalid[0], experiment.name
    where = f"point {first.index} ({first.describe()})"
    field = (first.error or "").split(": ", 1)[0]
    line = None
    if field and " " not in field:
        line = experiment.field_line(field, swept=field in first.overrides, quick=quick)
    if line is not None:
        name = f"{experiment.path} line {line}"
    if len(invalid) == len(points):
        raise ValueError(f"{name}: no point has a valid config; {where}: {first.error}")
    if len(invalid) == 1:
        raise ValueError(
            f"{name}: {where} has an invalid config, so no point was run: {first.error}"
        )
    shown = ", ".join(str(p.index) for p in invalid[:10]) + (", ..." if len(invalid) > 10 else "")
    raise ValueError(
        f"{name}: {len(invalid)} of {len(points)} points have an invalid config (points {shown}), "
        f"so no point was run; {where}: {first.error}"
    )


def check_traces(name: str, points: list[Point]) -> None:
    """Fail before anything runs when every point reads a trace file that is missing and its
    workload has no fallback (``workload.fallback_synthetic``): each point would fail on it with
    the same message, and nothing would be left to gather. (When only some points miss their
    trace, the others run and the failures are listed, as for any failing point.)

    Raises:
        DataNotFoundError: naming the experiment, the missing traces, where kvsim looked for the
            first and how to get it (``resolve_trace``'s message).
    """
    from kvsim.workload import DataNotFoundError, resolve_trace

    errors: dict[str, DataNotFoundError] = {}  # missing trace -> its error
    for p in points:
        workload = p.config.workload if p.config is not None else None
        if workload is None or not workload.trace or workload.fallback_synthetic:
            return  # a point that can run without a trace file
        if workload.trace not in errors:
            try:
                resolve_trace(workload.trace)
            except DataNotFoundError as err:
                errors[workload.trace] = err
                continue
            return  # (found: this point, and every point reading it, can run)
    if errors:
        traces = ", ".join(map(repr, errors))
        which = "trace" if len(errors) == 1 else "traces"
        raise DataNotFoundError(
            f"{name}: every point reads {which} {traces}, so no point was run: "
            f"{next(iter(errors.values()))}"
        ) from None


def _column(values: list[Any]) -> list[Any]:
    """Swept values of one column; mixed types become strings so parquet can store them."""
    kinds = {type(v) for v in values if v is not None}
    if kinds <= {int, float} or len(kinds) <= 1:
        return values
    return [None if v is None else str(v) for v in values]


def summary_table(
    experiment: Experiment, points: list[Point], folder: Path, *, quick: bool = False
) -> pd.DataFrame:
    """One row per finished point, in expansion order: swept fields (``quick``: with the
    ``[quick] grid`` axes), then summary metrics (a metric a point lacks is NaN)."""
    swept = experiment.swept_fields(quick=quick)
    done = [p for p in points if p.key is not None and is_done(folder, p.key)]
    metrics = [read_summary(point_dir(folder, str(p.key)) / "summary.json") for p in done]
    if not done:
        return pd.DataFrame(columns=swept)
    columns: dict[str, list[Any]] = {
        name: _column([p.label if name == LABEL else p.overrides.get(name) for p in done])
        for name in swept
    }
    for name in dict.fromkeys(name for row in metrics for name in row):  # first-seen order
        if name not in columns:  # a swept field's value is the one shown, not the summary's
            columns[name] = [row.get(name, math.nan) for row in metrics]
    return pd.DataFrame(columns, index=range(len(done)))  # one frame: no concat (~3 ms)


def _warn_repeated_points(name: str, points: list[Point], first: dict[str, Point]) -> None:
    """Warn when points share a config (``[grid] seed = [1, 1]``, a label-only axis): each
    config runs once and its row repeats in the summary. ``first``: the first point per key."""
    repeats = [(p, first[str(p.key)]) for p in points]
    repeats = [(p, f) for p, f in repeats if p is not f]
    if repeats:
        p, f = repeats[0]
        differ = [k for k in p.overrides if p.overrides[k] != f.overrides.get(k)]
        verb = "changes" if len(differ) == 1 else "change"
        why = f"{', '.join(differ)} {verb} nothing there" if differ else "the same values"
        logger.warning(
            "%s: %d of %d points repeat an earlier point's config (e.g. point %d = point %d: "
            "%s); each config runs once and its row repeats in summary.parquet",
            name,
            len(repeats),
            len(points),
            p.index,
            f.index,
            why,
        )


def run_sweep(
    experiment: Experiment,
    out_root: str | Path = "results",
    *,
    jobs: int = 1,
    scheduler: str | None = None,
    quick: bool = False,
    progress: bool = True,
    connect_timeout_s: float = DASK_CONNECT_TIMEOUT_S,
    said: set[str] | None = None,
) -> SweepReport:
    """Run every unfinished point of ``experiment`` and gather ``summary.parquet``.

    Args:
        experiment: the parsed experiment.
        out_root: results root; the sweep writes ``out_root/NAME/`` (``out_root/quick/NAME/``
            with ``quick``, so small runs never mix with full ones).
        jobs: worker processes (1 runs in this process unless ``scheduler`` is set).
        scheduler: ``None`` (local pool), ``"local"`` (local Dask cluster) or a Dask address.
        quick: apply the experiment's ``[quick]`` overrides (small runs for tests).
        progress: show a tqdm bar (points done, rate, time left).
        connect_timeout_s: seconds to wait for a remote Dask ``scheduler`` to answer.
        said: warning texts the caller has already given in its own words: the points' copies
            are not logged (``outcomes``).

    Returns:
        A ``SweepReport``; failures of single points do not raise.

    Raises:
        ValueError: a point has an invalid config (e.g. a misspelt field or a value out of
            range in ``[grid]``; ``check_points``: nothing is run or written), the
            experiment's name is not a folder name, or the Dask scheduler is unreachable.
        DataNotFoundError: a trace the points read is missing (``check_traces``: nothing is
            run or written).
        OSError: the results folder cannot be written (a file in the way, a full disk).
        KeyboardInterrupt: after writing ``summary.parquet`` of the points finished so far.
    """
    check_name(experiment.name, "experiment name")  # the results stay under out_root
    points = experiment.points(quick=quick)  # validates every config; generates no workload
    check_points(experiment, points, quick=quick)
    if scheduler in (None, "local"):  # (a remote cluster's workers may hold the traces)
        check_traces(experiment.name, points)  # one message, not one per point
    if scheduler is not None:  # before anything is written (a bad address left files behind)
        check_scheduler(scheduler, connect_timeout_s)
    folder = Path(out_root) / ("quick" if quick else "") / experiment.name
    check_results_folder(folder, Path(out_root))
    (folder / POINTS).mkdir(parents=True, exist_ok=True)
    _clean_stale(folder)
    meta = {
        "name": experiment.name,
        "description": experiment.description,
        "quick": quick,
        "swept_fields": experiment.swept_fields(quick=quick),
        "num_points": len(points),  # (a summary with fewer rows: a sweep cut short)
        "snapshot_at_s": experiment.snapshot_time(quick=quick),
        "analysis": experiment.analysis,
    }
    _write_atomic(folder / EXPERIMENT, lambda p: p.write_text(json_text(meta, indent=2)))
    failures: list[Failure] = []
    unique = {_config(p).key(): p for p in reversed(points)}  # first point per key
    _warn_repeated_points(experiment.name, points, unique)
    radix = [p for p in unique.values() if not has_memory_map(_config(p).cache.allocator)]
    if radix and experiment.snapshot_time(quick=quick) is not None:
        logger.warning(
            "snapshot_at_s: %d radix point(s) run without a memory-map snapshot (a radix tree "
            "has no slot map)",
            len(radix),
        )
    builds = {k: finished_by(folder, str(k)) for k in unique}
    warn_stale(folder, builds.values(), f"sweep {experiment.name}")
    current = source_build()
    todo = sorted((p for k, p in unique.items() if builds[k] != current), key=lambda p: p.index)
    report = SweepReport(folder, pd.DataFrame(), num_skipped=len(unique) - len(todo))
    logger.info(
        "sweep %s: %d points, %d finished before, %d to run",
        experiment.name,
        len(points),
        report.num_skipped,
        len(todo),
    )
    bar = PointBar(
        total=len(unique),
        initial=report.num_skipped,
        desc=experiment.name,
        unit="pt",
        disable=None if progress else True,  # None: off on a non-terminal (no \r in logs)
    )
    try:
        finished = outcomes(
            todo,
            jobs=jobs,
            scheduler=scheduler,
            snapshot_at_s=experiment.snapshot_time(quick=quick),
            connect_timeout_s=connect_timeout_s,
            folder=folder,
            said=set(said or ()),
        )
        _run_points(finished, folder, report, failures, bar)
    except KeyboardInterrupt:
        logger.warning(
            "interrupted: %d points saved in %s; run the sweep again to resume",
            report.num_run + report.num_skipped,
            folder,
        )
        raise
    finally:
        report.table = summary_table(experiment, points, folder, quick=quick)
        _write_table_atomic(report.table, folder / SUMMARY)
    report.failures = sorted(failures, key=lambda f: f.index)
    _write_atomic(
        folder / FAILURES,
        lambda p: p.write_text(json_text([f.__dict__ for f in report.failures], indent=2)),
    )
    return report


class PointBar(tqdm):  # type: ignore[misc]
    """A tqdm bar of points without tqdm's monitor thread, so that workers can be forked
    (``pool_map``)."""

    monitor_interval = 0


def _run_points(
    finished: Iterator[tuple[Point, PointOutcome]],
    folder: Path,
    report: SweepReport,
    failures: list[Failure],
    bar: Any,
) -> None:
    """Save each finished point of ``finished`` as it comes, collecting failures."""
    with bar:
        for point, outcome in finished:
            if outcome.error is None:
                if not outcome.saved:
                    save_outcome(folder, point, outcome)
                report.num_run += 1
            else:
                failures.append(
                    Failure(
                        point.index, point.describe(), outcome.key, outcome.error, outcome.traceback
                    )
                )
                logger.error(
                    "point %d (%s) failed: %s", point.index, point.describe(), outcome.error
                )
            bar.update(1)


def experiments_dir() -> Path:
    """The shipped ``experiments/`` folder (package data, ``kvsim.presets``)."""
    from kvsim.presets import experiments_dir as shipped

    return shipped()


def default_results_root() -> Path:
    """``results/`` of the source checkout kvsim runs from, else ``./results``."""
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file() and (checkout / "kvsim").is_dir():
        return checkout / "results"
    return Path("results")


def open_experiment(
    name: str, *, quick: bool = False, jobs: int = 1, out_root: str | Path | None = None
) -> SweepResults:
    """Load an experiment's results, running whatever points are missing first (notebooks).

    Raises:
        ValueError: a point failed (the message names each, with its error).

    Args:
        name: experiment name (``experiments/NAME.toml``) or a path to a TOML file.
        quick: use the ``[quick]`` table; results then live under ``results/quick/``.
        jobs: worker processes for missing points.
        out_root: results root (default: ``default_results_root()``).
    """
    path = Path(name) if name.endswith(".toml") else experiments_dir() / f"{name}.toml"
    experiment = load_experiment(path)
    if out_root is None:
        out_root = default_results_root()
    report = run_sweep(experiment, out_root, jobs=jobs, quick=quick, progress=False)
    if report.failures:
        lines = "; ".join(f"point {f.index} [{f.point}]: {f.error}" for f in report.failures)
        raise ValueError(f"{experiment.name}: {len(report.failures)} point(s) failed: {lines}")
    return load_sweep(report.folder)
