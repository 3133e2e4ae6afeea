"""``pool_map``: forked workers from a driver without other Python threads, spawned ones
otherwise, the same results in call order either way, and every call run once."""

from __future__ import annotations

import multiprocessing
import threading

import pytest

from kvsim.workers import _start_context, pool_map


def square_with_pid(x: int) -> tuple[int, int]:
    import os

    return x * x, os.getpid()


def _run(jobs: int) -> dict[int, tuple[int, int]]:
    calls = [(i, (i,)) for i in range(12)]
    return dict(pool_map(square_with_pid, calls, jobs))


@pytest.mark.skipif(
    "fork" not in multiprocessing.get_all_start_methods(), reason="no fork on this platform"
)
def test_fork_only_without_other_threads() -> None:
    alone = threading.active_count() == 1  # (a test runner may hold threads of its own)
    assert (_start_context().get_start_method() == "fork") == alone
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        assert _start_context().get_start_method() == "spawn"
        spawned = _run(3)
    finally:
        stop.set()
        other.join()
    forked = _run(3)
    for results in (spawned, forked):
        assert sorted(results) == list(range(12))  # every call once
        assert all(square == i * i for i, (square, _) in results.items())
        assert len({pid for _, pid in results.values()}) >= 2  # the driver and a worker ran


def test_a_ctrl_c_while_workers_start_reaches_the_driver_afterwards() -> None:
    # SIGINT is held (blocked), not ignored, while a submit may start workers: one sent in that
    # window must raise in the driver once it is over, and a worker started in it never sees it
    import signal

    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    children: list = []
    # Python's own Ctrl-C handler, unblocked, whatever the test runner's worker left
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        with pytest.raises(KeyboardInterrupt):
            _start_worker_and_press_ctrl_c(ctx, queue, children)
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    children[0].join(10)
    assert queue.get(timeout=10) is True  # the worker inherited the blocked SIGINT


def _start_worker_and_press_ctrl_c(ctx, queue, children: list) -> None:
    import os
    import signal

    from kvsim.workers import _sigint_held

    with _sigint_held():
        child = ctx.Process(target=_report_sigint_mask, args=(queue,))
        child.start()
        children.append(child)
        os.kill(os.getpid(), signal.SIGINT)  # a Ctrl-C while the worker starts
    pytest.fail("the held Ctrl-C was lost")


def _report_sigint_mask(queue) -> None:
    import signal

    queue.put(signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, []))
