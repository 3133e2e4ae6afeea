"""Fitting the step cost's free parameters on measured runs of the train split (no GPU needed).

``fit_cost`` replays the train runs under candidate parameters and minimises, with
``scipy.optimize.least_squares``, the squared log-ratios of predicted to measured statistics
(mean, p90 and p99 E2E, mean and p90 TTFT, mean TPOT, per load stage). Every other number is
read from datasheets (``kvsim/data/gpus.toml``) or is pinned with its source. Replays are cached on
disk by run, window and parameter values, so a rerun or a second fit reuses them.

Only train runs may be fitted on: ``fit_cost`` refuses any other (``FitSplitError``); the
validate split chooses between fits (``kvsim.validate.table``), and the source's test split is
not in the data at all.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from kvsim.base.extras import require
from kvsim.config import CostSpec
from kvsim.validate.errors import statistic
from kvsim.validate.replay import replay_run
from kvsim.validate.runs import MeasuredRun

logger = logging.getLogger(__name__)

# name -> (lower bound, upper bound, typical size: the unit the optimiser steps in)
PARAMETERS: dict[str, tuple[float, float, float]] = {
    "hbm_efficiency": (0.3, 1.0, 0.1),
    "flops_efficiency": (0.2, 1.0, 0.1),
    "step_overhead_s": (0.0, 0.01, 1e-3),
    "per_seq_overhead_s": (0.0, 1e-4, 1e-5),
    "allreduce_latency_per_peer_s": (0.0, 1e-4, 1e-5),
    "paged_attention_factor": (0.8, 1.6, 0.1),
    "frontend_latency_s": (0.0, 0.05, 5e-3),
}
# (metric, statistic) compared per stage: the transients of a server's first requests (JIT
# compilation, a cold prefix cache) dominate TTFT's p99 and are left out of the loss
RESIDUALS = (
    ("e2e_s", "mean"),
    ("e2e_s", "p90"),
    ("e2e_s", "p99"),
    ("ttft_s", "mean"),
    ("ttft_s", "p90"),
    ("tpot_s", "mean"),
)
# Pinned, not fitted: (value, source)
PINNED: dict[str, tuple[float, str]] = {
    "link_efficiency": (
        0.8,
        "about 80 % of NVLink's bandwidth as NCCL bus bandwidth on large all-reduces "
        "(nccl-tests doc/PERFORMANCE.md defines it; the messages here are small, so the "
        "latency term dominates)",
    ),
    "allreduce_latency_s": (0.0, "the per-peer latency holds the whole all-reduce latency"),
}


class FitSplitError(ValueError):
    """A run outside the train split was given to the fit."""


@dataclass(frozen=True, slots=True)
class Window:
    """A part of each stage replayed while fitting: ``per_stage`` requests of each stage
    measured, with ``margin`` requests replayed on either side (a warm prefix cache and running
    batch before, the batch they share after). The run's first ``margin`` requests are replayed
    but not measured: a server's first requests meet a cold prefix cache and one-off start-up
    work (kernel compilation) that a window of a few hundred requests would over-weight."""

    per_stage: int
    margin: int

    def apply(self, run: MeasuredRun) -> MeasuredRun:
        """``run`` cut to the window (the same run when it is no shorter)."""
        keep: set[int] = set()
        replayed: set[int] = set()
        first = 0
        for stage in run.stages:
            start = first + (self.margin if first == 0 else 0)
            last = start + min(self.per_stage, stage.num_requests - (start - first))
            keep.update(range(start, last))
            replayed.update(range(max(0, start - self.margin), last + self.margin))
            first += stage.num_requests
        requests = [r for r in run.requests if r.req_id in replayed]
        measured = run.measured[run.measured["req_id"].isin(keep)]
        return replace(run, requests=requests, measured=measured.reset_index(drop=True))


@dataclass
class FitResult:
    """What a fit found.

    Attributes:
        values: every fitted parameter (``PARAMETERS`` names; FITTED).
        pinned: the parameters held fixed, with their values.
        runs: the train runs fitted on.
        loss: the sum of squared log-ratios at ``values``.
        num_replays: replays run (cache hits not counted).
        residuals: the residuals at ``values``, by ``run/stage/metric/statistic``.
    """

    values: dict[str, float]
    pinned: dict[str, float]
    runs: list[str]
    loss: float
    num_replays: int
    residuals: dict[str, float] = field(default_factory=dict)


def _whole_stats(stats: object) -> bool:
    """``stats`` is what ``replay_stats`` writes: a non-empty object of numbers whose every
    ``.../measured`` key has its ``.../predicted``."""
    if not isinstance(stats, dict) or not stats:
        return False
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in stats.values()):
        return False
    measured = {k.removesuffix("/measured") for k in stats if k.endswith("/measured")}
    predicted = {k.removesuffix("/predicted") for k in stats if k.endswith("/predicted")}
    return bool(measured) and measured == predicted and len(stats) == 2 * len(measured)


class ReplayCache:
    """Per-stage statistics of replays, on disk (one JSON line per replay) and in memory.

    Args:
        path: the JSON Lines file (created on the first write), or ``None`` for memory only.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.entries: dict[str, dict[str, float]] = {}
        if path is not None and path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    entry = json.loads(line)
                    key, stats = entry["key"], entry["stats"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    logger.warning("%s: skipped a malformed cache line", path)
                    continue
                if not _whole_stats(stats):  # ({} read as a replay that fits perfectly)
                    logger.warning("%s: skipped a cache line with no statistics pair", path)
                    continue
                self.entries[key] = stats

    def get(self, key: str) -> dict[str, float] | None:
        return self.entries.get(key)

    def put(self, key: str, stats: dict[str, float]) -> None:
        self.entries[key] = stats
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as out:
                out.write(json.dumps({"key": key, "stats": stats}) + "\n")


def cost_of(values: dict[str, float]) -> tuple[CostSpec, float]:
    """The ``CostSpec`` (every factor given: no fitted table read) and frontend latency of a
    parameter set (fitted values and pinned ones; a missing one takes ``PINNED``'s or 0)."""
    pinned = {name: value for name, (value, _) in PINNED.items()}
    every = {"per_seq_overhead_s": 0.0, "paged_attention_factor": 1.0, **pinned, **values}
    frontend = every.pop("frontend_latency_s", 0.0)
    return CostSpec.model_validate({"roofline": "operator", **every}), frontend


def replay_stats(
    run: MeasuredRun, values: dict[str, float], cache: ReplayCache, window: Window | None
) -> tuple[dict[str, float], bool]:
    """Per-stage statistics of ``run`` replayed under ``values`` (from the cache when there),
    and whether a replay ran. Keys: ``stage/metric/statistic/measured|predicted``."""
    key = _cache_key(run, values, window)
    hit = cache.get(key)
    if hit is not None:
        return hit, False
    cut = window.apply(run) if window is not None else run
    cost, frontend = cost_of(values)
    frame = replay_run(cut, cost, frontend).requests
    stats: dict[str, float] = {}
    for stage, group in frame.groupby("stage"):
        for metric, name in RESIDUALS:
            for side in ("measured", "predicted"):
                column = group[f"{side}_{metric}"].to_numpy(dtype=float)
                stats[f"{stage}/{metric}/{name}/{side}"] = statistic(column, name)
    cache.put(key, stats)
    return stats, True


def residuals_of(stats: dict[str, float], run_name: str) -> dict[str, float]:
    """``log(predicted / measured)`` of each statistic, by ``run/stage/metric/statistic``."""
    out = {}
    for key, measured in stats.items():
        if not key.endswith("/measured"):
            continue
        base = key.removesuffix("/measured")
        predicted = stats[f"{base}/predicted"]
        if measured > 0 and predicted > 0 and math.isfinite(predicted):
            out[f"{run_name}/{base}"] = math.log(predicted / measured)
        else:
            out[f"{run_name}/{base}"] = math.log(1e3)  # a replay that never finished
    return out


def fit_cost(
    runs: Sequence[MeasuredRun],
    free: Sequence[str],
    start: dict[str, float],
    *,
    cache: ReplayCache,
    window: Window | None = None,
    max_evaluations: int = 60,
    progress: Callable[[str], None] | None = None,
) -> FitResult:
    """Fit the parameters ``free`` (``PARAMETERS`` names) on ``runs``, from ``start`` (which
    also holds the values of the parameters not fitted).

    Raises:
        FitSplitError: a run outside the train split.
        ValueError: an unknown parameter, or a start outside its bounds.
    """
    outside = [run.name for run in runs if run.split != "train"]
    if outside:
        raise FitSplitError(
            f"only train runs may be fitted on; got {outside} (the validate split chooses "
            "between fits, the test split is measured from outside)"
        )
    unknown = [name for name in free if name not in PARAMETERS]
    if unknown:
        raise ValueError(f"unknown parameter(s) {unknown}; choose from {sorted(PARAMETERS)}")
    scale = np.array([PARAMETERS[n][2] for n in free])
    lower = np.array([PARAMETERS[n][0] for n in free]) / scale
    upper = np.array([PARAMETERS[n][1] for n in free]) / scale
    x0 = np.array([start[n] for n in free]) / scale
    if np.any(x0 < lower) or np.any(x0 > upper):
        raise ValueError(f"start {start} is outside the bounds of {list(free)}")
    state = {"replays": 0, "evaluations": 0}

    def values_at(x: np.ndarray) -> dict[str, float]:
        return {**start, **{n: float(v) for n, v in zip(free, x * scale, strict=True)}}

    def residual_vector(x: np.ndarray) -> np.ndarray:
        values = values_at(x)
        out: dict[str, float] = {}
        for run in runs:
            stats, ran = replay_stats(run, values, cache, window)
            state["replays"] += ran
            out.update(residuals_of(stats, run.name))
        state["evaluations"] += 1
        vector = np.array([out[k] for k in sorted(out)])
        if progress is not None:
            shown = ", ".join(f"{n} {v:.4g}" for n, v in values.items() if n in free)
            progress(
                f"  evaluation {state['evaluations']}: loss {float(vector @ vector):.4f} ({shown})"
            )
        return vector

    require("fit", "kvsim calibrate --from-runs")
    from scipy.optimize import least_squares  # an extra: imported when a fit runs

    solution = least_squares(
        residual_vector,
        x0,
        bounds=(lower, upper),
        diff_step=0.05,
        x_scale=1.0,
        max_nfev=max_evaluations,
        method="trf",
    )
    if solution.status == 0:  # (scipy: the evaluation budget ran out before convergence)
        logger.warning(
            "calibrate: the fit of %s stopped at --max-evaluations %d before converging: its "
            "values are where the search stopped, not a minimum; raise --max-evaluations",
            ", ".join(free),
            max_evaluations,
        )
    values = values_at(solution.x)
    final: dict[str, float] = {}
    for run in runs:
        stats, ran = replay_stats(run, values, cache, window)
        state["replays"] += ran
        final.update(residuals_of(stats, run.name))
    fitted = {n: values[n] for n in free}
    pinned = {n: v for n, v in values.items() if n not in free}
    loss = float(sum(r * r for r in final.values()))
    return FitResult(fitted, pinned, [r.name for r in runs], loss, state["replays"], final)


def _cache_key(run: MeasuredRun, values: dict[str, float], window: Window | None) -> str:
    shown = {n: float(f"{v:.6g}") for n, v in sorted(values.items())}
    text = json.dumps(
        {
            "run": run.name,
            "content": run.fingerprint,
            "requests": len(run.requests),
            "window": None if window is None else [window.per_stage, window.margin],
            "values": shown,
            "model": COST_MODEL_VERSION,
        },
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:24]


# Bumped whenever the step cost or the replay changes what a parameter set predicts (the
# cache's entries of another version are not reused).
COST_MODEL_VERSION = "issue33-2"
