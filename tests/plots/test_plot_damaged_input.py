"""`kvsim plot` on a sweep folder whose summary.parquet was damaged by hand: a clear one-line
error (exit 2) naming the file, or a warning where only some rows cannot be drawn."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from kvsim.cli.sweep import register
from kvsim.study import figures
from tests.plots.small_sweeps import small_sweep

# the four shares of used KV memory Figure 2's waste bars stack, one bar per row
SHARES = [
    "token_states_pct_of_used",
    "reservation_pct_of_used",
    "internal_fragmentation_pct_of_used",
    "external_fragmentation_pct_of_used",
]


@pytest.fixture(scope="module")
def sweep_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished one-point sweep (one tiny simulation: four 64-token prompts, 8 tokens out)."""
    root = tmp_path_factory.mktemp("sweep")
    return small_sweep(root, {"workload.rate_per_s": [5.0]}, name="one")


def _damaged(sweep_folder: Path, tmp_path: Path, damage) -> Path:
    """A copy of the sweep whose summary.parquet is ``damage(summary)`` (a DataFrame), or the
    bytes ``damage`` when it is bytes."""
    folder = tmp_path / "one"
    shutil.copytree(sweep_folder, folder)
    path = folder / "summary.parquet"
    if isinstance(damage, bytes):
        path.write_bytes(damage)
    else:
        damage(pd.read_parquet(path)).to_parquet(path, index=False)
    return folder


def _refused(folder: Path, tmp_path: Path) -> str:
    """``kvsim plot FOLDER``: exit 2, one ``error:`` line, no traceback, no figure written;
    returns the output, whitespace runs folded to one space."""
    app = typer.Typer()
    register(app)
    out = tmp_path / "figures"
    result = CliRunner().invoke(app, ["plot", str(folder), "--out", str(out)])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert "Traceback" not in result.output
    assert not list(out.rglob("*.png"))
    return " ".join(result.output.split())


def test_summary_without_metric_columns_names_the_file_and_columns(sweep_folder, tmp_path):
    # was: internal error KeyError 'token_states_pct_of_used', exit 1
    folder = _damaged(sweep_folder, tmp_path, lambda t: t.drop(columns=SHARES))
    text = _refused(folder, tmp_path)
    assert f"{folder / 'summary.parquet'}:" in text
    assert f"lacks columns {SHARES}" in text
    assert "expected a kvsim sweep summary" in text


def test_a_table_that_is_not_a_kvsim_summary_is_refused(sweep_folder, tmp_path):
    # a random two-column table: none of the columns plot needs (config_key, capacity_tokens,
    # the four shares); was: internal error KeyError, exit 1
    frame = pd.DataFrame({"a": [1, 2, 3], "b": [0.5, 0.25, 0.125]})
    folder = _damaged(sweep_folder, tmp_path, lambda t: frame)
    text = _refused(folder, tmp_path)
    assert f"{folder / 'summary.parquet'}: lacks columns ['config_key', 'capacity_tokens'," in text


def test_summary_with_no_rows_is_refused(sweep_folder, tmp_path):
    # was: a warning, "0 figures -> -" and exit 0
    folder = _damaged(sweep_folder, tmp_path, lambda t: t.iloc[:0])
    text = _refused(folder, tmp_path)
    assert f"{folder / 'summary.parquet'}: no rows" in text


def test_every_share_nan_is_refused_not_drawn_as_zero(sweep_folder, tmp_path):
    # was: waste bars of height 0 labelled "0.0%", exit 0
    folder = _damaged(sweep_folder, tmp_path, lambda t: t.assign(**dict.fromkeys(SHARES, np.nan)))
    text = _refused(folder, tmp_path)
    assert f"{folder / 'summary.parquet'}: no plottable values" in text
    assert f"{SHARES} are NaN in all 1 rows" in text


def test_text_in_a_share_column_is_refused(sweep_folder, tmp_path):
    # was: "error: could not convert string to float: 'lots'", naming neither file nor column
    folder = _damaged(sweep_folder, tmp_path, lambda t: t.assign(reservation_pct_of_used=["lots"]))
    text = _refused(folder, tmp_path)
    assert f"{folder / 'summary.parquet'}: column(s) ['reservation_pct_of_used']" in text
    assert "not numbers" in text


def test_rows_with_nan_shares_are_left_out_with_a_count(
    sweep_folder, tmp_path, caplog, monkeypatch
):
    # two rows: the real point, and a copy of it (label "blank") with NaN shares, as a point
    # that held no KV memory has; the bars draw 1 row and the warning says 1 of 2 left out
    def two_rows(t: pd.DataFrame) -> pd.DataFrame:
        blank = t.assign(**dict.fromkeys(SHARES, np.nan))
        return pd.concat([t.assign(label="real"), blank.assign(label="blank")], ignore_index=True)

    folder = _damaged(sweep_folder, tmp_path, two_rows)
    drawn: list[pd.DataFrame] = []
    real_bars = figures.waste_bars

    def spy(table, labels, **kwargs):
        drawn.append(table)
        return real_bars(table, labels, **kwargs)

    monkeypatch.setattr(figures, "waste_bars", spy)
    with caplog.at_level(logging.WARNING, logger="kvsim.study.figures"):
        written = figures.draw_figures(folder, tmp_path / "figures")
    assert "waste_bars.png" in {p.name for p in written}
    assert len(drawn) == 1
    assert drawn[0]["label"].tolist() == ["real"]
    notes = [r.getMessage() for r in caplog.records if "left out" in r.getMessage()]
    assert len(notes) == 1, caplog.text
    assert notes[0].startswith(f"{folder / 'summary.parquet'}: 1 of 2 rows have NaN in")


def test_one_folder_that_cannot_be_drawn_leaves_the_others_drawn(sweep_folder, tmp_path):
    # kvsim plot EMPTY GOOD: EMPTY's error is said, GOOD's figures are drawn, exit 2
    empty = _damaged(sweep_folder, tmp_path / "a", lambda t: t.iloc[:0])
    app = typer.Typer()
    register(app)
    out = tmp_path / "figures"
    result = CliRunner().invoke(app, ["plot", str(empty), str(sweep_folder), "--out", str(out)])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert f"error: {empty / 'summary.parquet'}: no rows" in text
    assert (out / sweep_folder.name / "waste_bars.png").is_file()
