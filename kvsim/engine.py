"""SimPy wiring: an arrival source and one engine loop, built from a ``SimConfig``; ``simulate``.

The general engine: the engine loop plans a step with the profile's scheduler, asks the cost
model for its duration, records where the KV slots went and yields one timeout. Stable decode
stretches are fast-forwarded: one event covers every step up to the next finish, the next failed
growth, or (when nobody waits) the step during which the next request arrives. No process or
event per token.
"""

from __future__ import annotations

import logging
import operator
from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any, SupportsFloat, SupportsIndex

import numpy as np

from kvsim.allocators import Allocator, allocator_from_knobs
from kvsim.config import SimConfig
from kvsim.cost import StepCostModel
from kvsim.intake import Rejected, fan_out, requests_for, split_runnable
from kvsim.poolmap import FrameRecorder, has_map
from kvsim.recorder import MemoryRecorder, queue_head
from kvsim.request import Request, RequestSpec, fresh_requests
from kvsim.request_log import RequestLog
from kvsim.results import Results, build_results
from kvsim.scheduler import StepPlan, make_scheduler
from kvsim.span import event_slots, last_step_tokens
from kvsim.swap import SwapSpace
from kvsim.timing import MAX_SPAN_STEPS, Timing, span_timing, steps_before, waiting_per_step

if TYPE_CHECKING:
    import simpy  # (kvsim imports SimPy only to run)

logger = logging.getLogger(__name__)


def allocator_from_config(config: SimConfig) -> Allocator:
    """Build the configured allocator on the config's KV pool (one GPU's share)."""
    args = config.engine_args
    knobs = {
        "capacity_tokens": config.capacity_tokens,
        "bytes_per_token": config.bytes_per_token,
        "block_size_tokens": config.cache.block_size_tokens,
        "watermark": args.watermark,
        "reservation": config.cache.reservation,
        "enable_prefix_caching": args.enable_prefix_caching,
        "share_sequence_groups": config.cache.share_sequence_groups,
        "reserve_null_block": args.reserve_null_block,
        "max_model_len": args.max_model_len,
        "full_context_tokens": config.model.max_position_embeddings,
    }
    return allocator_from_knobs(config.cache.allocator, **knobs)  # each reads its own


def swap_space_from_config(config: SimConfig, allocator: Allocator) -> SwapSpace | None:
    """v0's CPU swap pool for a paged allocator (``None`` under v1 or for other allocators)."""
    if config.engine_args.engine != "vllm-v0" or not allocator.paged:
        return None
    return SwapSpace.from_gib(
        config.engine_args.swap_space_gib,
        block_size_tokens=config.cache.block_size_tokens,
        bytes_per_token=config.bytes_per_token,
    )


def cost_model_from_config(config: SimConfig, paged: bool) -> StepCostModel:
    """The step-cost model of the run's model, GPUs, parallelism and KV layout."""
    return StepCostModel(
        config.model,
        config.gpu,
        config.cost,
        paged=paged,
        block_size_tokens=config.cache.block_size_tokens,
        parallel=config.parallel,
        kv_cache_dtype=config.cache.kv_cache_dtype,
    )


class Engine:
    """The simulated serving engine: owns the scheduler, cost model and recorders.

    A finished request's row goes to ``log`` and the engine lets go of the request (the
    caller's list is not kept: a caller that drops its own reference frees each request when
    it finishes).

    Args:
        env: the SimPy environment.
        config: the run's config.
        requests: the workload, sorted by ``arrival_time_s``, every one runnable.
        on_finish: called with the number of requests finished by each event (progress bars).
        frames: captures memory-map frames during the run (``kvsim.poolmap``), or ``None``.
    """

    def __init__(
        self,
        env: simpy.Environment,
        config: SimConfig,
        requests: list[Request],
        on_finish: Callable[[int], None] | None = None,
        frames: FrameRecorder | None = None,
    ) -> None:
        self.env = env
        self.config = config
        self.allocator = allocator_from_config(config)
        self.allocator.see_workload(requests)
        self.swap = swap_space_from_config(config, self.allocator)
        # the memory map reads block ids: no anonymous bulk blocks then
        self.scheduler = make_scheduler(
            self.allocator, config.engine_args, self.swap, pooled=frames is None
        )
        self.cost = cost_model_from_config(config, self.allocator.paged)
        self.swap_time_s = 0.0
        self.recorder = MemoryRecorder(config.capacity_tokens)
        self.on_finish = on_finish
        self.frames = frames
        if frames is not None and not has_map(self.allocator):
            raise ValueError(
                f"memory-map frames need a paged or slab allocator, not {config.cache.allocator!r}"
            )
        self.max_span_steps = 1 if config.memory_resolution == "step" else MAX_SPAN_STEPS
        self.num_requests = len(requests)
        self.num_arrived = 0
        self.num_finished = 0
        self._wake: simpy.Event = env.event()
        arrivals = np.array([r.arrival_time_s for r in requests])  # int64 when all are ints
        self.log = RequestLog(arrivals)
        self._arrival_list: list[float] = arrivals.astype(np.float64, copy=False).tolist()
        self._to_arrive = deque(requests)
        self._row: dict[Request, int] = {}  # arrived, unfinished request -> its workload row

    def arrival_source(self) -> Generator[simpy.Event, Any, None]:
        """SimPy process: releases each request into the waiting queue at its arrival time."""
        for row in range(self.num_requests):
            req = self._to_arrive.popleft()
            delay = req.arrival_time_s - self.env.now
            if delay > 0:
                yield self.env.timeout(delay)
            self._row[req] = row
            self.scheduler.add_request(req)
            self.num_arrived += 1
            if not self._wake.triggered:
                self._wake.succeed()

    def engine_loop(self) -> Generator[simpy.Event, Any, None]:
        """SimPy process: one scheduling step (or fast-forwarded decode span) per event."""
        total = self.num_requests
        while self.num_finished < total:
            if not self.scheduler.has_work():
                self._wake = self.env.event()
                yield self._wake
                continue
            plan = self.scheduler.schedule()
            if plan.is_empty and not plan.swap_blocks and not plan.num_cohort:
                if plan.num_preempted:
                    continue  # everything running was preempted: replan at once (vLLM does too)
                self._raise_never_fits()
            now = self.env.now
            for req in plan.scheduled:
                if req.first_scheduled_time_s is None:
                    req.first_scheduled_time_s = now
            timing = self._plan_durations(plan)
            if self.config.debug_invariants:
                self._check_invariants()
            self._record(plan, timing)
            if self.frames is not None:
                self._capture_frames(plan, timing)
            step0_end_s = now + timing.step0_s
            yield self.env.timeout(timing.total_s)
            finished = self.scheduler.complete(plan, self.env.now, step0_end_s)
            if finished:
                for req in finished:
                    self.log.add(self._row.pop(req), req)
                self.num_finished += len(finished)
                if self.on_finish is not None:
                    self.on_finish(len(finished))

    @property
    def num_preemptions(self) -> int:
        """Preemptions so far (the scheduler's count)."""
        return self.scheduler.num_preemptions

    def _check_invariants(self) -> None:
        self.allocator.check_invariants()
        if self.swap is not None:
            self.swap.check_invariants()
        self.scheduler.lazy.cohort.check()

    def _raise_never_fits(self) -> None:
        head = self.scheduler.waiting[0]
        needed = self.allocator.admission_slots_needed(head, head.num_tokens)
        raise ValueError(
            f"request {head.req_id} ({head.num_seqs} sequence(s), {head.num_tokens} tokens) "
            f"can never be admitted: it needs {needed:,} KV slots at once "
            f"({self.config.cache.allocator}, reservation {self.config.cache.reservation}, "
            f"watermark {self.config.engine_args.watermark}) and the empty pool holds "
            f"{self.allocator.usable_capacity_tokens:,}; raise the KV budget or lower "
            "n / beam_width / max_model_len"
        )

    def _plan_durations(self, plan: StepPlan) -> Timing:
        """Fast-forward ``plan`` as far as nothing changes and return its step durations.

        Step 0 runs the scheduled work; step ``j >= 1`` decodes every member, reading
        ``S + (j - 1) * N`` tokens of KV (``S`` = tokens after step 0, ``N`` = sequences).
        """
        k = self.scheduler.max_extension(plan, self.max_span_steps)
        step0_s = self.cost.step_s(*plan.work)
        if k > 1:
            start, num_seqs = self.scheduler.span_context(plan)
            until = None  # computed only up to the next arrival when nobody waits (_cut_span)
            if not self.scheduler.waiting and self.num_arrived < self.num_requests:
                until = self._arrival_list[self.num_arrived] - self.env.now
            durations = self.cost.span_durations(step0_s, start, num_seqs, k - 1, until)
            k = self._cut_span(durations)
            if k > 1:
                self.scheduler.extend(plan, k)
                return span_timing(durations[:k])
        if plan.swap_blocks:  # [swap] PCIe transfers of this step
            swap_s = self.cost.swap_s(plan.swap_blocks)
            step0_s += swap_s
            self.swap_time_s += swap_s
        return span_timing([step0_s])

    def _cut_span(self, durations: list[float]) -> int:
        """Steps of a span to keep: up to the step during which the next request arrives when
        nobody waits, and up to the step in flight at the next memory-map capture."""
        k = len(durations)
        if not self.scheduler.waiting and self.num_arrived < self.num_requests:
            until_arrival = self._arrival_list[self.num_arrived] - self.env.now
            k = min(k, steps_before(durations, until_arrival, "left") + 1)
        capture = self.frames.next_time() if self.frames is not None else None
        if capture is not None and capture > self.env.now:
            until = capture - self.env.now  # end with the step in flight then
            k = min(k, steps_before(durations, until, "right") + 1)
        return k

    def _capture_frames(self, plan: StepPlan, timing: Timing) -> None:
        """Frames due before this span ends: an idle gap before it shows an empty pool; in it,
        the pool during its last step (the span was cut to end with the step in flight)."""
        assert self.frames is not None
        now, end = self.env.now, self.env.now + timing.total_s
        due = self.frames.pop_due(end)
        if not due:
            return
        tokens = last_step_tokens(self.scheduler.lazy, plan, timing.num_steps)
        head = self.scheduler.head_of_queue()
        need = self.allocator.admission_slots_needed(*head) if head is not None else 0
        waiting = [r.req_id for r in self.scheduler.waiting]
        for t in due:
            if t < now:
                self.frames.capture(t, self.allocator, {}, 0, [], 0)
            else:
                self.frames.capture(t, self.allocator, tokens, len(tokens), waiting, need)

    def _record(self, plan: StepPlan, timing: Timing) -> None:
        """One memory row for the plan's steps, from the cohort's running totals
        (``kvsim.span``)."""
        if not self.config.record_memory:
            return
        scheduler = self.scheduler
        slots = event_slots(scheduler.lazy, plan, timing.num_steps)
        slots.across = self.allocator.shared_slots()
        slots.overhead = self.allocator.overhead_slots
        waiting = waiting_per_step(
            timing.durations,
            self.env.now,
            len(scheduler.waiting),
            self._arrival_list,
            self.num_arrived,
        )
        self.recorder.record(
            self.env.now,
            timing.durations,
            timing.total_s,
            slots,
            queue_head(self.allocator, scheduler.head_of_queue()),
            len(scheduler.running),
            waiting,
            plan.num_prefills,
            plan.num_preempted,
        )


def prepare_requests(
    config: SimConfig,
    requests: Sequence[Request | RequestSpec] | None = None,
    *,
    strict: bool = False,
    quiet: bool = False,
) -> tuple[list[Request], Rejected]:
    """The requests a run serves: generated when ``None`` (else fresh ones made from the given
    requests' or specs' facts), fanned out under v1, the ones that can never run set aside
    (logged unless ``quiet``; an error with ``strict`` or when none is left)."""
    requests = requests_for(config) if requests is None else fresh_requests(requests)
    if config.engine_args.engine == "vllm-v1":
        requests = fan_out(requests)
    empty_pool = allocator_from_config(config)
    runnable, rejected = split_runnable(requests, config, empty_pool)
    if rejected.count:
        fail = strict or not runnable
        message = rejected.message(
            len(requests), config.max_model_len, empty_pool.usable_capacity_tokens, skipped=not fail
        )
        if fail:
            raise ValueError(message)
        if not quiet:
            logger.warning(message)
    return runnable, rejected


def simulate(
    config: SimConfig,
    requests: Sequence[Request | RequestSpec] | None = None,
    on_finish: Callable[[int], None] | None = None,
    *,
    strict: object = False,
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

    The flags are taken by their truth and the numbers by their value (``strict=1``,
    ``map_every_s=np.float32(2)``), as the Python sources take them: compiled
    (``kvsim.native``), a parameter annotated ``bool`` or ``float`` would refuse those.
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
    env.process(engine.arrival_source())
    env.process(engine.engine_loop())
    env.run()
    logger.debug("simulated %d requests to t=%.1f s", engine.num_requests, env.now)
    results = build_results(
        config,
        engine.log.columns(),
        engine.recorder.arrays(),
        engine.num_preemptions,
        usable_capacity_tokens=engine.allocator.usable_capacity_tokens,
    )
    summary = results.summary
    summary.update(rejected.summary())
    if engine.swap is not None:  # [swap]
        summary.update(engine.swap.summary(engine.swap_time_s))
    summary.update(engine.allocator.prefix_cache_summary())
    num_blocks = engine.allocator.num_gpu_blocks
    if num_blocks is not None:  # vLLM logs "# GPU blocks" at startup (null block included)
        summary["num_gpu_blocks"] = num_blocks
    summary["layout_factor"] = engine.cost.layout_factor
    summary["layout_source"] = engine.cost.layout_source
    if frames is not None:
        for t in frames.pending:  # moments after the last finish: the pool is empty
            frames.capture(t, engine.allocator, {}, 0, [], 0)
        results.mapframes, results.frames = frames.frames()
    return results
