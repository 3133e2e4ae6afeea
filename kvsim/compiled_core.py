"""The aggregate core compiled by numba, where numba is installed (``pip install 'kvsim[fast]'``).

``kvsim.compiled_kernel`` is the aggregate core's loop over arrays; numba compiles it once per
machine (cached on disk, about 10 s) and an event then costs well under a microsecond. It covers
the runs the aggregate core models that need no preemption and no exact pass; on anything else
it stops and the Python core runs the same requests from the start, so the results never depend
on which one ran: the tables are identical bit for bit (``tests/test_compiled_core.py`` checks
that against the Python core, with the kernel compiled and as plain Python).

Auto mode (``simulate(..., compiled=None)``) takes only runs of at least ``AUTO_MIN_REQUESTS``
requests: importing numba and loading the cached kernel cost about 0.6 s of CPU, which the Python
core spends on about 20,000 requests (31 µs a request on the Azure conversation trace, measured).
"""

from __future__ import annotations

import importlib.util
import logging
import math
from array import array
from operator import attrgetter
from typing import Any

import numpy as np

from kvsim.aggregate_core import AggregateCore
from kvsim.recorder import MEMORY_COLUMNS
from kvsim.say_once import warn_once

logger = logging.getLogger(__name__)

AUTO_MIN_REQUESTS = 20_000
_PROMPT = attrgetter("prompt_tokens")
_OUTPUT = attrgetter("output_tokens")
_REQ_ID = attrgetter("req_id")
_STATE = attrgetter(
    "num_computed_tokens", "num_output_tokens", "num_preemptions", "num_cached_tokens"
)


def numba_available() -> bool:
    """Whether numba can be imported (without importing it)."""
    return importlib.util.find_spec("numba") is not None


def wanted(compiled: bool | None, num_requests: int) -> bool:
    """Whether to try the compiled core: ``compiled`` says so, or (``None``) numba is installed
    and the run has at least ``AUTO_MIN_REQUESTS`` requests. (``simulate`` refuses
    ``compiled=True`` without numba before anything runs.)"""
    if compiled is None:
        return num_requests >= AUTO_MIN_REQUESTS and numba_available()
    return compiled


def cost_coefficients(cost: Any) -> np.ndarray:
    """The step-cost model's coefficients in ``compiled_kernel``'s ``C_*`` order (float64[12];
    every one a float or an int below 2**53, so each converts exactly)."""
    return np.array(
        [
            cost.weight_bytes,
            cost.kv_read_bytes_per_token,
            cost.linear_flops_per_token,
            cost.attn_flops_per_pair,
            cost.bandwidth,
            cost.flops,
            cost.overhead_s,
            cost.per_seq_overhead_s,
            cost.hidden,
            cost.act_bytes,
            cost.link_bandwidth,
            cost.allreduce_latency_s,
        ],
        np.float64,
    )


def run_compiled(core: AggregateCore, python_kernel: bool = False, need_cache: bool = False) -> str:
    """Run ``core``'s requests in the compiled kernel and fill ``core.log``, ``core.recorder``
    and the allocator's counters as ``AggregateCore.run`` would.

    Once their numbers are read, the ``Request`` objects are let go (the list is emptied: a
    million of them are most of a run's memory), so a run the kernel gives up on midway needs
    fresh requests.

    Args:
        core: a fresh aggregate core (its requests untouched).
        python_kernel: run the kernel as plain Python (slow; the tests' check of the kernel
            itself).
        need_cache: decline (core untouched) where numba cannot cache the compiled kernel on
            disk (no writable cache directory): compiling it in every process (about 10 s)
            costs more than the Python core spends on the runs auto mode sends here.

    Returns:
        ``"done"``; ``"declined"`` with ``core`` untouched (not a fresh workload, or integer
        arrival times, which keep SimPy's int clock); ``"spent"``: the kernel stopped at what
        it does not model (a preemption, an exact pass) after the requests were let go.
    """
    requests = core.requests
    n = len(requests)
    arrival = core._arrival_times
    if not n or core.log.arrival_time_s.dtype.kind != "f":
        return "declined"
    try:
        kernel = _kernel(python_kernel)
    except ImportError as err:  # installed, but broken (e.g. built for another numpy)
        if not need_cache:
            raise ValueError(f"compiled=True: numba cannot be imported ({err})") from None
        warn_once(logger, "numba cannot be imported (%s): large runs use the Python core", err)
        return "declined"
    if need_cache and not python_kernel and not kernel.CACHED:
        warn_once(
            logger,
            "numba cannot cache the compiled core here (no writable cache directory; set "
            "NUMBA_CACHE_DIR): large runs use the Python core",
        )
        return "declined"
    if any(_STATE(r) != (0, 0, 0, 0) for r in requests):
        return "declined"  # a request with serving state: not a fresh workload
    prompt = np.fromiter(map(_PROMPT, requests), np.int64, n)
    output = np.fromiter(map(_OUTPUT, requests), np.int64, n)
    ids = np.fromiter(map(_REQ_ID, requests), np.int64, n)
    parents = [r.parent_id for r in requests]
    requests.clear()
    config, allocator, cost = core.config, core.allocator, core.cost
    args = config.engine_args
    first_scheduled = np.full(n, math.nan)
    first_token = np.full(n, math.nan)
    finish = np.full(n, math.nan)
    rows = np.empty((1024 + n + 3 * n // 4, len(MEMORY_COLUMNS)))  # ~1.7 events a request
    status, rows, num_rows, queries, _ = kernel.run_kernel(
        arrival,
        prompt,
        output,
        prompt + output - 1,
        allocator.block_size_tokens,
        args.max_num_batched_tokens,
        args.max_num_seqs,
        args.enable_chunked_prefill,
        args.scheduler_reserve_full_isl,
        args.enable_prefix_caching,
        allocator.num_free_blocks,
        config.record_memory,
        allocator.capacity_tokens,
        allocator.overhead_slots,
        allocator.watermark_blocks,
        cost_coefficients(cost),
        cost.tp,
        cost.pp,
        cost.num_layers,
        first_scheduled,
        first_token,
        finish,
        rows,
    )
    if status != kernel.OK:
        logger.debug("compiled core stopped (status %d): the Python core runs", status)
        return "spent"
    _fill_recorder(core, rows[:num_rows])
    del rows
    core.log.add_columns(
        ids,
        prompt,
        output,
        first_scheduled,
        first_token,
        finish,
        np.array([0 if p is None else p for p in parents], np.int64),
        np.array([p is None for p in parents], np.bool_),
    )
    allocator.prefix_cache_queries = int(queries)
    if args.enable_prefix_caching:
        allocator.pool.num_evictions = 0  # no block ever kept a key: nothing was evicted
    if core.on_finish is not None:
        core.on_finish(n)
    return "done"


def _fill_recorder(core: AggregateCore, rows: np.ndarray) -> None:
    """The kernel's rows (float64) as the recorder's typed columns."""
    recorder = core.recorder
    for i, name in enumerate(MEMORY_COLUMNS):
        column = recorder.columns[name]
        dtype = np.float64 if column.typecode == "d" else np.int64
        values = np.ascontiguousarray(rows[:, i], dtype)
        recorder.columns[name] = array(column.typecode, values.tobytes())
    # the Python core's clock is SimPy's int 0 until time first passes: rows at time 0 only
    # keep an int time column there (the recorder's rule), as here
    recorder._int_times = bool((rows[:, 0] == 0.0).all())


def _kernel(python_kernel: bool) -> Any:
    """``compiled_kernel``, compiled by numba (cached), or as plain Python."""
    if python_kernel:
        from kvsim import compiled_kernel

        return _plain(compiled_kernel)
    return _compiled_module()


def _compiled_module() -> Any:
    """``compiled_kernel`` with numba imported first, so its functions are compiled."""
    importlib.import_module("numba")
    return importlib.import_module("kvsim.compiled_kernel")


def _plain(kernel: Any) -> Any:
    """The kernel as plain Python, helpers included: where numba is installed, each compiled
    function's ``py_func`` with the module's globals rebound to the others' ``py_func``."""
    import types

    names = [k for k, v in vars(kernel).items() if hasattr(v, "py_func")]
    namespace = dict(vars(kernel))
    for name in names:
        func = namespace[name].py_func
        namespace[name] = types.FunctionType(func.__code__, namespace, name, func.__defaults__)
    return types.SimpleNamespace(
        OK=kernel.OK, CACHED=kernel.CACHED, run_kernel=namespace["run_kernel"]
    )
