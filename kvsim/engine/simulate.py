"""``simulate``: one run of a config, from its workload to its ``Results``."""

from __future__ import annotations

import logging
import operator
from collections.abc import Callable, Sequence
from typing import Any, SupportsFloat, SupportsIndex

from kvsim.config import SimConfig
from kvsim.config.memory import startup_capacity
from kvsim.engine.frames import FrameRecorder
from kvsim.engine.intake import prepare_requests
from kvsim.engine.loop import Engine
from kvsim.results import Results, build_results
from kvsim.results.offload import disk_arrays, tier_arrays
from kvsim.workload.request import Request, RequestSpec

logger = logging.getLogger(__name__)


def simulate(
    config: SimConfig,
    requests: Sequence[Request | RequestSpec] | None = None,
    on_finish: Callable[[int], None] | None = None,
    *,
    strict: bool = False,
    on_start: Callable[[int], None] | None = None,
    map_at_s: Sequence[SupportsFloat] = (),
    map_every_s: SupportsFloat | None = None,
    map_max_frames: SupportsIndex | None = None,
) -> Results:
    """Run one simulation.

    Args:
        config: the run (model, GPU, parallelism, cache, scheduler, workload, seed).
        requests: a ready workload (requests or ``RequestSpec``s; the run serves fresh copies,
            so one list can feed many runs); ``requests_for(config)`` if None.
        on_finish: progress callback, called with the number of requests finished per event.
        strict: a request that cannot run (longer than ``max_model_len`` or the KV pool) is an
            error instead of a counted, logged skip.
        on_start: called with the number of requests that will run, before the run (progress).
        map_at_s: simulated moments at which to capture the physical memory map.
        map_every_s: also capture it every this many simulated seconds.
        map_max_frames: keep at most this many of those periodic frames (``FrameRecorder``: the
            period doubles as the run goes on).

    Returns:
        ``Results`` with per-request records, the memory time series and a summary (the
        skipped requests are counted there as ``num_requests_rejected``).

    Raises:
        ValueError: ``strict`` and some request cannot run, or no request can.
        TypeError: ``map_max_frames`` is not an int, or a time is not a number.
    """
    refuse = bool(strict)
    moments_s = [float(t) for t in map_at_s]
    every_s = None if map_every_s is None else float(map_every_s)
    max_frames = None if map_max_frames is None else operator.index(map_max_frames)
    runnable, rejected = prepare_requests(config, requests, strict=refuse)
    if on_start is not None:
        on_start(len(runnable))
    frames = FrameRecorder(moments_s, every_s, max_frames) if moments_s or every_s else None
    del requests  # the run has its own copies: a caller that let go of its list frees it now
    import simpy  # (kvsim imports SimPy only to run)

    env = simpy.Environment()
    engine = Engine(env, config, runnable, on_finish, frames)
    del runnable  # each request is freed when it finishes (its row stays in engine.log)
    env.process(engine.engine_loop())
    env.run()
    logger.debug("simulated %d requests to t=%.1f s", engine.num_requests, env.now)
    results = build_results(
        config,
        engine.log.columns(),
        engine_memory_columns(engine),
        engine.num_preemptions,
        usable_capacity_tokens=engine.allocator.usable_capacity_tokens,
        num_steps=engine.num_steps_run,
    )
    results.summary.update(rejected.summary())
    results.summary.update(engine_counters(engine))
    keep_step_counts(results, engine)
    if frames is not None:
        for t in frames.pending:  # moments after the last finish: the pool is empty
            frames.capture(t, engine.allocator, {}, 0, [], 0)
        results.mapframes, results.frames = frames.frames()
    return results


def engine_memory_columns(engine: Engine) -> dict[str, Any]:
    """An engine's memory rows (``Recorder.arrays``), with a column set per offload tier and
    per hybrid KV cache group where it has them (one entry per row)."""
    columns = engine.recorder.arrays()
    if engine.offload is not None and engine.tier_samples:  # the CPU tier's blocks per row
        columns.update(tier_arrays(engine.tier_samples))
    if engine.disk_samples:  # a disk tier's blocks per row
        columns.update(disk_arrays(engine.disk_samples))
    if engine.group_recorder is not None:  # hybrid KV cache groups: a column set per group
        columns.update(engine.group_recorder.arrays())
    return columns


def keep_step_counts(results: Results, engine: Engine) -> None:
    """Hand ``results`` the counts an engine keeps a step or a copy, which its folder does not
    keep (``Results.iteration_tokens``, ``Results.offload_sizes``)."""
    results.iteration_tokens = engine.scheduler.iteration_tokens
    if engine.offload is not None:
        results.offload_sizes = engine.offload.size_counts()


def engine_counters(engine: Engine) -> dict[str, Any]:
    """An engine's counters past its requests and memory rows, in vLLM's names where vLLM has
    them: swap, prefix cache, hybrid groups, speculative decoding, KV offload, the GPU block
    count and the cost model's sources."""
    config = engine.config
    out: dict[str, Any] = {}
    if engine.swap is not None:  # [swap]
        out.update(engine.swap.summary(engine.swap_time_s))
    out.update(engine.allocator.prefix_cache_summary())
    if engine.group_recorder is not None:
        out.update(engine.group_recorder.summary(config.capacity_tokens))
        # a state group's page raises the block size past cache.block_size_tokens (the map)
        out["kv_cache_block_size_tokens"] = engine.group_recorder.allocator.block_size_tokens
    if engine.scheduler.spec is not None:  # vLLM's spec_decode_* counters
        out.update(engine.scheduler.spec.summary())
    if engine.offload is not None:  # vLLM's external prefix cache and kv offload counters
        out.update(engine.offload.summary(engine.env.now))
    num_blocks = engine.allocator.num_gpu_blocks
    if num_blocks is not None:  # vLLM logs "# GPU blocks" at startup (null block included)
        out["num_gpu_blocks"] = num_blocks
    capacity = startup_capacity(config)
    if capacity is not None:  # vLLM v1's startup line (its cache_config's names)
        out["kv_cache_size_tokens"], out["kv_cache_max_concurrency"] = capacity
    out["layout_factor"] = engine.cost.layout_factor
    out["layout_source"] = engine.cost.layout_source
    out["cost_source"] = engine.cost.cost_source
    return out
