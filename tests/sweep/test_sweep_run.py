"""Running sweeps: storage, resume after a kill, local pool vs Dask, failing points."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import kvsim.study.point as point_mod
from kvsim.study.load import load_sweep
from kvsim.study.sweep import run_sweep


def test_points_stored_under_keys_and_summary_gathered(tmp_path, tiny) -> None:
    report = run_sweep(tiny, tmp_path, progress=False)
    folder = tmp_path / "tiny"
    assert report.num_run == 4
    assert report.num_skipped == 0
    assert not report.failures
    keys = [p.key for p in tiny.points()]
    for key in keys:
        assert sorted(f.name for f in (folder / "points" / key).iterdir()) == [
            ".kvsim-run",  # (the list of the run's files, written first: RUN_MANIFEST)
            "config.json",
            "memory.parquet",
            "point.json",
            "requests.parquet",
            "summary.json",
        ]
    table = pd.read_parquet(folder / "summary.parquet")
    # one row per point in expansion order: swept fields first, then the metrics
    assert list(table.columns[:3]) == ["label", "cache.block_size_tokens", "cache.allocator"]
    assert list(table["label"]) == ["contiguous", "paged", "contiguous", "paged"]
    assert list(table["cache.block_size_tokens"]) == [8, 8, 16, 16]
    assert list(table["config_key"]) == keys
    assert list(table["num_requests"]) == [12, 12, 12, 12]  # the base's num_requests
    assert {
        "token_states_pct_of_used",
        "request_time_per_output_token_seconds_p95",
        "time_to_first_token_seconds_p99",
    } <= set(table.columns)
    loaded = load_sweep(folder)
    pd.testing.assert_frame_equal(loaded.summary, table)
    assert loaded.results(keys[1]).config.cache.allocator == "paged"


def test_rerun_skips_finished_points(tmp_path, tiny, counted) -> None:
    run_sweep(tiny, tmp_path, progress=False)
    assert len(counted) == 4
    again = run_sweep(tiny, tmp_path, progress=False)
    assert len(counted) == 4  # nothing recomputed
    assert again.num_run == 0
    assert again.num_skipped == 4
    assert len(again.table) == 4


def test_points_of_another_kvsim_run_again(tmp_path, tiny, counted, caplog) -> None:
    """A point another kvsim finished (its recorded fingerprint differs, or none was recorded,
    as before fingerprints) is run again and replaced, with a warning; the others are reused."""
    run_sweep(tiny, tmp_path, progress=False)
    keys = [p.key for p in tiny.points()]
    points = tmp_path / "tiny" / "points"
    old = json.loads((points / keys[1] / "point.json").read_text())
    assert len(old["kvsim_build"]) == 16
    (points / keys[1] / "point.json").write_text(json.dumps({**old, "kvsim_build": "0" * 16}))
    own = json.loads((points / keys[3] / "point.json").read_text())
    del own["kvsim_build"], own["sha256"]  # (a kvsim before fingerprints recorded neither)
    (points / keys[3] / "point.json").write_text(json.dumps(own))
    counted.clear()
    with caplog.at_level(logging.WARNING, logger="kvsim"):
        again = run_sweep(tiny, tmp_path, progress=False)
    assert (again.num_run, again.num_skipped) == (2, 2)
    assert len(counted) == 2
    assert "2 point(s)" in caplog.text
    assert "another kvsim" in caplog.text
    for key in (keys[1], keys[3]):
        rerun = json.loads((points / key / "point.json").read_text())
        assert len(rerun["kvsim_build"]) == 16
        assert rerun["kvsim_build"] != "0" * 16
    assert len(again.table) == 4
    counted.clear()
    run_sweep(tiny, tmp_path, progress=False)
    assert not counted  # all four are this kvsim's now


def test_points_with_a_damaged_summary_run_again(tmp_path, tiny, counted, caplog) -> None:
    """A point whose summary.json is cut short (invalid JSON) or is not its point's summary (a
    JSON object without its ``config_key``) runs again and is replaced, with a warning that
    counts them apart from another kvsim's points; it neither stops the sweep nor shows as a
    row of blanks."""
    run_sweep(tiny, tmp_path, progress=False)
    keys = [p.key for p in tiny.points()]
    points = tmp_path / "tiny" / "points"
    whole = (points / keys[0] / "summary.json").read_text()
    (points / keys[0] / "summary.json").write_text(whole[: len(whole) // 2])
    (points / keys[2] / "summary.json").write_text('{"num_requests": 12}')
    counted.clear()
    with caplog.at_level(logging.WARNING, logger="kvsim"):
        again = run_sweep(tiny, tmp_path, progress=False)
    assert (again.num_run, again.num_skipped) == (2, 2)
    assert len(counted) == 2
    said = [r.getMessage() for r in caplog.records]
    assert [m for m in said if "damaged file" in m and "2 point(s)" in m]
    assert not [m for m in said if "another kvsim" in m]
    for key in (keys[0], keys[2]):
        assert json.loads((points / key / "summary.json").read_text())["config_key"] == key
    assert list(again.table["num_requests"]) == [12, 12, 12, 12]


def test_a_point_folder_replaced_by_a_file_or_its_point_json_damaged_runs_again(
    tmp_path, tiny, counted, caplog
) -> None:
    """A file where a point's folder belongs, and a point.json that is not JSON or not an
    object, are damaged points: they run again, counted in the warning, and every point is in
    the table (the file made the point vanish from it, the sweep exiting 0)."""
    run_sweep(tiny, tmp_path, progress=False)
    keys = [p.key for p in tiny.points()]
    points = tmp_path / "tiny" / "points"
    shutil.rmtree(points / keys[1])
    (points / keys[1]).write_text("file\n")
    (points / keys[2] / "point.json").write_text("garbage")
    (points / keys[3] / "point.json").write_text("[]")
    counted.clear()
    with caplog.at_level(logging.WARNING, logger="kvsim"):
        again = run_sweep(tiny, tmp_path, progress=False)
    assert (again.num_run, again.num_skipped) == (3, 1)
    said = [r.getMessage() for r in caplog.records]
    assert [m for m in said if "damaged file" in m and "3 point(s)" in m]
    assert not [m for m in said if "another kvsim" in m]
    assert (points / keys[1]).is_dir()
    assert list(again.table["num_requests"]) == [12, 12, 12, 12]


def test_a_results_folder_in_the_way_is_refused_before_anything_runs(
    tmp_path, tiny, counted
) -> None:
    """OUT/NAME, or its points folder, being a file was a raw OS error; OUT/NAME holding files
    of the user's or a kvsim run's got the sweep's results mixed in. Each is refused naming the
    path, nothing run; a folder that is a sweep's (a points folder) is resumed."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "tiny").write_text("x")
    with pytest.raises(ValueError, match=r"tiny' is a file, where the results need a folder"):
        run_sweep(tiny, tmp_path / "a", progress=False)
    (tmp_path / "b" / "tiny").mkdir(parents=True)
    (tmp_path / "b" / "tiny" / "points").write_text("x")
    with pytest.raises(ValueError, match=r"points' is a file"):
        run_sweep(tiny, tmp_path / "b", progress=False)
    (tmp_path / "c" / "tiny").mkdir(parents=True)
    (tmp_path / "c" / "tiny" / "mine.txt").write_text("x")
    with pytest.raises(ValueError, match=r"holds files of its own \(mine.txt\) and no sweep"):
        run_sweep(tiny, tmp_path / "c", progress=False)
    (tmp_path / "c" / "tiny" / ".hidden").write_text("x")
    (tmp_path / "c" / "tiny" / "mine.txt").unlink()
    run_sweep(tiny, tmp_path / "c", progress=False)  # (a hidden file only: an empty folder)
    assert len(counted) == 4
    counted.clear()
    (tmp_path / "c" / "tiny" / "notes.txt").write_text("x")  # (beside a sweep's points)
    assert run_sweep(tiny, tmp_path / "c", progress=False).num_skipped == 4
    assert not counted


class Killed(BaseException):
    """Stands in for SIGINT/SIGKILL: not an ``Exception``, so no point handler swallows it."""


def test_resume_after_simulated_kill(tmp_path, tiny, monkeypatch) -> None:
    real = point_mod.simulate
    calls: list[str] = []

    def dies_on_third(config, *args, **kwargs):
        calls.append(config.key())
        if len(calls) == 3:
            raise Killed  # the kill arrives while point 3 is running
        return real(config, *args, **kwargs)

    monkeypatch.setattr(point_mod, "simulate", dies_on_third)
    with pytest.raises(Killed):
        run_sweep(tiny, tmp_path, progress=False)
    folder = tmp_path / "tiny"
    keys = [p.key for p in tiny.points()]
    finished = sorted(p.name for p in (folder / "points").iterdir())
    assert finished == sorted(keys[:2])
    # a half-written point, as a kill during Results.save would leave it
    partial = folder / "points" / f".tmp-{keys[2]}-deadbeef"
    partial.mkdir()
    (partial / "requests.parquet").write_bytes(b"truncated")
    before = {k: (folder / "points" / k / "summary.json").stat().st_mtime_ns for k in keys[:2]}

    calls.clear()
    report = run_sweep(tiny, tmp_path, progress=False)
    assert calls == keys[2:]  # only the two unfinished points ran
    assert report.num_skipped == 2
    assert report.num_run == 2
    assert not partial.exists()
    after = {k: (folder / "points" / k / "summary.json").stat().st_mtime_ns for k in keys[:2]}
    assert after == before  # finished points untouched
    monkeypatch.undo()
    fresh = run_sweep(tiny, tmp_path / "fresh", progress=False)
    pd.testing.assert_frame_equal(report.table, fresh.table)


def test_resume_after_real_sigkill(tmp_path, make_experiment) -> None:
    exp = make_experiment(grid={"cache.block_size_tokens": [4, 8, 16, 32]})
    path = tmp_path / "kill.toml"
    import tomli_w

    path.write_text(
        tomli_w.dumps({"name": exp.name, "base": exp.base, "grid": exp.grid, "zip": exp.zips})
    )
    env = {**os.environ, "PYTHONPATH": str(Path(point_mod.__file__).parents[1])}
    cmd = [
        sys.executable,
        "-m",
        "kvsim",
        "sweep",
        str(path),
        "--out",
        str(tmp_path / "out"),
        "--no-progress",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    points = tmp_path / "out" / "tiny" / "points"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if points.is_dir() and any(not p.name.startswith(".") for p in points.iterdir()):
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    report = run_sweep(exp, tmp_path / "out", progress=False)
    assert report.num_skipped >= 1
    assert report.num_skipped + report.num_run == 8
    fresh = run_sweep(exp, tmp_path / "fresh", progress=False)
    pd.testing.assert_frame_equal(report.table, fresh.table)


def test_local_pool_and_local_dask_give_identical_tables(tmp_path, tiny) -> None:
    serial = run_sweep(tiny, tmp_path / "serial", progress=False).table
    pool = run_sweep(tiny, tmp_path / "pool", jobs=2, progress=False).table
    dask = run_sweep(tiny, tmp_path / "dask", jobs=2, scheduler="local", progress=False).table
    pd.testing.assert_frame_equal(pool, serial)
    pd.testing.assert_frame_equal(dask, serial)


@pytest.mark.parametrize("jobs", [1, 2])
def test_failing_point_reported_others_finish(tmp_path, make_experiment, caplog, jobs) -> None:
    exp = make_experiment(
        grid={"cache.block_size_tokens": [8, 16]},
        zip=[
            {
                "label": ["ok", "missing trace"],
                "workload.lengths": ["fixed", "trace"],
                "workload.trace": [None, "/nonexistent/trace.csv"],
            }
        ],  # a valid config that fails inside the worker
    )
    # drop the None override of the "ok" column: the base has no trace
    points = exp.points()
    assert len(points) == 4
    with caplog.at_level(logging.ERROR, logger="kvsim.study.sweep"):
        report = run_sweep(exp, tmp_path, jobs=jobs, progress=False)
    assert report.num_run == 2  # fixed lengths, blocks of 8 and 16
    assert [f.index for f in report.failures] == [1, 3]
    runtime = report.failures[1]
    assert runtime.key == points[3].key
    assert "trace.csv" in runtime.error
    assert "workload.trace='/nonexistent/trace.csv'" in runtime.point
    assert "missing trace" in caplog.text
    assert "cache.block_size_tokens=16" in caplog.text
    stored = json.loads((tmp_path / "tiny" / "failures.json").read_text())
    assert [f["index"] for f in stored] == [1, 3]
    assert list(report.table["label"]) == ["ok", "ok"]


@pytest.mark.parametrize("jobs", [1, 2])
def test_one_invalid_point_fails_the_sweep_before_any_runs(
    tmp_path, make_experiment, counted, jobs
) -> None:
    # point 0 is valid, point 1 is not: point 0 used to run (and be written) before point 1
    # failed; now nothing runs and nothing is written
    exp = make_experiment(grid={"cache.block_size_tokens": [16, 0]}, zip=[])
    with pytest.raises(
        ValueError,
        match=r"^tiny: point 1 \(cache.block_size_tokens=0\) has an invalid config, so no "
        r"point was run: cache.block_size_tokens: .* 1, got 0",
    ):
        run_sweep(exp, tmp_path, jobs=jobs, progress=False)
    assert counted == []
    assert not (tmp_path / "tiny").exists()
    several = make_experiment(grid={"cache.block_size_tokens": [16, 0, 8, -1]}, zip=[])
    with pytest.raises(ValueError, match=r"2 of 4 points have an invalid config \(points 1, 3\)"):
        run_sweep(several, tmp_path, jobs=jobs, progress=False)
    assert counted == []


def test_validating_points_generates_no_workload(make_experiment, monkeypatch) -> None:
    # checking every point before the sweep must stay cheap: configs only, no requests drawn
    import kvsim.engine.intake

    def no_requests(*args, **kwargs):
        raise AssertionError("a workload was generated while validating points")

    monkeypatch.setattr(kvsim.engine.intake, "requests_for", no_requests)
    monkeypatch.setattr(point_mod, "simulate", no_requests)
    points = make_experiment(grid={"cache.block_size_tokens": [16, 0]}).points()
    assert [p.config is None for p in points] == [False, False, True, True]


def _cli_sweep(tmp_path, grid: str, *options: str):
    import typer

    from kvsim.cli.sweep import register

    app = typer.Typer()
    register(app)
    path = tmp_path / "e.toml"
    path.write_text(
        'name = "e"\n[base.workload]\nnum_requests = 3\n[base.cache]\nkv_cache_gib = 2.0\n' + grid
    )
    args = ["sweep", str(path), "--out", str(tmp_path), "--no-progress", *options]
    return CliRunner().invoke(app, args)


def test_a_connect_timeout_without_a_remote_scheduler_is_warned(tmp_path, caplog) -> None:
    # read only when the sweep connects to tcp://...: with local workers it did nothing, unsaid
    grid = '[grid]\n"cache.block_size_tokens" = [16]\n'
    with caplog.at_level(logging.WARNING, logger="kvsim.cli"):
        result = _cli_sweep(tmp_path, grid, "--connect-timeout", "7")
    assert result.exit_code == 0, result.output
    expected = "--connect-timeout 7 is read only with a remote --scheduler tcp://HOST:PORT"
    assert expected in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kvsim.cli"):
        assert _cli_sweep(tmp_path, grid).exit_code == 0
    assert "--connect-timeout" not in caplog.text


def test_quick_without_a_quick_table_says_it_runs_full_size(tmp_path, caplog) -> None:
    # it ran the points at full size into OUT/quick/e without a word
    grid = '[grid]\n"cache.block_size_tokens" = [16]\n'
    with caplog.at_level(logging.WARNING, logger="kvsim.cli"):
        result = _cli_sweep(tmp_path, grid, "--quick")
    assert result.exit_code == 0, result.output
    assert "e.toml has no [quick] table: --quick runs its points at full size" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kvsim.cli"):
        _cli_sweep(tmp_path, grid + '[quick]\nset = { "workload.num_requests" = 2 }\n', "--quick")
    assert "no [quick] table" not in caplog.text


def test_cli_sweep_reports_failure_and_exit_code(tmp_path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("input_len,output_len\n16,4\n32,4\n")
    # a missing trace is a valid config that fails when its point runs
    result = _cli_sweep(tmp_path, f'[grid]\n"workload.trace" = ["{trace}", "/nonexistent.csv"]\n')
    assert result.exit_code == 1, result.output
    assert "1 run, 0 resumed, 1 failed" in result.output
    assert "FAILED point 1 [workload.trace='/nonexistent.csv']" in result.output


def test_cli_sweep_invalid_point_exits_2_and_writes_nothing(tmp_path) -> None:
    result = _cli_sweep(tmp_path, '[grid]\n"cache.block_size_tokens" = [16, 0]\n')
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    assert "point 1 (cache.block_size_tokens=0)" in lines[0]
    assert "cache.block_size_tokens: " in lines[0]
    assert "Traceback" not in result.output
    assert not (tmp_path / "e").exists()


def test_every_point_missing_its_trace_fails_once_up_front(tmp_path, monkeypatch, counted):
    # make fleet-routing without the Mooncake trace printed the same error for each of its 5
    # points twice (logged as it failed, then listed): now one line, status 2, nothing written
    monkeypatch.setenv("KVSIM_DATA", str(tmp_path / "no-data"))
    grid = '[grid]\n"workload.preset" = ["mooncake_conversation"]\n'
    result = _cli_sweep(tmp_path, grid + '"cache.block_size_tokens" = [8, 16, 32]\n')
    assert result.exit_code == 2, result.output
    assert result.output.count("Could not find trace file 'mooncake_conversation.jsonl'") == 1
    assert result.output.startswith(
        "error: e: every point reads trace 'mooncake_conversation', so no point was run: "
    )
    assert counted == []
    assert not (tmp_path / "e").exists()
    # a workload that falls back to synthetic lengths without its trace runs (with a note)
    fallback = '[grid]\n"workload.preset" = ["sharegpt_paper"]\n'
    result = _cli_sweep(tmp_path, fallback + '"cache.block_size_tokens" = [8, 16]\n')
    assert result.exit_code == 0, result.output
    assert "2 run, 0 resumed, 0 failed" in result.output


def test_misspelt_grid_field_fails_up_front(tmp_path, make_experiment):
    bad = make_experiment(grid={"cache.block_size_tokns": [8, 16]})
    with pytest.raises(ValueError, match=r"no point has a valid config.*block_size_tokns"):
        run_sweep(bad, tmp_path, progress=False)
    assert not (tmp_path / "tiny").exists()


def test_quick_results_live_apart_from_full_ones(tmp_path, make_experiment):
    exp = make_experiment(quick={"set": {"workload.num_requests": 4}})
    full = run_sweep(exp, tmp_path, progress=False)
    quick = run_sweep(exp, tmp_path, quick=True, progress=False)
    assert full.folder == tmp_path / "tiny"
    assert quick.folder == tmp_path / "quick" / "tiny"
    # the full summary still describes 12-request points (4 points x 12 requests each)
    table = pd.read_parquet(tmp_path / "tiny" / "summary.parquet")
    assert (table["num_requests"] == 12).all()
    assert len(table) == 4


def test_a_quick_grid_axis_is_a_column_of_the_quick_summary(tmp_path, make_experiment):
    # [grid] block sizes 8, 16 x [quick] grid max_num_seqs 1, 2 x the 2 zipped allocators:
    # 8 points, each row told apart by its block size, max_num_seqs and label
    quick = {"set": {"workload.num_requests": 4}, "grid": {"scheduler.max_num_seqs": [1, 2]}}
    exp = make_experiment(quick=quick)
    run_sweep(exp, tmp_path, quick=True, progress=False)
    sweep = load_sweep(tmp_path / "quick" / "tiny")
    swept = ["label", "cache.block_size_tokens", "scheduler.max_num_seqs", "cache.allocator"]
    assert sweep.swept_fields == swept
    table = sweep.summary
    assert table["scheduler.max_num_seqs"].tolist() == [1, 1, 2, 2, 1, 1, 2, 2]
    assert len(table[swept].drop_duplicates()) == 8
    assert exp.swept_fields() == ["label", "cache.block_size_tokens", "cache.allocator"]


def _interrupt_after_one_point(tmp_path, monkeypatch, make_experiment) -> None:
    """Run the tiny sweep into ``tmp_path`` with Ctrl-C after its first point; the sweep's
    own ``outcomes`` is back in place after."""
    import kvsim.study.sweep as sweep_mod

    real = sweep_mod.outcomes

    def one_then_interrupt(*args, **kwargs):
        gen = real(*args, **kwargs)
        yield next(gen)
        raise KeyboardInterrupt

    monkeypatch.setattr(sweep_mod, "outcomes", one_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(make_experiment(), tmp_path, progress=False)
    monkeypatch.setattr(sweep_mod, "outcomes", real)


def test_interrupt_keeps_finished_points(tmp_path, monkeypatch, make_experiment):
    _interrupt_after_one_point(tmp_path, monkeypatch, make_experiment)
    table = pd.read_parquet(tmp_path / "tiny" / "summary.parquet")
    assert len(table) == 1  # the point finished before the interrupt is saved and summarised
    report = run_sweep(make_experiment(), tmp_path, progress=False)
    assert report.num_skipped == 1
    assert report.num_run == 3


def test_figures_of_a_sweep_cut_short_say_how_many_points_are_missing(
    tmp_path, monkeypatch, make_experiment, caplog
):
    from kvsim.study.figures import draw_figures

    _interrupt_after_one_point(tmp_path, monkeypatch, make_experiment)
    folder = tmp_path / "tiny"
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kvsim.study.figures"):
        draw_figures(folder)
    # the tiny experiment has 2 block sizes x 2 allocators = 4 points; 1 finished
    assert [r.getMessage() for r in caplog.records] == [
        f"{folder}: 3 of 4 points have no results (the sweep was interrupted, or they failed: "
        "failures.json); the figures show the 1 finished; run the sweep again to finish it"
    ]
    run_sweep(make_experiment(), tmp_path, progress=False)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kvsim.study.figures"):
        draw_figures(folder)
    # every point drawn; the lone point's memory figure, named by its label alone while it was
    # the only one of its label, is named apart now and the old PNG is said to be left over
    assert [r.getMessage() for r in caplog.records] == [
        f"{folder / 'figures'}: 1 PNG(s) this plot did not draw are left from earlier "
        "(memory_contiguous.png); delete them if they are not this sweep's"
    ]
