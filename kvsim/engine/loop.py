"""SimPy wiring: an arrival source and one engine loop (``Engine``).

The engine loop plans a step with the profile's scheduler, asks the cost model for its duration,
records where the KV slots went and yields one timeout. Stable decode stretches are
fast-forwarded: one event covers every step up to the next finish, the next failed growth, or
(when nobody waits) the step during which the next request arrives. No process or event per
token. Under async scheduling (``EngineArgs.async_scheduling``) a request that arrives while a
step runs is handed to the scheduler at the end of the step after it (vLLM's engine core has
planned that one already), or at once when the engine is idle.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

import numpy as np

from kvsim.config import SimConfig
from kvsim.core.scheduler import StepPlan
from kvsim.engine.build import build_parts
from kvsim.engine.frames import FrameRecorder, has_map
from kvsim.engine.recorder import MemoryRecorder, queue_head
from kvsim.engine.request_log import RequestLog
from kvsim.engine.span import event_slots, last_step_tokens
from kvsim.engine.timing import MAX_SPAN_STEPS, Timing, span_timing, steps_before, waiting_per_step
from kvsim.workload.request import Request

if TYPE_CHECKING:
    import simpy  # (kvsim imports SimPy only to run)

logger = logging.getLogger(__name__)


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
        frames: captures memory-map frames during the run (``kvsim.engine.frames``), or ``None``.
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
        # the memory map reads block ids: no anonymous bulk blocks then
        parts = build_parts(config, requests, pooled=frames is None)
        self.allocator, self.swap = parts.allocator, parts.swap
        self.scheduler, self.cost = parts.scheduler, parts.cost
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
        self.async_scheduling = config.engine_args.async_scheduling
        self._staged: deque[Request] = deque()  # arrived, not yet seen by the scheduler (async)
        self._last_step_start_s = 0.0  # start of the step that ends at the current boundary

    def arrival_source(self) -> Generator[simpy.Event, Any, None]:
        """SimPy process: releases each request into the waiting queue at its arrival time."""
        for row in range(self.num_requests):
            req = self._to_arrive.popleft()
            delay = req.arrival_time_s - self.env.now
            if delay > 0:
                yield self.env.timeout(delay)
            self._row[req] = row
            if self.async_scheduling:
                self._staged.append(req)
            else:
                self.scheduler.add_request(req)
            self.num_arrived += 1
            if not self._wake.triggered:
                self._wake.succeed()

    def engine_loop(self) -> Generator[simpy.Event, Any, None]:
        """SimPy process: one scheduling step (or fast-forwarded decode span) per event."""
        total = self.num_requests
        while self.num_finished < total:
            if self._staged:
                self._release_staged()
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
            self._last_step_start_s = now + timing.total_s - timing.durations[-1]
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

    def _release_staged(self) -> None:
        """Async scheduling: hand the scheduler the requests that arrived before the step that
        just ended began (the step after it was planned then, vLLM ``EngineCore.
        step_with_batch_queue``), or every staged one when the engine has nothing to run."""
        staged, idle = self._staged, not self.scheduler.has_work()
        while staged and (idle or staged[0].arrival_time_s <= self._last_step_start_s):
            self.scheduler.add_request(staged.popleft())

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
        # staged arrivals reach the scheduler at the next boundary: no span past it
        k = self.scheduler.max_extension(plan, 1 if self._staged else self.max_span_steps)
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
        (``kvsim.engine.span``)."""
        if not self.config.record_memory:
            return
        scheduler = self.scheduler
        slots = event_slots(scheduler.lazy, plan, timing.num_steps)
        slots.across = self.allocator.shared_slots()
        slots.overhead = self.allocator.overhead_slots
        waiting = waiting_per_step(
            timing.durations,
            self.env.now,
            len(scheduler.waiting) + len(self._staged),
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
