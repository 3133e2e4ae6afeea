"""`kvsim report`: one HTML file; user errors are one red line with exit status 2."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvsim.cli import app
from tests.conftest import forget_warnings

runner = CliRunner()


def test_report_writes_one_html_file(small_runs, tmp_path) -> None:
    out = tmp_path / "sub" / "cmp.html"
    result = runner.invoke(app, ["report", *map(str, small_runs), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output
    assert out.read_text().startswith("<!DOCTYPE html>")


def test_missing_folder_is_one_line_exit_2(tmp_path) -> None:
    out = tmp_path / "r.html"  # (a name not ending in .html is refused first)
    result = runner.invoke(app, ["report", str(tmp_path / "nope"), "--out", str(out)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: RUN_DIR '{tmp_path / 'nope'}': no such folder"
    ]
    assert not out.exists()


def test_folder_without_summary_is_one_line_exit_2(tmp_path) -> None:
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "holds no summary.json" in result.output
    assert "Traceback" not in result.output


def test_three_runs_or_one_run_twice_is_refused(small_runs, tmp_path) -> None:
    """The page sets one or two runs side by side: a third was written silently, and the same
    folder twice showed one run against itself."""
    out = tmp_path / "r.html"
    three = [str(small_runs[0]), str(small_runs[1]), str(small_runs[0])]
    result = runner.invoke(app, ["report", *three, "--out", str(out)])
    assert result.exit_code == 2
    assert "one or two run folders (shown side by side), got 3" in result.output
    twice = [str(small_runs[0]), f"{small_runs[0]}/."]
    result = runner.invoke(app, ["report", *twice, "--out", str(out)])
    assert result.exit_code == 2
    assert "are the same folder" in result.output
    assert not out.exists()


@pytest.mark.parametrize(
    ("table", "copied", "missing"),
    [
        ("memory", "requests", "'time_s'"),
        ("requests", "memory", "'req_id'"),
        ("mapframes", "memory", "'frame'"),
        ("frames", "requests", "'frame'"),
    ],
)
def test_a_table_swapped_for_another_is_named(small_runs, tmp_path, table, copied, missing):
    """A readable Parquet file of the wrong table (another run table copied over it) was an
    internal error (KeyError: 'time_s'), exit 1."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(small_runs[0], run)
    shutil.copy(run / f"{copied}.parquet", run / f"{table}.parquet")
    result = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 2, result.output
    assert f"{table}.parquet: no column {missing}" in result.output
    assert "Traceback" not in result.output


def test_a_request_table_cut_short_since_the_run_is_named(small_runs, tmp_path) -> None:
    """requests.parquet emptied (or cut to fewer rows) while summary.json counts the run's 120
    requests: the page was written from the stump, exit 0."""
    import shutil

    import pandas as pd

    run = tmp_path / "run"
    shutil.copytree(small_runs[0], run)
    table = pd.read_parquet(run / "requests.parquet")
    table.iloc[:0].to_parquet(run / "requests.parquet")
    result = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 2, result.output
    assert "requests.parquet: 0 rows where" in result.output
    assert "counts 120 requests" in result.output  # (SMALL: 120 requests)


def test_out_must_not_be_a_folder(small_runs, tmp_path) -> None:
    result = runner.invoke(app, ["report", str(small_runs[1]), "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "expected an HTML file" in result.output


@pytest.mark.usefixtures("fresh_warnings")
def test_reading_a_run_back_says_none_of_its_configs_warnings(tmp_path, caplog) -> None:
    # a max_model_len past the model's trained context warns when the run is made; report and
    # plot read the run back and said it again
    from kvsim.results import Results

    args = ["run", "--no-progress", "--set", "model=llama-3.1-8b", "--out", str(tmp_path)]
    args += ["--set", "model.max_position_embeddings=2048", "--set", "scheduler.max_model_len=4096"]
    result = CliRunner().invoke(app, [*args, "--set", "workload.num_requests=3"])
    assert result.exit_code == 0, result.output
    assert "trained context" in caplog.text  # (said when run)
    forget_warnings(caplog)
    Results.load(tmp_path)
    assert "trained context" not in caplog.text


def test_map_frames_deleted_since_the_run_are_named(small_runs, tmp_path) -> None:
    """A run saved with --map-frames whose mapframes.parquet was deleted since (its .kvsim-run
    lists it) drew the page with the advice to rerun with --map-frames, exit 0."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(small_runs[0], run)
    (run / "mapframes.parquet").unlink()
    result = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 2, result.output
    assert "mapframes.parquet: no such file, though the run saved it" in result.output
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("tables", [("memory",), ("mapframes",), ("frames",)])
def test_tables_of_another_run_are_named(small_runs, tmp_path, tables) -> None:
    """Another run's memory series (longer) or map frames (of requests this run lacks) copied
    into a run folder: kvsim report drew them under this run's summary, exit 0."""
    import shutil

    import pandas as pd

    run = tmp_path / "run"
    shutil.copytree(small_runs[0], run)
    for table in tables:  # (this run's own, made another's: later, or of other requests)
        frame = pd.read_parquet(run / f"{table}.parquet")
        if "req_id" in frame.columns:
            frame["req_id"] = frame["req_id"] + 10_000
        else:
            frame["time_s"] = frame["time_s"] + 1e4
        frame.to_parquet(run / f"{table}.parquet")
    result = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 2, result.output
    assert f"{tables[0]}.parquet" in result.output
    assert "a table from another run" in result.output


def test_a_summary_without_its_pool_size_says_the_key_is_missing(small_runs, tmp_path) -> None:
    """capacity_tokens taken out of summary.json read 'must be a whole number of token slots,
    got None'."""
    import json
    import shutil

    run = tmp_path / "run"
    shutil.copytree(small_runs[0], run)
    summary = json.loads((run / "summary.json").read_text())
    del summary["capacity_tokens"]
    (run / "summary.json").write_text(json.dumps(summary))
    result = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "r.html")])
    assert result.exit_code == 2, result.output
    assert "summary.json: no capacity_tokens" in result.output
