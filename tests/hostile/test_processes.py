"""Faults through real processes: ``kill -9`` of a ``kvsim sweep -j 2`` driver leaves no worker
(and, with spawned workers, no resource tracker) behind; random kills and reruns finish every
point exactly once; Ctrl-C while the pool starts prints no traceback; a few user errors through
a real ``python -m kvsim``.

Processes are found through ``/proc`` (Linux): the driver's children are recorded while it runs,
since a killed driver's children are reparented. A child that has exited but not been reaped (a
zombie, state ``Z``) counts as gone.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import kvsim
from kvsim.study.experiment import load_experiment

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")

ROOT = Path(kvsim.__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _experiment(path: Path, num_requests: int, block_sizes: list[int]) -> Path:
    # vllm-v0 runs in the general engine: the aggregate core (vllm-v1) would finish these points
    # before the signals and kills land
    path.write_text(
        f"""name = "slow"
[base.scheduler]
engine = "vllm-v0"
[base.cache]
kv_cache_gib = 2.0
[base.workload]
lengths = "fixed"
fixed_prompt_tokens = 64
fixed_output_tokens = 32
num_requests = {num_requests}
rate_per_s = 40.0
[grid]
"cache.block_size_tokens" = {block_sizes}
"""
    )
    return path


def _state_and_parent(pid: int) -> tuple[str, int] | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def _children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            info = _state_and_parent(int(entry.name))
            if info is not None and info[1] == pid and info[0] != "Z":
                found.add(int(entry.name))
    return found


def _alive(pids: set[int]) -> set[int]:
    return {p for p in pids if (info := _state_and_parent(p)) is not None and info[0] != "Z"}


def _as_from_a_shell() -> None:
    """In the child before it runs: SIGINT as a shell leaves it (default, unblocked), whatever
    the test runner's worker did with its own; Python then installs its Ctrl-C handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _sweep(exp: Path, out: Path, *extra: str, **popen: object) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "kvsim", "sweep", str(exp), "--out", str(out), "--no-progress"]
    return subprocess.Popen(
        [*cmd, *extra],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_as_from_a_shell,
        **popen,  # type: ignore[call-overload]
    )


def _watch(proc: subprocess.Popen[bytes], until: float, points: Path | None = None) -> set[int]:
    """The driver's children seen until ``until`` (monotonic s) or the first finished point."""
    seen: set[int] = set()
    while time.monotonic() < until and proc.poll() is None:
        seen |= _children(proc.pid)
        if (
            points is not None
            and points.is_dir()
            and any(not p.name.startswith(".") for p in points.iterdir())
        ):
            break
        time.sleep(0.02)
    return seen | _children(proc.pid)


def _assert_gone(pids: set[int], within_s: float = 5.0) -> None:
    deadline = time.monotonic() + within_s
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _alive(pids)
    for pid in left:  # do not leak them into the next test
        os.kill(pid, signal.SIGKILL)
    assert not left, f"orphans after the driver died: {left}"


def test_killed_driver_leaves_no_workers(tmp_path: Path) -> None:
    exp = _experiment(tmp_path / "slow.toml", 30_000, [1, 2, 4, 8, 16, 32])
    proc = _sweep(exp, tmp_path / "out", "-j", "2")
    seen = _watch(proc, time.monotonic() + 60, tmp_path / "out" / "slow" / "points")
    assert proc.poll() is None, "the sweep ended before the kill"
    # -j 2: the driver runs points itself beside one worker (forked: no resource tracker)
    assert len(seen) >= 1, f"expected a worker, saw {seen}"
    proc.kill()
    proc.wait()
    _assert_gone(seen)


@pytest.mark.full(seconds=85)
def test_random_kills_then_resume_finish_every_point_once(tmp_path: Path) -> None:
    # ~20 s of points: enough for ten kills that each find the sweep still running
    exp = _experiment(tmp_path / "kills.toml", 40_000, [1, 2, 4, 8, 16, 32, 64, 128])
    out = tmp_path / "out"
    rng = random.Random(12)
    landed = 0  # kills that found the sweep still running (a later one may find it done)
    for _ in range(20):
        proc = _sweep(exp, out, "-j", "2")
        seen = _watch(proc, time.monotonic() + rng.uniform(0.5, 1.5))
        landed += proc.poll() is None
        proc.kill()
        proc.wait()
        _assert_gone(seen)
        if landed == 10:  # the ten random kills
            break
    assert landed == 10, f"only {landed} kills found the sweep running"
    final = _sweep(exp, out, "-j", "2")
    _, stderr = final.communicate(timeout=1800)
    assert final.returncode == 0, stderr.decode()
    keys = {p.key for p in load_experiment(exp).points()}
    points = out / "slow" / "points"
    entries = sorted(p.name for p in points.iterdir())
    assert entries == sorted(keys), "each point exactly once, no partial folders left"
    table = pd.read_parquet(out / "slow" / "summary.parquet")
    assert sorted(table["config_key"]) == sorted(keys)


def test_ctrl_c_while_workers_start(tmp_path: Path) -> None:
    exp = _experiment(tmp_path / "slow.toml", 30_000, [1, 2, 4, 8])  # seconds a point
    proc = _sweep(exp, tmp_path / "out", "-j", "3", start_new_session=True)
    deadline = time.monotonic() + 60
    seen: set[int] = set()
    while time.monotonic() < deadline and len(seen) < 2 and proc.poll() is None:
        seen |= _children(proc.pid)  # two workers (-j 3, forked): the pool is starting
        time.sleep(0.005)
    time.sleep(0.1)  # the workers take their first points
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the whole group
    _, stderr = proc.communicate(timeout=600)
    text = stderr.decode()
    assert proc.returncode == 130, text
    assert "Traceback" not in text, text
    assert "interrupted" in text
    _assert_gone(seen)


def test_user_errors_through_a_real_process(tmp_path: Path) -> None:
    cfg = tmp_path / "cfg.toml"
    cfg.write_bytes(b'seed = 1\nname = "\xff"\n')
    cases = [
        (["run", str(cfg)], "cfg.toml line 2"),
        (["sweep"], "Missing argument"),
        (["run", "--set", "seed=1", "--set", "seed.x=2"], "seed.x"),
        (["run", "--set", "workload.num_requests=1000000000000"], "1,000,000"),
    ]
    for args, fragment in cases:
        done = subprocess.run(
            [sys.executable, "-m", "kvsim", *args],
            env=ENV,
            capture_output=True,
            cwd=tmp_path,
            timeout=600,
            check=False,
        )
        err = done.stderr.decode()
        assert done.returncode == 2, err
        assert "Traceback" not in err, err
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1, err
        assert lines[0].startswith("error:"), err
        assert fragment in lines[0], err


@pytest.mark.full(seconds=40)
def test_a_killed_worker_is_reported_as_such_and_a_rerun_resumes(tmp_path: Path) -> None:
    # what the out-of-memory killer does to a worker: one plain error line (not "internal
    # error ... please report it"), status 1, no worker left, and the rerun finishes the rest
    exp = _experiment(tmp_path / "slow.toml", 30_000, [1, 2, 4, 8, 16, 32])
    out = tmp_path / "out"
    proc = _sweep(exp, out, "-j", "2")
    seen = _watch(proc, time.monotonic() + 60, out / "slow" / "points")
    assert proc.poll() is None, "the sweep ended before the kill"
    workers = _alive(seen)
    assert workers, f"expected a worker, saw {seen}"
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=1800)
    text = stderr.decode()
    assert proc.returncode == 1, text
    assert "Traceback" not in text, text
    assert "internal error" not in text, text
    assert "worker process died" in text, text
    assert "run the same command again to resume" in text, text
    _assert_gone(seen)
    final = _sweep(exp, out)
    _, stderr = final.communicate(timeout=1800)
    assert final.returncode == 0, stderr.decode()
    keys = {p.key for p in load_experiment(exp).points()}
    assert sorted(p.name for p in (out / "slow" / "points").iterdir()) == sorted(keys)
