"""A sweep point that lacks a file a finished point writes (a table deleted, a snapshot lost) is
not finished: a rerun runs it again and writes it whole, instead of resuming it and leaving
``kvsim plot`` to fail on the missing file."""

from __future__ import annotations

import json
import logging

from kvsim.study.load import load_sweep
from kvsim.study.sweep import run_sweep


def test_points_missing_a_table_run_again(tmp_path, tiny, counted, caplog) -> None:
    run_sweep(tiny, tmp_path, progress=False)
    keys = [p.key for p in tiny.points()]
    points = tmp_path / "tiny" / "points"
    (points / keys[0] / "requests.parquet").unlink()
    (points / keys[3] / "memory.parquet").unlink()
    counted.clear()
    with caplog.at_level(logging.WARNING, logger="kvsim"):
        again = run_sweep(tiny, tmp_path, progress=False)
    # the two points with a table deleted run again, the other two of the 4 are resumed
    assert (again.num_run, again.num_skipped) == (2, 2)
    assert len(counted) == 2
    said = [r.getMessage() for r in caplog.records]
    assert [m for m in said if "lack a file" in m and "2 point(s)" in m]
    assert not [m for m in said if "another kvsim" in m or "damaged" in m]
    sweep = load_sweep(tmp_path / "tiny")
    assert len(sweep.summary) == 4
    for key in keys:  # what `kvsim plot` reads: every point loads whole again
        assert len(sweep.results(key).requests) == 12  # the tiny base's num_requests
    counted.clear()
    assert run_sweep(tiny, tmp_path, progress=False).num_skipped == 4
    assert not counted  # repaired: nothing runs a third time


def test_point_missing_its_snapshot_runs_again(tmp_path, make_experiment, counted) -> None:
    """A file only some points write (the memory-map snapshot) is checked too."""
    experiment = make_experiment(
        "snap", grid={"cache.block_size_tokens": [16]}, zip=[], snapshot_at_s=1.0
    )
    run_sweep(experiment, tmp_path, progress=False)
    (key,) = [p.key for p in experiment.points()]
    where = tmp_path / "snap" / "points" / key
    (where / "snapshot.parquet").unlink()  # (taken at 1 s of the 3 s the 12 requests arrive in)
    counted.clear()
    again = run_sweep(experiment, tmp_path, progress=False)
    assert (again.num_run, again.num_skipped) == (1, 0)  # the one point, run again
    assert len(counted) == 1
    assert load_sweep(tmp_path / "snap").snapshot(key) is not None


def test_points_whose_files_were_edited_or_cut_short_run_again(
    tmp_path, tiny, counted, caplog
) -> None:
    """A point's files are checked against the SHA-256 each had when the point wrote it: a
    summary.json edited into other valid numbers, a requests.parquet cut short and a config.json
    replaced were resumed, and the edited p99 shown (1 ms where the run measured more)."""
    run_sweep(tiny, tmp_path, progress=False)
    keys = [p.key for p in tiny.points()]
    points = tmp_path / "tiny" / "points"
    summary_path = points / keys[0] / "summary.json"
    summary = json.loads(summary_path.read_text())
    measured = summary["time_to_first_token_seconds_p99"]
    summary["time_to_first_token_seconds_p99"] = 0.001
    summary_path.write_text(json.dumps(summary))
    requests = points / keys[1] / "requests.parquet"
    requests.write_bytes(requests.read_bytes()[:200])
    (points / keys[2] / "config.json").write_text('{"x": 1}')
    counted.clear()
    with caplog.at_level(logging.WARNING, logger="kvsim"):
        again = run_sweep(tiny, tmp_path, progress=False)
    assert (again.num_run, again.num_skipped) == (3, 1)  # the 3 damaged of the 4
    said = [r.getMessage() for r in caplog.records]
    assert [m for m in said if "3 point(s)" in m and "damaged file" in m]
    table = load_sweep(tmp_path / "tiny").summary
    row = table[table["config_key"] == keys[0]]
    assert row["time_to_first_token_seconds_p99"].tolist() == [measured]  # rerun: the same run
    counted.clear()
    assert run_sweep(tiny, tmp_path, progress=False).num_skipped == 4  # repaired
