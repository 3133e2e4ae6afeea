"""Benchmark (not a test): wall-clock speed-up of a 2-worker sweep over 1 worker.

``python -m benchmarks.bench_sweep [--requests 400] [--scheduler local]`` runs the same 8-point
sweep (4 allocators x 2 request rates, ShareGPT-like lengths, OPT-13B on 12 GiB) once with one
worker and once with two, into fresh temporary folders, checks that the summary tables are
identical, and reports both times and the speed-up. With the process pool, one worker means running
in this process (no pool start-up), so the 2-worker run also pays its start-up: a conservative
speed-up. With ``--scheduler local`` both runs start a local Dask cluster.

``sweep_speedup()`` does the same for ``experiments/block-size.toml`` (issue 9's figure, run by
``make bench``).
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import pandas as pd
import typer

from kvsim.base.workers import _start_context
from kvsim.study.experiment import Experiment, load_experiment, parse_experiment
from kvsim.study.sweep import experiments_dir, run_sweep


def bench_experiment(num_requests: int) -> Experiment:
    """The benchmark's 8 points; ``num_requests`` per point sets the work per point."""
    data: dict[str, Any] = {
        "base": {
            "cache": {"kv_cache_gib": 12.0},
            "workload": {"preset": "sharegpt_like", "num_requests": num_requests},
        },
        "grid": {"workload.rate_per_s": [1.0, 2.0]},
        "zip": {"cache.allocator": ["first_fit", "best_fit", "buddy", "paged"]},
    }
    return parse_experiment(data, name="bench-sweep")


def time_sweep(
    experiment: Experiment, jobs: int, scheduler: str | None
) -> tuple[float, float, pd.DataFrame]:
    """Wall-clock seconds of a sweep from scratch, the sum of its points' own wall-clock
    seconds (as the workers measured them), and its summary table."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        report = run_sweep(experiment, Path(tmp), jobs=jobs, scheduler=scheduler, progress=False)
        elapsed = time.perf_counter() - start
        point_s = sum(
            json.loads(p.read_text())["elapsed_s"]
            for p in report.folder.glob("points/*/point.json")
        )
        return elapsed, point_s, report.table


def spin(iterations: int) -> int:
    """Plain Python arithmetic, no allocation: CPU work whose speed only the core sets."""
    total = 0
    for i in range(iterations):
        total += i * i % 7
    return total


def time_spin_pair(iterations: int, processes: int) -> float:
    """Wall-clock seconds of two ``spin(iterations)``: both in this process (``processes=1``),
    or one here and one in a child process (``2``, as ``pool_map`` splits a sweep; forked
    like its workers where this process runs no other thread)."""
    start = time.perf_counter()
    if processes == 1:
        spin(iterations)
        spin(iterations)
        return time.perf_counter() - start
    context: Any = _start_context()  # typeshed's BaseContext lacks Process
    child = context.Process(target=spin, args=(iterations,))
    child.start()
    spin(iterations)
    child.join()
    return time.perf_counter() - start


def spin_iterations(seconds: float) -> int:
    """How many ``spin`` iterations take about ``seconds`` here (a tenth-second probe)."""
    probe = 200_000
    start = time.perf_counter()
    spin(probe)
    return max(1, int(probe * seconds / (time.perf_counter() - start)))


def sweep_speedup(name: str = "block-size", jobs: int = 2, repeats: int = 3) -> dict[str, Any]:
    """Wall-clock seconds of ``experiments/NAME.toml`` with 1 and ``jobs`` workers (the median of
    ``repeats`` runs each, alternating), its speed-up, and the points' own seconds (their sum
    grows when workers compete for CPU).

    Between the sweeps, the machine's own ceiling is measured the same way: a pure-Python loop
    of about half the 1-worker sweep's length, twice in one process against once in each of
    two (``machine_ceiling``, the median ratio; with ``jobs == 2`` where workers are forked).
    On a 2-core virtual machine it moved between 1.5x and 1.9x from one minute to the next, so
    it says how much of a sweep's speed-up the machine allowed when it ran.

    Raises:
        AssertionError: the summary tables differ.
    """
    experiment = load_experiment(experiments_dir() / f"{name}.toml")
    runs: dict[int, list[tuple[float, float]]] = {1: [], jobs: []}
    ceiling: list[float] = []
    tables = []
    iterations = 0
    measure_ceiling = jobs == 2 and _start_context().get_start_method() == "fork"
    for _ in range(repeats):
        for n in (1, jobs):
            wall_s, points_s, table = time_sweep(experiment, n, None)
            runs[n].append((wall_s, points_s))
            tables.append(table)
        if measure_ceiling:
            iterations = iterations or spin_iterations(runs[1][0][0] / 2)
            ceiling.append(time_spin_pair(iterations, 1) / time_spin_pair(iterations, 2))
    for table in tables[1:]:
        pd.testing.assert_frame_equal(tables[0], table)
    one_s, one_points_s = (statistics.median(v) for v in zip(*runs[1], strict=True))
    many_s, many_points_s = (statistics.median(v) for v in zip(*runs[jobs], strict=True))
    return {
        "experiment": name,
        "points": len(tables[0]),
        "jobs": jobs,
        "repeats": repeats,
        "wall_s_1_worker": one_s,
        f"wall_s_{jobs}_workers": many_s,
        "speedup": one_s / many_s,
        "points_s_1_worker": one_points_s,
        f"points_s_{jobs}_workers": many_points_s,
        "machine_ceiling": statistics.median(ceiling) if ceiling else None,
    }


def main(
    requests: Annotated[int, typer.Option(help="requests per point")] = 400,
    scheduler: Annotated[
        str | None,
        typer.Option(
            help="'local' to compare 1- and 2-worker local Dask clusters instead of process pools"
        ),
    ] = None,
) -> None:
    """Report the speed-up of 2 workers over 1 on an 8-point sweep."""
    experiment = bench_experiment(requests)
    one_s, one_points_s, one = time_sweep(experiment, 1, scheduler)
    two_s, two_points_s, two = time_sweep(experiment, 2, scheduler)
    pd.testing.assert_frame_equal(one, two)
    typer.echo(
        f"8 points x {requests} requests ({scheduler or 'process pool'}): "
        f"1 worker {one_s:.1f} s, 2 workers {two_s:.1f} s, speed-up {one_s / two_s:.2f}x "
        "(tables identical)"
    )
    typer.echo(
        f"points' own time: {one_points_s:.1f} s with 1 worker, {two_points_s:.1f} s with "
        f"2 (a ratio above 1 means the two workers competed for CPU: "
        f"{two_points_s / one_points_s:.2f})"
    )


if __name__ == "__main__":
    typer.run(main)
