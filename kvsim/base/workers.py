"""Worker processes for sweeps and plans: a local process pool whose workers die with their
driver, and a Dask client that gives up on an unreachable scheduler.

A ``kill -9`` of the driver leaves nobody to close a ``ProcessPoolExecutor``'s pipes, and its
spawned workers hold both ends of their call queue, so they would block forever (and with them
the ``multiprocessing`` resource tracker, which waits for every holder of its pipe). Each worker
therefore watches its parent: Linux's ``PR_SET_PDEATHSIG`` kills it the moment the driver dies,
and a daemon thread polling ``os.getppid()`` does the same everywhere within ``PARENT_POLL_S``.
Workers start with SIGINT ignored, so a Ctrl-C in the terminal reaches the driver only (one
"interrupted" line, no traceback per worker); the driver then terminates them.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import logging
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from kvsim.base.extras import has_extra, require

logger = logging.getLogger(__name__)

PARENT_POLL_S = 0.5  # how often a worker checks that its driver is alive, seconds
DASK_CONNECT_TIMEOUT_S = 5.0  # default wait for a remote Dask scheduler, seconds
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
T = TypeVar("T")
R = TypeVar("R")


def watch_parent(parent_pid: int, use_pdeathsig: bool = True) -> None:
    """Pool initializer (runs in each worker): exit as soon as the driver ``parent_pid`` is gone.

    Args:
        parent_pid: the driver's process id (the worker's parent when it starts).
        use_pdeathsig: also ask Linux to SIGKILL this worker when its parent dies (only safe when
            the driver's main thread started the worker: the signal follows the starting thread).
    """
    if use_pdeathsig and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the driver died before the signal was armed
        os._exit(1)
    threading.Thread(
        target=_poll_parent, args=(parent_pid,), name="kvsim-watch-driver", daemon=True
    ).start()


def _poll_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(1)  # reparented: the driver is gone, nobody will read our results
        time.sleep(PARENT_POLL_S)


@contextlib.contextmanager
def _sigint_held() -> Iterator[None]:
    """Hold SIGINT while workers may be started: they inherit the blocked mask, so a Ctrl-C
    (sent to the whole process group) is the driver's alone to handle; one that arrives
    meanwhile reaches the driver when the mask is restored. (Ignoring SIGINT instead, as before,
    lost a Ctrl-C pressed while a worker started.) Where threads cannot block signals, SIGINT is
    ignored for that time."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if hasattr(signal, "pthread_sigmask"):
        previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            yield
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous_mask)
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class WorkerDiedError(RuntimeError):
    """A worker process of ``pool_map`` died while calls were left (killed by a signal, by the
    out-of-memory killer, or crashed): not the caller's fault, nor a kvsim bug to report."""


_WORKER_DIED = (
    "a worker process died (killed by a signal or by the out-of-memory killer?); the points it "
    "had not finished are not saved, those that finished are: run the same command again to "
    "resume"
)


def _terminate(processes: dict[int, Any]) -> None:
    """Stop the workers now (their running tasks are lost; a resumable sweep reruns them)."""
    for process in list(processes.values()):
        with contextlib.suppress(Exception):
            process.terminate()


class _Pool(ProcessPoolExecutor):
    """A ``ProcessPoolExecutor`` that can let its workers go while their last calls run
    (``release``) and still be joined, or its workers terminated, afterwards.

    While it runs, the objects the driver holds are frozen out of the garbage collector
    (``gc.freeze``, undone by ``close``): a full collection in the driver or a forked worker
    would otherwise write to every old object's header and copy each page they share (one
    took 49 ms of the driver, against about 10 ms unforked, on ``block-size.toml``). With pools
    open side by side, the last to close unfreezes; where the caller had frozen objects itself,
    they stay frozen, and so do the driver's."""

    _open = 0  # pools open in this process (all of them freeze; the last to close thaws)
    _thaw = False  # whether the last to close unfreezes (nothing was frozen before the first)
    _lock = threading.Lock()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        with _Pool._lock:
            if _Pool._open == 0:
                _Pool._thaw = gc.get_freeze_count() == 0
            _Pool._open += 1
            gc.freeze()  # before the first submit forks

    def release(self) -> None:
        """No more calls will be submitted: each worker exits after its queued calls, while the
        driver goes on (without this, the workers' exit waited for the driver's last call and
        then cost ~5 ms of ``shutdown``). Idempotent."""
        if not hasattr(self, "_kept"):
            self._kept = (getattr(self, "_executor_manager_thread", None), self._workers())
            self.shutdown(wait=False)

    def _workers(self) -> dict[int, Any]:
        return dict(getattr(self, "_processes", None) or {})  # CPython's, 3.9-3.14

    def close(self, terminate: bool) -> None:
        """Terminate the workers first when ``terminate``; then wait for them to exit."""
        manager, processes = getattr(self, "_kept", (None, self._workers()))
        if terminate:
            _terminate(processes)
        self.shutdown(wait=True, cancel_futures=True)
        if manager is not None:
            manager.join()
        with _Pool._lock:
            _Pool._open -= 1
            if _Pool._open == 0 and _Pool._thaw:
                gc.unfreeze()


def _start_context() -> multiprocessing.context.BaseContext:
    """``fork`` where the platform has it and this process runs no other Python thread (a
    progress bar's monitor, a Dask client): workers then start with everything the driver
    imported, in milliseconds; ``spawn`` otherwise, since a fork copies locks other Python
    threads may hold. (Native pools, OpenBLAS's and Arrow's, reset themselves in a forked
    child.)"""
    if threading.active_count() == 1 and "fork" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def pool_map(
    fn: Callable[..., R], calls: list[tuple[T, tuple[Any, ...]]], jobs: int
) -> Iterator[tuple[T, R]]:
    """Run ``fn(*args)`` for every ``(tag, args)`` of ``calls``, ``jobs`` at a time, and yield
    ``(tag, result)`` as each finishes.

    The driver is one of the ``jobs``: it runs calls itself between harvesting the results of
    ``jobs - 1`` worker processes (forked from a driver without other threads, else spawned:
    ``_start_context``), so it works while they start (a spawned worker imports kvsim first)
    and no core idles behind a driver that only waits; with no calls of its own left, it takes
    back the calls no worker has started rather than wait for them. At most ``len(calls) - 1``
    workers start (``jobs`` above the number of calls would only fork idle processes). Workers
    exit when
    the driver dies and ignore SIGINT (see the module docstring). When the caller stops early
    (an exception, Ctrl-C, ``close()``), the workers are terminated.

    Raises:
        WorkerDiedError: a worker process died (its pool is broken; the other workers are stopped).
        Exception: whatever ``fn`` raised, in a worker or in the driver, re-raised here.
    """
    jobs = min(jobs, len(calls))  # one process per call at most
    if jobs <= 1:
        for tag, args in calls:
            yield tag, fn(*args)
        return
    context = _start_context()
    main_thread = threading.current_thread() is threading.main_thread()
    claims = context.Array("b", len(calls))  # 1: the call has started
    pool = _Pool(
        max_workers=jobs - 1,
        mp_context=context,
        initializer=_init_worker,
        initargs=(os.getpid(), main_thread, claims),
    )
    pending = list(reversed(list(enumerate(calls))))  # pop() takes them in order
    in_flight: dict[Future[Any], tuple[int, tuple[T, tuple[Any, ...]]]] = {}
    # calls queued behind each busy worker, so that it does not run dry while the driver runs a
    # call itself (the driver hands out work only between its own calls, and calls can differ
    # 20x in length). FITTED on experiments/block-size.toml's 2-worker speed-up (medians of 5):
    # 1.39x at 1 per worker, 1.66 at 2, 1.71 at 3, 1.80 at 4, 1.83 at 5, 1.82-1.86 at 6, 1.71 at
    # 8 (past the depth, near the end, a worker gets one call at a time)
    depth = 6 * (jobs - 1)

    def top_up() -> None:
        with _sigint_held():  # a submit may spawn a worker, which inherits the mask
            # near the end no call waits behind a busy worker: the driver takes the last ones
            while pending and len(in_flight) < (depth if len(pending) > depth else jobs - 1):
                index, call = pending.pop()
                in_flight[pool.submit(_run_claimed, index, fn, call[1])] = (index, call)

    finished = False
    try:
        top_up()
        while pending or in_flight:
            for future in [f for f in in_flight if f.done()]:
                yield in_flight.pop(future)[1][0], future.result()
            top_up()
            own = pending.pop()[1] if pending else None
            if not pending:
                pool.release()  # every call is handed out: workers exit after their last
            if own is not None:
                yield own[0], fn(*own[1])
                continue
            if not in_flight:
                break
            taken = _take_back(in_flight, claims)
            if taken is not None:
                yield taken[0], fn(*taken[1])
                continue
            future = next(as_completed(in_flight))
            yield in_flight.pop(future)[1][0], future.result()
        finished = True
    except BrokenProcessPool as err:  # from a result or from a submit after the death
        raise WorkerDiedError(_WORKER_DIED) from err
    finally:
        pool.close(terminate=not finished)


class _TakenBack:
    """What a worker returns for a call the driver took back (and ran) first."""


_claims: Any = None  # in a worker: the pool's claim flags, one byte per call (``_init_worker``)


def _init_worker(parent_pid: int, use_pdeathsig: bool, claims: Any) -> None:
    """Pool initializer: keep the claim flags (shared memory, inherited at start), then
    ``watch_parent``."""
    global _claims
    _claims = claims
    watch_parent(parent_pid, use_pdeathsig)


def _claim(claims: Any, index: int) -> bool:
    """Mark call ``index`` as started; ``False`` when the driver or a worker already has."""
    with claims.get_lock():
        if claims[index]:
            return False
        claims[index] = 1
        return True


def _run_claimed(index: int, fn: Callable[..., R], args: tuple[Any, ...]) -> R | _TakenBack:
    """In a worker: ``fn(*args)``, unless the driver took call ``index`` back."""
    return fn(*args) if _claim(_claims, index) else _TakenBack()


def _take_back(
    in_flight: dict[Future[Any], tuple[int, tuple[T, tuple[Any, ...]]]], claims: Any
) -> tuple[T, tuple[Any, ...]] | None:
    """The last submitted call that no worker has started, claimed for the driver and removed
    from ``in_flight`` (a worker that reaches it later skips it), or ``None`` when every call in
    flight has started. Claim flags in shared memory, not ``Future.cancel``, so that the calls
    already sent to a worker can be taken back too, and no cancelled future is left in the
    executor (whose teardown of a broken pool fails on one before Python 3.12: gh-107219)."""
    for future in reversed(list(in_flight)):
        index, call = in_flight[future]
        if _claim(claims, index):
            del in_flight[future]
            return call
    return None


def check_scheduler(scheduler: str, connect_timeout_s: float) -> None:
    """Refuse a ``--scheduler`` that cannot be a Dask scheduler before a sweep writes anything:
    ``"local"``, or ``[PROTOCOL://]HOST:PORT`` with a port in 1..65535; a ``tcp://`` address
    must also accept a connection within ``connect_timeout_s`` (``_probe_tcp``).

    Raises:
        MissingExtraError: Dask (the ``sweep`` extra) is not installed.
        ValueError: naming the address and what was expected.
    """
    if not has_extra("sweep"):
        require("sweep", f"--scheduler {scheduler} (drop it to use a local process pool)")
    if scheduler == "local":
        return
    host, sep, port = scheduler.split("://", 1)[-1].rstrip("/").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(
            f"--scheduler: {scheduler!r} is not a Dask scheduler address such as "
            "tcp://HOST:PORT or 'local'"
        )
    if not connect_timeout_s > 0:
        raise ValueError(f"--connect-timeout: must be > 0 seconds, got {connect_timeout_s!r}")
    _probe_tcp(scheduler, connect_timeout_s, _unreachable(scheduler, connect_timeout_s))


def _unreachable(scheduler: str, connect_timeout_s: float) -> str:
    return (
        f"--scheduler: no Dask scheduler answered at {scheduler} within {connect_timeout_s:g} s"
        " ({}); start one (`dask scheduler`), fix the address, raise --connect-timeout, or drop "
        "--scheduler for a local process pool"
    )


def dask_client(scheduler: str, jobs: int, connect_timeout_s: float) -> tuple[Any, Any]:
    """A ``dask.distributed.Client`` for ``scheduler`` (``"local"``: a local cluster of ``jobs``
    single-threaded worker processes) and the cluster it started (``None`` for a remote one).

    Args:
        scheduler: ``"local"`` or a scheduler address such as ``tcp://HOST:PORT``.
        jobs: workers of a local cluster.
        connect_timeout_s: seconds to wait for a remote scheduler to answer.

    Raises:
        MissingExtraError: Dask (the ``sweep`` extra) is not installed.
        ValueError: the address is malformed, or nothing answered at it within
            ``connect_timeout_s`` (the message names the address and the wait).
    """
    dd: Any = require(  # untyped: keep mypy quiet
        "sweep", f"--scheduler {scheduler} (drop it to use a local process pool)"
    )
    if scheduler == "local":
        cluster = dd.LocalCluster(
            n_workers=jobs, threads_per_worker=1, processes=True, dashboard_address=None
        )
        return dd.Client(cluster), cluster
    if not connect_timeout_s > 0:
        raise ValueError(f"--connect-timeout: must be > 0 seconds, got {connect_timeout_s!r}")
    unreachable = _unreachable(scheduler, connect_timeout_s)
    _probe_tcp(scheduler, connect_timeout_s, unreachable)
    try:
        return dd.Client(scheduler, timeout=connect_timeout_s), None
    except (OSError, TimeoutError) as err:
        gc.collect()  # close the half-built client now, not in a later __del__ (a deadlock)
        raise ValueError(unreachable.format(type(err).__name__)) from None
    except (ValueError, TypeError) as err:
        gc.collect()
        raise ValueError(
            f"--scheduler: {scheduler!r} is not a Dask scheduler address such as "
            f"tcp://HOST:PORT or 'local' ({err})"
        ) from None
    except Exception as err:  # something answered, but not Dask's protocol (a proxy, a web server)
        gc.collect()
        reason = " ".join(f"{type(err).__name__}: {err}".split())[:120]
        raise ValueError(
            f"--scheduler: what answers at {scheduler} is not a Dask scheduler ({reason})"
        ) from None


def _probe_tcp(scheduler: str, timeout_s: float, unreachable: str) -> None:
    """Fail fast, before Dask builds a client, when nothing listens at a ``tcp://`` address.

    Raises:
        ValueError: a malformed address, or no connection within ``timeout_s``.
    """
    if not scheduler.startswith("tcp://"):
        return
    host, sep, port_text = scheduler.removeprefix("tcp://").rstrip("/").rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(
            f"--scheduler: {scheduler!r} is not a Dask scheduler address such as tcp://HOST:PORT"
        )
    try:
        with socket.create_connection((host.strip("[]"), int(port_text)), timeout=timeout_s):
            pass
    except OSError as err:
        raise ValueError(unreachable.format(err.strerror or type(err).__name__)) from None


def dask_map(
    fn: Callable[..., R],
    calls: list[tuple[T, tuple[Any, ...], str]],
    scheduler: str,
    jobs: int,
    connect_timeout_s: float = DASK_CONNECT_TIMEOUT_S,
) -> Iterator[tuple[T, R]]:
    """Run ``fn(*args)`` for every ``(tag, args, task_name)`` of ``calls`` on a Dask cluster
    (``dask_client``) and yield ``(tag, result)`` as each finishes.

    A local cluster (``"local"``) starts at most one worker per call.

    Raises:
        ValueError: see ``dask_client``.
    """
    local_jobs = max(1, min(jobs, len(calls))) if scheduler == "local" else jobs
    client, cluster = dask_client(scheduler, local_jobs, connect_timeout_s)
    dd: Any = importlib.import_module("dask.distributed")
    try:
        futures = [client.submit(fn, *args, key=name, pure=False) for _, args, name in calls]
        by_key = {f.key: tag for f, (tag, _, _) in zip(futures, calls, strict=True)}
        for future in dd.as_completed(futures):
            yield by_key[future.key], future.result()
    finally:
        client.close()
        if cluster is not None:
            cluster.close()
