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


CPU_ROWS = [
    "CPU tier: stored",
    "CPU tier: storing (GPU->CPU copy)",
    "CPU tier: loading (read by a copy to the GPU or disk)",
    "CPU tier: free",
]
DISK_ROWS = ["disk tier: stored", "disk tier: writing (CPU->disk copy)", "disk tier: free"]


@pytest.mark.parametrize(
    ("extra", "tiers"),
    [
        ([], [("CPU tier", TIER_COLUMNS, CPU_ROWS)]),
        (
            ["offload.disk_offloading_size=4"],
            [("CPU tier", TIER_COLUMNS, CPU_ROWS), ("disk tier", DISK_COLUMNS, DISK_ROWS)],
        ),
    ],
    ids=["cpu", "cpu-and-disk"],
)
def test_memory_chart_gains_a_row_per_tier(
    tmp_path: Path, extra: list[str], tiers: list[tuple[str, tuple[str, ...], list[str]]]
) -> None:
    run = load_run(kvsim_run(tmp_path / "offload", [*SMALL, *OFFLOAD, *extra]))
    fig = memory_figure(run)
    assert len(fig.layout.annotations) == 2 + len(tiers)  # no disk row without a disk
    for row, (tier, columns, names) in enumerate(tiers, start=2):
        assert all(c in run.results.memory.columns for c in columns)  # memory.parquet has them
        traces = [t for t in fig.data if str(t.name).startswith(tier)]
        assert [t.name for t in traces] == names
        total = sum(pytest.importorskip("numpy").asarray(t.y, dtype=float) for t in traces)
        assert total == pytest.approx([100.0] * len(total))  # every tier block in one category
        assert fig.layout.annotations[row].text == f"{tier} (% of its blocks)"


def test_runs_without_offloading_keep_two_rows(small_runs) -> None:
    fig = memory_figure(load_run(small_runs[1]))
    assert len(fig.layout.annotations) == 2
