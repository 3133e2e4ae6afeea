"""A run that offloads KV to a CPU tier, and on to a disk, shows each tier's blocks in the
report's memory chart."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsim.results.offload import DISK_COLUMNS, TIER_COLUMNS
from kvsim.view.report.data import load_run
from kvsim.view.report.figures import memory_figure
from tests.report.conftest import SMALL, kvsim_run

OFFLOAD = [
    "workload.preset=multi_turn_chat",
    "cache.enable_prefix_caching=true",
    "offload.kv_offloading_size=1",
]


def test_memory_chart_gains_the_cpu_tier_row(tmp_path: Path) -> None:
    run = load_run(kvsim_run(tmp_path / "offload", SMALL + OFFLOAD))
    assert all(c in run.results.memory.columns for c in TIER_COLUMNS)  # memory.parquet has them
    fig = memory_figure(run)
    tier = [t for t in fig.data if str(t.name).startswith("CPU tier")]
    assert [t.name for t in tier] == [
        "CPU tier: stored",
        "CPU tier: storing (GPU->CPU copy)",
        "CPU tier: loading (read by a copy to the GPU or disk)",
        "CPU tier: free",
    ]
    total = sum(pytest.importorskip("numpy").asarray(t.y, dtype=float) for t in tier)
    assert total == pytest.approx([100.0] * len(total))  # every tier block in one category
    assert fig.layout.annotations[2].text == "CPU tier (% of its blocks)"


def test_memory_chart_gains_a_disk_tier_row(tmp_path: Path) -> None:
    run = load_run(
        kvsim_run(tmp_path / "disk", [*SMALL, *OFFLOAD, "offload.disk_offloading_size=4"])
    )
    assert all(c in run.results.memory.columns for c in DISK_COLUMNS)
    fig = memory_figure(run)
    disk = [t for t in fig.data if str(t.name).startswith("disk tier")]
    assert [t.name for t in disk] == [
        "disk tier: stored",
        "disk tier: writing (CPU->disk copy)",
        "disk tier: free",
    ]
    total = sum(pytest.importorskip("numpy").asarray(t.y, dtype=float) for t in disk)
    assert total == pytest.approx([100.0] * len(total))  # every disk block in one category
    assert fig.layout.annotations[3].text == "disk tier (% of its blocks)"


def test_runs_without_offloading_keep_two_rows(small_runs) -> None:
    fig = memory_figure(load_run(small_runs[1]))
    assert len(fig.layout.annotations) == 2
