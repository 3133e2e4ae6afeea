"""The CuPy microkernel on a real GPU (skipped without CuPy), and the CLI without one."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kvsim.calibrate.cli import device_slug, register

HAS_CUPY = importlib.util.find_spec("cupy") is not None


def app() -> typer.Typer:
    a = typer.Typer()
    register(a)
    return a


@pytest.mark.skipif(HAS_CUPY, reason="checks the message shown when CuPy is missing")
def test_cli_says_cupy_is_missing(tmp_path: Path) -> None:
    result = CliRunner().invoke(app(), ["--out", str(tmp_path / "t.csv")])
    assert result.exit_code == 2
    assert "CuPy is not installed" in result.output
    assert not (tmp_path / "t.csv").exists()


def test_device_slug() -> None:
    assert device_slug("NVIDIA H200") == "h200"
    assert device_slug("NVIDIA A100-SXM4-40GB") == "a100-sxm4-40gb"


@pytest.mark.gpu
def test_kernel_matches_reference() -> None:
    cp = pytest.importorskip("cupy")
    from kvsim.calibrate.kernel import KernelShape
    from kvsim.calibrate.run import check_against_reference

    for shape in (KernelShape(32, 8, 128), KernelShape(8, 8, 64, num_warps=4)):
        assert check_against_reference(cp, shape) < 2e-3


@pytest.mark.gpu
def test_small_grid_writes_a_measured_table(tmp_path: Path) -> None:
    pytest.importorskip("cupy")
    from kvsim.calibrate.run import CalibrationGrid, run_calibration
    from kvsim.calibrate.table import CalibrationTable

    grid = CalibrationGrid(
        batch_sizes=(2,), context_tokens=(64,), block_sizes=(1, 16), warmup=1, repeats=3
    )
    path = run_calibration(grid).save(tmp_path / "t.csv")
    table = CalibrationTable.load(path)
    assert table.is_measured
    assert set(table.ratios_by_block_size()) == {1, 16}
    assert all(r["paged_s"] > 0 and r["contiguous_s"] > 0 for r in table.rows)
