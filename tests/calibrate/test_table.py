"""Calibration table: round trip, schema, ratios and how the cost model picks a table."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsim.calibrate.table import CalibrationTable, resolve_table
from kvsim.config import CostSpec, GpuSpec, ModelSpec
from kvsim.core.cost import StepCostModel

META = {
    "source": "measured",
    "device_name": "Test GPU",
    "driver_version": "1.0",
    "cupy_version": "13.0",
    "date_utc": "2024-01-01T00:00:00Z",
}


def row(block: int, paged_s: float, batch: int = 1) -> dict[str, float]:
    return {
        "batch_size": batch,
        "context_tokens": 256,
        "block_size_tokens": block,
        "contiguous_s": 1.0,
        "paged_s": paged_s,
        "kv_bytes": 1024,
    }


def table() -> CalibrationTable:
    # block 1: one row, ratio 3.0; block 4: ratios 1.9, 2.0, 2.2 -> median 2.0
    return CalibrationTable(dict(META), [row(1, 3.0), row(4, 1.9), row(4, 2.0, 8), row(4, 2.2, 32)])


@pytest.mark.parametrize("suffix", [".csv", ".json"])
def test_round_trip(tmp_path: Path, suffix: str) -> None:
    path = table().save(tmp_path / f"t{suffix}")
    back = CalibrationTable.load(path)
    assert back.meta == META
    assert back.rows == table().rows


def test_csv_has_metadata_header(tmp_path: Path) -> None:
    text = table().save(tmp_path / "t.csv").read_text()
    assert text.splitlines()[:2] == ["# cupy_version: 13.0", "# date_utc: 2024-01-01T00:00:00Z"]
    assert "batch_size,context_tokens,block_size_tokens,contiguous_s,paged_s,kv_bytes" in text


def test_ratios_and_interpolation() -> None:
    t = table()
    assert t.ratios_by_block_size() == {1: 3.0, 4: 2.0}
    # log2: 1 -> 0, 4 -> 2; block 2 sits half way: (3.0 + 2.0) / 2 = 2.5; clamped beyond the ends
    assert t.layout_factor(2) == pytest.approx(2.5)
    assert t.layout_factor(64) == pytest.approx(2.0)
    assert t.describe().startswith("measured on Test GPU")


@pytest.mark.parametrize(
    "key", ["source", "device_name", "driver_version", "cupy_version", "date_utc"]
)
def test_missing_metadata_is_named(key: str) -> None:
    meta = {k: v for k, v in META.items() if k != key}
    with pytest.raises(ValueError, match=f"'{key}' is missing"):
        CalibrationTable(meta, [row(1, 2.0)])


def test_bad_rows_rejected() -> None:
    with pytest.raises(ValueError, match="lacks columns"):
        CalibrationTable(dict(META), [{"batch_size": 1.0}])
    with pytest.raises(ValueError, match="positive finite times"):
        CalibrationTable(dict(META), [row(1, 0.0)])
    with pytest.raises(ValueError, match="source must be"):
        CalibrationTable({**META, "source": "guessed"}, [row(1, 2.0)])
    with pytest.raises(ValueError, match="no rows"):
        CalibrationTable(dict(META), [])


def test_default_is_analytic_and_says_so() -> None:
    t = resolve_table(None, "a100-40gb")  # nothing is shipped for the A100
    assert not t.is_measured
    assert "analytic" in t.describe()
    assert resolve_table("analytic", "h200").meta["source"] == "analytic"


def test_cost_model_reads_a_given_table(tmp_path: Path) -> None:
    path = table().save(tmp_path / "given.json")
    cost = CostSpec(calibration=str(path))
    model = StepCostModel(
        ModelSpec.model_validate("opt-13b"),
        GpuSpec.model_validate("a100-40gb"),
        cost,
        paged=True,
        block_size_tokens=2,
    )
    assert model.layout_factor == pytest.approx(2.5)
    assert "measured on Test GPU" in model.layout_source
