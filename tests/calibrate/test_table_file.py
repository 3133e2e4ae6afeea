"""Malformed calibration table files: one error naming the file, the row, the column and the
value, and what was expected; unknown columns warn."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from kvsim.calibrate.table import CalibrationTable

HEAD = (
    "# source: measured\n# device_name: NVIDIA A100\n# driver_version: 1\n"
    "# cupy_version: 1\n# date_utc: now\n"
    "batch_size,context_tokens,block_size_tokens,contiguous_s,paged_s,kv_bytes\n"
)  # lines 1-6: the data rows start at line 7
META = '"meta": {"source": "measured", "device_name": "x", "driver_version": "1", '
META += '"cupy_version": "1", "date_utc": "n"}'
ROW = '{"batch_size": 1, "context_tokens": 1, "block_size_tokens": 16, "contiguous_s": 1, '

CSV_CASES = {
    "short_row": (
        "1,256,16,1.0\n",
        "line 7: 4 fields, expected 6 (batch_size, context_tokens, block_size_tokens, "
        "contiguous_s, paged_s, kv_bytes)",
    ),
    "text": ("1,256,16,1.0,abc,0\n", "line 7: paged_s: Input should be a valid number"),
    "blank": ("1,256,16,1.0,,0\n", "line 7: paged_s: Input should be a valid number"),
    "nan": ("1,256,16,nan,1.0,0\n", "line 7: contiguous_s: Input should be a finite number"),
    "inf": ("1,256,16,1.0,inf,0\n", "line 7: paged_s: Input should be a finite number"),
    "fraction": ("1,256,16.7,1.0,1.2,0\n", "line 7: block_size_tokens: Input should be a valid"),
    "zero_time": ("1,256,16,0,1.2,0\n", "line 7: contiguous_s: Input should be greater than 0"),
    # 1e300 / 1e-300 overflows to inf: no finite slowdown
    "ratio": (
        "1,256,16,1e-300,1e300,0\n",
        "line 7: paged_s / contiguous_s must be within [0.01, 100]",
    ),
    "second_row": ("1,256,16,1.0,1.2,0\n\n8,256,16,1.0,-2,0\n", "line 9: paged_s: Input should"),
}


@pytest.mark.parametrize(("body", "message"), CSV_CASES.values(), ids=list(CSV_CASES))
def test_bad_csv_cell_is_named(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEAD + body)
    with pytest.raises(ValueError, match="^" + re.escape(f"{path} {message}")):
        CalibrationTable.load(path)


def test_bad_csv_value_is_shown(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEAD + "1,256,16.7,1.0,1.2,0\n")
    expected = (
        f"{path} line 7: block_size_tokens: Input should be a valid integer, unable to parse "
        "string as an integer, got '16.7'"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
        CalibrationTable.load(path)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        (
            "batch_size,context_tokens,block_size_tokens,contiguous_s,kv_bytes",
            "no column(s) ['paged_s']",
        ),
        (
            "batch_size,paged_s,context_tokens,block_size_tokens,contiguous_s,paged_s,kv_bytes",
            "duplicate column(s) ['paged_s']",
        ),
    ],
    ids=["missing", "duplicate"],
)
def test_bad_header(tmp_path: Path, header: str, message: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEAD.rsplit("batch_size", 1)[0] + header + "\n1,1,1,1,1,1\n")
    with pytest.raises(ValueError, match=re.escape(f"t.csv line 6: {message} in the header")):
        CalibrationTable.load(path)


def test_missing_metadata_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEAD.replace("# source: measured\n", "") + "1,256,16,1.0,1.2,0\n")
    with pytest.raises(ValueError, match=r"t\.csv metadata: source: Field required"):
        CalibrationTable.load(path)


JSON_CASES = {
    "rows_not_list": ("{" + META + ', "rows": 5}', ": rows: Input should be a valid list, got 5"),
    "meta_list": ('{"meta": [], "rows": []}', ": meta: Input should be a valid dictionary"),
    "null": (
        "{" + META + ', "rows": [' + ROW + '"paged_s": null, "kv_bytes": 0}]}',
        ": rows[0].paged_s: Input should be a valid number, got None",
    ),
    "no_rows": ("{" + META + ', "rows": []}', ": rows: List should have at least 1 item"),
    # true read as 1: every row's block size 1, the layout factor of 1-token blocks everywhere
    "block_size_true": (
        "{"
        + META
        + ', "rows": ['
        + ROW.replace('"block_size_tokens": 16', '"block_size_tokens": true')
        + '"paged_s": 1, "kv_bytes": 0}]}',
        ": rows[0].block_size_tokens: expected an integer, got true",
    ),
    "not_json": ("not json", " line 1 column 1: invalid JSON (Expecting value)"),
    "array": ("[1, 2]", ': expected a JSON object {"meta": {...}, "rows": [...]}, got list'),
}


@pytest.mark.parametrize(("text", "message"), JSON_CASES.values(), ids=list(JSON_CASES))
def test_bad_json_is_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(text)
    with pytest.raises(ValueError, match="^" + re.escape(f"{path}{message}")):
        CalibrationTable.load(path)


def test_unknown_column_warns_and_values_are_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "t.csv"
    text = HEAD.replace("kv_bytes\n", "kv_bytes,note\n")
    path.write_text(text + "1,256,16,2.0,3.0,0,x\n1,256,32,2.0,2.5,0,y\n")
    with caplog.at_level(logging.WARNING):
        table = CalibrationTable.load(path)
    assert "ignored 1 column(s) a calibration table does not have: ['note']" in caplog.text
    # ratios 3.0 / 2.0 = 1.5 and 2.5 / 2.0 = 1.25
    assert table.ratios_by_block_size() == {16: 1.5, 32: 1.25}


def test_from_runs_writes_by_default_the_fitted_table_kvsim_reads(tmp_path, monkeypatch) -> None:
    # run from another folder it wrote ./kvsim/data/cost_fit.toml, which nothing reads
    import kvsim
    from kvsim.cli.calibrate import shipped_fit_path

    monkeypatch.chdir(tmp_path)
    path = shipped_fit_path()
    assert path.is_absolute()
    assert path == Path(kvsim.__file__).parent / "data" / "cost_fit.toml"
    assert path.is_file()


def test_a_metadata_key_given_twice_is_refused(tmp_path: Path) -> None:
    # the last # device_name won: which GPU the table measured, unsaid
    path = tmp_path / "t.csv"
    path.write_text("# device_name: NVIDIA H200\n" + HEAD + "1,256,16,1.0,1.2,0\n")
    with pytest.raises(ValueError, match=r"line 3: # device_name is given again \("):
        CalibrationTable.load(path)


def test_a_grid_point_measured_again_is_warned(tmp_path: Path, caplog) -> None:
    # ten repeats of one point at 50x its time weighed the block size's median, unsaid
    import logging

    path = tmp_path / "t.csv"
    path.write_text(HEAD + "1,256,16,1.0,1.2,0\n1,256,16,1.0,60,0\n8,256,16,1.0,1.3,0\n")
    with caplog.at_level(logging.WARNING, logger="kvsim.calibrate"):
        CalibrationTable.load(path)
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"{path}: 1 row(s) measure a grid point (batch_size, context_tokens, block_size_tokens) "
        "again (first: line 8, of line 7); every row counts in its block size's median ratio"
    ]
