"""A test without its trace skips in one short line: the missing file and ``KVSIM_DATA``.

A new user's `make test` without the traces printed the catalogue's whole error (where every
trace comes from) as the skip reason of each of a dozen tests in ``-rs``'s summary.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import missing_trace

ROOT = Path(__file__).resolve().parents[2]
TRACE_TESTS = "tests/workload/test_workload_traces.py"


def test_a_missing_trace_is_named_in_one_short_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nope = tmp_path / "nope"
    monkeypatch.setenv("KVSIM_DATA", str(nope))
    assert missing_trace() == f"no trace folder (KVSIM_DATA={nope}; `kvsim data fetch`)"
    assert missing_trace("sharegpt_opt") == (
        f"no trace file sharegpt_opt_firstturn_lengths.csv (KVSIM_DATA={nope}; `kvsim data fetch`)"
    )
    tmp_path.joinpath("empty").mkdir()
    monkeypatch.setenv("KVSIM_DATA", str(tmp_path / "empty"))
    assert missing_trace() is None  # the folder is there
    assert "sharegpt_opt_firstturn_lengths.csv" in str(missing_trace("sharegpt_opt"))


def test_the_trace_tests_skip_on_one_summary_line(tmp_path: Path) -> None:
    env = {**os.environ, "KVSIM_DATA": str(tmp_path / "nope")}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", TRACE_TESTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    skipped = [line for line in out.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1, skipped  # every test of the file folded into one line
    assert skipped[0].endswith(
        f"no trace folder (KVSIM_DATA={tmp_path / 'nope'}; `kvsim data fetch`)"
    )
