"""``pool_map``: forked workers from a driver without other Python threads, spawned ones
otherwise, the same results in call order either way, and every call run once."""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
from pathlib import Path

import pytest

from kvsim.base.workers import _start_context, pool_map
from tests.hostile.test_processes import _as_from_a_shell


def square_with_pid(x: int, driver_pid: int, mark: str) -> tuple[int, int]:
    """``x * x`` and the pid that ran it; the driver's calls wait (up to 60 s) until a worker
    has run one, so that a worker always runs some (the driver takes back what none started)."""
    import time
    from pathlib import Path

    if os.getpid() != driver_pid:
        Path(mark).touch()
    deadline = time.monotonic() + 60
    while not Path(mark).exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return x * x, os.getpid()


def _run(jobs: int, folder: Path) -> dict[int, tuple[int, int]]:
    mark = folder / f"worker-ran-{jobs}-{len(list(folder.iterdir()))}"
    calls = [(i, (i, os.getpid(), str(mark))) for i in range(12)]
    return dict(pool_map(square_with_pid, calls, jobs))


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this platform"
)
def test_fork_only_without_other_threads(tmp_path) -> None:
    alone = threading.active_count() == 1  # (a test runner may hold threads of its own)
    assert (_start_context().get_start_method() == "fork") == alone
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        assert _start_context().get_start_method() == "spawn"
        spawned = _run(3, tmp_path)
    finally:
        stop.set()
        other.join()
    forked = _run(3, tmp_path)
    for results in (spawned, forked):
        assert sorted(results) == list(range(12))  # every call once
        assert all(square == i * i for i, (square, _) in results.items())
        assert len({pid for _, pid in results.values()}) >= 2  # the driver and a worker ran


# Run in a fresh interpreter: the test runner's worker has threads of its own, and a SIGINT sent
# to its process while the main thread holds it is delivered to one of them at once.
CTRL_C_WHILE_A_WORKER_STARTS = """
import multiprocessing, os, signal, sys
from kvsim.base.workers import _sigint_held

def report_mask(queue):
    queue.put(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))

if __name__ == "__main__":
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    try:
        with _sigint_held():
            child = ctx.Process(target=report_mask, args=(queue,))
            child.start()
            os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C while the worker starts
            print("held", flush=True)  # reached only if the Ctrl-C waited
        print("lost", flush=True)
    except KeyboardInterrupt:
        print("raised", flush=True)
    child.join(10)
    print("worker blocked" if queue.get(timeout=300) else "worker exposed", flush=True)
"""


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this platform"
)
def test_a_ctrl_c_while_workers_start_reaches_the_driver_afterwards(tmp_path) -> None:
    # SIGINT is held (blocked), not ignored, while a submit may start workers: one sent in that
    # window must raise in the driver once it is over, and a worker started in it never sees it
    import subprocess
    import sys
    from pathlib import Path

    script = tmp_path / "ctrl_c.py"
    script.write_text(CTRL_C_WHILE_A_WORKER_STARTS)
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"},
        preexec_fn=_as_from_a_shell,
    )
    assert done.stdout.split() == ["held", "raised", "worker", "blocked"], done.stderr


def _gone(pid: int) -> bool:
    """The process has exited (a zombie or reaped)."""
    from pathlib import Path

    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return True


def record_pid_or_wait(folder: str, driver_pid: int, fail: bool) -> bool:
    """In a worker: record this worker's pid. In the driver: wait (up to 20 s) for that worker
    to exit, then report whether it did (or raise, with ``fail``)."""
    import os
    import time
    from pathlib import Path

    mark = Path(folder) / "worker.pid"
    if os.getpid() != driver_pid:
        mark.write_text(str(os.getpid()))
        return False
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if mark.exists() and mark.read_text() and _gone(int(mark.read_text())):
            if fail:
                raise RuntimeError("the driver's last call failed")
            return True
        time.sleep(0.01)
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_worker_exits_while_the_driver_runs_the_last_call(tmp_path) -> None:
    # two calls, two jobs: the worker takes the first, the driver the last; once every call is
    # handed out the pool lets its worker go, without waiting for the driver's call to end
    calls = [(i, (str(tmp_path), os.getpid(), False)) for i in range(2)]
    results = dict(pool_map(record_pid_or_wait, calls, 2))
    assert results == {0: False, 1: True}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_failure_in_the_driver_after_the_worker_left_leaves_no_process(tmp_path) -> None:
    calls = [(i, (str(tmp_path), os.getpid(), True)) for i in range(2)]
    with pytest.raises(RuntimeError, match="last call failed"):
        dict(pool_map(record_pid_or_wait, calls, 2))
    worker = int((tmp_path / "worker.pid").read_text())
    assert _gone(worker)
    assert not multiprocessing.active_children()


def slow_in_a_worker(x: int, driver_pid: int) -> tuple[int, bool]:
    """``x`` and whether the driver ran it; a worker takes 0.3 s a call."""
    import time

    in_driver = os.getpid() == driver_pid
    if not in_driver:
        time.sleep(0.3)
    return x, in_driver


def test_the_driver_takes_back_calls_no_worker_started() -> None:
    # with its own calls done, the driver runs every call the worker has not started instead
    # of waiting, those already sent to it included: the worker keeps only the one it runs
    # (without taking back it ran six; with cancelled futures, three)
    calls = [(i, (i, os.getpid())) for i in range(12)]
    results = dict(pool_map(slow_in_a_worker, calls, 2))
    assert sorted(results) == list(range(12))  # every call once
    assert all(x == i for i, (x, _) in results.items())
    assert sum(not in_driver for _, in_driver in results.values()) <= 1


def frozen_objects(x: int, driver_pid: int) -> tuple[int, bool]:
    import gc

    return gc.get_freeze_count(), os.getpid() == driver_pid


def test_the_drivers_objects_are_frozen_out_of_the_collector_while_the_pool_runs() -> None:
    import gc

    assert gc.get_freeze_count() == 0
    calls = [(i, (i, os.getpid())) for i in range(6)]
    results = dict(pool_map(frozen_objects, calls, 2))
    in_driver = [count for count, driver in results.values() if driver]
    assert in_driver
    assert all(count > 0 for count in in_driver)
    assert gc.get_freeze_count() == 0  # undone when the pool closes


def test_objects_the_caller_froze_stay_frozen() -> None:
    import gc

    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        calls = [(i, (i, os.getpid())) for i in range(3)]
        dict(pool_map(frozen_objects, calls, 2))
        assert gc.get_freeze_count() >= frozen
    finally:
        gc.unfreeze()


def test_two_pools_side_by_side_keep_the_freeze_until_the_last_closes() -> None:
    import gc

    assert gc.get_freeze_count() == 0
    first = pool_map(frozen_objects, [(i, (i, os.getpid())) for i in range(3)], 2)
    second = pool_map(frozen_objects, [(i, (i, os.getpid())) for i in range(3)], 2)
    next(first)
    next(second)
    first.close()
    assert gc.get_freeze_count() > 0  # the second pool still runs
    second.close()
    assert gc.get_freeze_count() == 0


def test_no_more_processes_start_than_there_are_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    # -j 400 over 3 calls: the driver runs calls itself, so 3 calls need 2 workers, not 399
    from kvsim.base import workers

    sizes: list[int] = []

    class Recording(workers._Pool):
        def __init__(self, *args: object, **kwargs: object) -> None:
            sizes.append(int(kwargs["max_workers"]))  # type: ignore[call-overload]
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(workers, "_Pool", Recording)
    results = dict(pool_map(pow, [(i, (i, 2)) for i in range(3)], 400))
    assert results == {0: 0, 1: 1, 2: 4}
    assert sizes == [2]
    assert dict(pool_map(pow, [(5, (5, 2))], 400)) == {5: 25}  # one call: no pool at all
    assert sizes == [2]
