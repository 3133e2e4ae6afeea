"""SimPy wiring: one engine loop (``Engine``).

The engine loop plans a step with the profile's scheduler, asks the cost model for its duration,
yields one timeout, then applies the step: its slots, the recorded categories, the finishes.
Stable decode stretches are fast-forwarded: one event covers every step up to the next finish,
the next failed growth, or (when nobody waits) the step during which the next request arrives.
No process or event per token.

Requests reach an engine in one of two ways. A run of one engine knows every arrival ahead: the
loop releases those due as it plans (``_release_arrivals``; an idle engine waits until the
next), so an arrival costs no event of its own, and a span is cut up front at the next arrival.
An engine of a fleet (``kvsim.fleet``) is handed requests as a router picks it (``submit``), or
as another replica's prefill hands it a request's KV (``expect``): a span in flight when nobody
waited is then cut to end with the step in flight, by the same rule (``Engine.submit``). Either
way a span's slots are taken once it ends (``SchedulerCore.extend``), so cutting it is free.

Under async scheduling (``EngineArgs.async_scheduling``) a request that arrives while a step
runs is handed to the scheduler at the end of the step after it (vLLM's engine core has planned
that one already), or at once when the engine is idle.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from librt.vecs import append, vec
from mypy_extensions import i64

from kvsim.config import SimConfig
from kvsim.core.kv.base import NO_HIT
from kvsim.core.kv.hybrid import HybridPagedAllocator
from kvsim.core.kv.paged import PagedAllocator
from kvsim.core.kv.swap import SwapSpace
from kvsim.core.scheduler import StepPlan
from kvsim.core.scheduler.cohort import Member, by_seq
from kvsim.core.scheduler.v1 import V1Scheduler
from kvsim.engine.build import build_parts
from kvsim.engine.frames import FrameRecorder, has_map
from kvsim.engine.group_recorder import GroupRecorder
from kvsim.engine.recorder import MemoryRecorder, queue_head
from kvsim.engine.request_log import RequestLog
from kvsim.engine.span import event_slots, last_step_tokens
from kvsim.engine.timing import MAX_SPAN_STEPS, Timing, span_timing, steps_before, waiting_per_step
from kvsim.workload.request import Request

if TYPE_CHECKING:
    import simpy  # (kvsim imports SimPy only to run)

logger = logging.getLogger(__name__)


class InFlight:
    """The event an engine is waiting out: planned at ``start_s`` with ``durations`` (seconds),
    of which it now covers ``num_steps``; ``cuttable`` when nobody waited as it was planned (an
    arrival then ends it with the step in flight)."""

    def __init__(
        self, start_s: float, durations: list[float], num_steps: int, cuttable: bool
    ) -> None:
        # (plain classes here: mypyc compiles their __init__; a dataclass's runs interpreted)
        self.start_s = start_s
        self.durations = durations
        self.num_steps = num_steps
        self.cuttable = cuttable


class PlanTime:
    """What the recorder and the memory map read as an event was planned: the waiting queue's
    length, its head and ids, and the requests released so far (not changed once made)."""

    def __init__(
        self,
        num_waiting: int,
        head: tuple[Request, int] | None,
        num_arrived: int,
        waiting_ids: tuple[int, ...],
    ) -> None:
        self.num_waiting = num_waiting
        self.head = head
        self.num_arrived = num_arrived
        self.waiting_ids = waiting_ids


class Engine:
    """The simulated serving engine: owns the scheduler, cost model and recorders.

    A finished request's row goes to ``on_done`` (by default ``log``) and the engine lets go of
    the request (the caller's list is not kept: a caller that drops its own reference frees
    each request when it finishes).

    Args:
        env: the SimPy environment (several engines may share one: a fleet).
        config: the run's config.
        requests: the workload the loop releases (``_release_arrivals``), sorted by
            ``arrival_time_s``, every one runnable; empty for an engine that is handed its
            requests (``submit``).
        on_finish: called with the number of requests finished by each event (progress bars).
        frames: captures memory-map frames during the run (``kvsim.engine.frames``), or ``None``.
        workload: every request a fleet may hand this engine (the pool notes what they share);
            given, the engine runs until its environment stops instead of until ``requests``
            finish.
        on_done: called with ``(row, request)`` as each request finishes (``row``: its place in
            the workload); ``None``: ``log.add``.
    """

    def __init__(
        self,
        env: simpy.Environment,
        config: SimConfig,
        requests: list[Request],
        on_finish: Callable[[int], None] | None = None,
        frames: FrameRecorder | None = None,
        *,
        workload: Sequence[Request] | None = None,
        on_done: Callable[[int, Request], None] | None = None,
    ) -> None:
        self.env = env
        self.config = config
        # the memory map reads block ids: no anonymous bulk blocks then
        parts = build_parts(
            config, requests if workload is None else workload, pooled=frames is None
        )
        self.allocator, self.swap = parts.allocator, parts.swap
        self.offload = parts.offload  # CPU offloading (vLLM's OffloadingConnector) or None
        # per memory row, flat in a packed vector (no tuple object a row): the CPU tier's four
        # counts (offload) ...
        self.tier_samples: vec[i64] = vec[i64]()
        self.disk_samples: vec[i64] = vec[i64]()  # ... and a disk tier's three
        self._parked: set[Request] = set()  # loaded from the CPU tier, waiting, holding blocks
        self.scheduler, self.cost = parts.scheduler, parts.cost
        self.swap_time_s = 0.0
        self.recorder = MemoryRecorder(
            config.capacity_tokens, self.allocator.usable_capacity_tokens
        )
        # hybrid KV cache groups: each group's slots as well (one step an event)
        self.group_recorder = (
            GroupRecorder(self.allocator)
            if isinstance(self.allocator, HybridPagedAllocator)
            else None
        )
        self.on_finish = on_finish
        self.frames = frames
        if frames is not None and not has_map(self.allocator):
            raise ValueError(
                f"memory-map frames need a paged or slab allocator, not {config.cache.allocator!r}"
            )
        self.max_span_steps = 1 if config.memory_resolution == "step" else MAX_SPAN_STEPS
        self.handed = workload is not None  # requests come through submit(), times unknown
        self.num_requests: int | None = None if self.handed else len(requests)
        self.num_arrived = 0
        self.num_finished = 0
        self._wake: simpy.Event = env.event()
        arrivals = np.array([r.arrival_time_s for r in requests])  # int64 when all are ints
        self.log = RequestLog(arrivals)
        self.on_done = self.log.add if on_done is None else on_done
        # the arrival times known ahead (a lone engine), or those handed so far (a fleet's)
        self._arrival_list: list[float] = arrivals.astype(np.float64, copy=False).tolist()
        self._to_arrive = deque(requests)
        self._row: dict[Request, int] = {}  # arrived, unfinished request -> its workload row
        self._in_flight: InFlight | None = None
        self.process: simpy.Process | None = None
        # requests whose prompt KV another replica computes (disaggregated prefill)
        # expected from a prefill replica: (request, row, when it was expected, s)
        self._incoming: deque[tuple[Request, int, float]] = deque()
        self.holding: set[Request] = set()  # hold blocks, not yet running: KV on its way
        self._num_receiving = 0  # of them, those whose KV has not arrived (not yet submitted)
        self.on_receive: Callable[[Request, int, int], None] | None = None
        self.async_scheduling = config.engine_args.async_scheduling
        # arrived, not yet seen by the scheduler (async): (when it arrived here, s; request)
        self._staged: deque[tuple[float, Request]] = deque()
        self._last_step_start_s = 0.0  # start of the step that ends at the current boundary

    # -- requests in ----------------------------------------------------------------------------
    def _release_arrivals(self, now: float) -> None:
        """A lone engine's requests that arrived by ``now`` (seconds) join the waiting queue,
        in workload order: the loop releases them as it plans, so an arrival is no event of
        its own (one while the engine idles: ``engine_loop`` waits until it)."""
        to_arrive = self._to_arrive
        while to_arrive and to_arrive[0].arrival_time_s <= now:
            req = to_arrive.popleft()
            self._enqueue(req, self.num_arrived, req.arrival_time_s)

    def submit(self, req: Request, row: int) -> None:
        """``req`` (the workload's ``row``-th request) is handed to this engine now (a fleet's
        router): it joins the waiting queue.

        A fast-forwarded span in flight that nobody waited for is cut to end with the step in
        flight (the up-front cut of a known arrival, ``_cut_span``, made late)."""
        if req in self.holding:  # its KV arrived from a prefill replica
            self._num_receiving -= 1
        self._enqueue(req, row, self.env.now)
        if self.handed:  # (a lone engine knows its arrivals ahead)
            self._arrival_list.append(self.env.now)
        self._arrived()

    def _enqueue(self, req: Request, row: int, arrived_s: float) -> None:
        """``req`` arrived here at ``arrived_s`` (a fleet's replica: when it was handed over,
        not when its client sent it)."""
        self._row[req] = row
        if self.async_scheduling:
            self._staged.append((arrived_s, req))
        else:
            self._queue(req)
        self.num_arrived += 1

    def _queue(self, req: Request) -> None:
        """Hand ``req`` to the scheduler's waiting queue: with the requests that hold KV blocks
        if it holds some (its KV received from a prefill replica), else at the back."""
        if req in self.holding:
            self.scheduler.add_holder(req)
        else:
            self.scheduler.add_request(req)

    def expect(self, req: Request, row: int) -> None:
        """``req``'s prompt was computed on another replica: at this engine's next step its
        blocks are taken (``_take_incoming``), ``on_receive`` starts the transfer, and
        ``submit`` hands it over once its KV is here (vLLM v1's ``WAITING_FOR_REMOTE_KVS``)."""
        self._incoming.append((req, row, self.env.now))
        self._arrived()

    def _arrived(self) -> None:
        self._wake_loop()
        event = self._in_flight
        if event is None or not event.cuttable:
            return
        keep = steps_before(event.durations, self.env.now - event.start_s, "left") + 1
        if keep < event.num_steps:
            event.num_steps = keep
            assert self.process is not None, "a handed engine runs as its process"
            self.process.interrupt()

    def _wake_loop(self, _event: simpy.Event | None = None) -> None:
        """Wake an idle loop (a request handed over, a load's end, or, as an event callback, a
        lone engine's next arrival), unless something woke it already."""
        if not self._wake.triggered:
            self._wake.succeed()

    def _take_incoming(self) -> None:
        """Take blocks for the whole prompt of each expected request, first come first, while
        they fit (vLLM 0.34.0 ``Scheduler.schedule`` allocates a remote prefill's blocks, less
        its local prefix hits, then parks it in ``WAITING_FOR_REMOTE_KVS``; the NIXL connector
        pulls every prompt token it lacks: ``nixl/pull_scheduler.py``
        ``get_num_new_matched_tokens``)."""
        allocator = self.allocator
        # async scheduling: the scheduler sees a request expected while a step ran at the end
        # of the step after it, as it sees any arrival (``_release_staged``)
        busy = self.async_scheduling and self.scheduler.has_work()
        while self._incoming:
            req, row, expected_s = self._incoming[0]
            if busy and expected_s > self._last_step_start_s:
                return
            hit = allocator.find_cached_prefix(req) if allocator.caches_prefixes else NO_HIT
            if allocator.allocate(req, req.prompt_tokens, hit) is None:
                return
            self._incoming.popleft()
            req.num_held_slots = allocator.held_slots(req.req_id)
            self.holding.add(req)
            self._num_receiving += 1
            # its whole prompt is cached here, the local hits and what the connector pulls
            # (vLLM's request.num_cached_tokens; none of it computed: PromptTokenStats)
            req.num_cached_tokens = req.prompt_tokens
            assert self.on_receive is not None, "expect() needs on_receive"
            self.on_receive(req, row, req.prompt_tokens - hit.num_tokens)

    @property
    def num_incoming(self) -> int:
        """Requests expected whose blocks are not taken yet."""
        return len(self._incoming)

    @property
    def num_staged(self) -> int:
        """Requests that arrived here and the scheduler has not seen yet (async scheduling)."""
        return len(self._staged)

    @property
    def staged(self) -> list[Request]:
        """Requests that arrived here and the scheduler has not seen yet (async scheduling)."""
        return [req for _, req in self._staged]

    # -- the loop -------------------------------------------------------------------------------
    def engine_loop(self) -> Generator[simpy.Event, Any, None]:
        """SimPy process: one scheduling step (or fast-forwarded decode span) per event."""
        import simpy  # (kvsim imports SimPy only to run)

        env = self.env
        self.process = env.active_process
        total = self.num_requests
        to_arrive = self._to_arrive
        while total is None or self.num_finished < total:
            now = env.now
            if to_arrive and to_arrive[0].arrival_time_s <= now:
                self._release_arrivals(now)
            if self._incoming:
                self._take_incoming()
            if self._staged:
                self._release_staged()
            if not self.scheduler.has_work():
                if to_arrive and self.offload is None:  # a lone engine: nothing else wakes it
                    yield env.timeout(to_arrive[0].arrival_time_s - now)
                    continue
                wake = self._wake = env.event()
                if to_arrive:  # until the next arrival, or a CPU-tier load's end
                    env.timeout(to_arrive[0].arrival_time_s - now).callbacks.append(self._wake_loop)
                yield wake
                continue
            if self.offload is not None:
                self.offload.now_s = now
            plan = self.scheduler.schedule()
            if self.offload is not None and self.offload.started:
                self._start_loads()
            if self.holding:
                self.holding.difference_update(plan.scheduled)
                self._parked.difference_update(plan.scheduled)
            if plan.is_empty and not plan.swap_blocks and not plan.num_cohort:
                # the plan is dropped: the cohort forgets the step it was planned at
                self.scheduler.lazy.flush(self.scheduler.running)
                if plan.num_preempted:
                    continue  # everything running was preempted: replan at once (vLLM does too)
                if self.offload is not None and (self.offload.loads or plan.num_deferred):
                    yield self._idle_for_tier(to_arrive)
                    continue
                if self._parked:
                    self._drop_parked()  # loaded requests' blocks keep the head out: free them
                    continue
                if self._staged:  # (async: no step runs that they would wait for)
                    self._release_staged(everything=True)
                    continue
                if self._num_receiving:  # (vLLM steps idle until a request's KV arrives)
                    wake = self._wake = env.event()
                    yield wake  # its arrival (``submit``) wakes the loop
                    continue
                self._raise_never_fits()
            for req in plan.scheduled:
                if req.first_scheduled_time_s is None:
                    req.first_scheduled_time_s = now
            timing = self._plan_durations(plan, now)
            at = self._plan_time()
            cuttable = self.handed and timing.num_steps > 1 and not at.num_waiting
            event = self._in_flight = InFlight(now, timing.durations, timing.num_steps, cuttable)
            delay_s = timing.total_s
            while True:
                try:
                    yield self.env.timeout(delay_s)
                    break
                except simpy.Interrupt:  # an arrival cut the span (``_arrived``)
                    timing = span_timing(timing.durations[: event.num_steps])
                    delay_s = now + timing.total_s - self.env.now
            self._in_flight = None
            self._last_step_start_s = now + timing.total_s - timing.durations[-1]
            if self.config.debug_invariants:  # (before the span's later steps allocate)
                self.scheduler.lazy.check_step0_groups(plan.cohort_clock + plan.cohort_advance)
            self.scheduler.extend(plan, timing.num_steps)
            if self.config.debug_invariants:
                self._check_invariants(plan, timing.num_steps)
            self._record(plan, timing, now, at)
            if self.frames is not None:
                self._capture_frames(plan, timing, now, at)
            if self.offload is not None:
                self._store_steps(plan, timing, now)
            finished = self.scheduler.complete(plan, self.env.now, now + timing.step0_s)
            if self.offload is not None:
                for req in finished:
                    self.offload.forget(req)
            if finished:
                for req in finished:
                    self.on_done(self._row.pop(req), req)
                self.num_finished += len(finished)
                if self.on_finish is not None:
                    self.on_finish(len(finished))

    # -- CPU offloading (vLLM's OffloadingConnector, kvsim.core.scheduler.offload) -------------
    def _idle_for_tier(self, to_arrive: Sequence[Request]) -> simpy.Event:
        """The event an idle loop waits for while the CPU tier holds its waiting requests: a
        load's end (``_loaded`` wakes it), the end of the store a deferred request waits for,
        or the next arrival."""
        assert self.offload is not None
        now = self.env.now
        wake = self._wake = self.env.event()
        times = [to_arrive[0].arrival_time_s] if to_arrive else []
        store_end_s = self.offload.tier.next_store_end(now)
        if store_end_s is not None:
            times.append(store_end_s)
        elif not self.offload.loads:
            raise RuntimeError(f"t={now}: a request deferred by the CPU tier waits for nothing")
        if times:
            self.env.timeout(max(0.0, min(times) - now)).callbacks.append(self._wake_loop)
        return wake

    def _start_loads(self) -> None:
        """The loads the plan started: each request holds its blocks (its slots counted as
        ``holding``) until its load ends, then waits ahead of the requests that hold no blocks
        (``_loaded``)."""
        assert self.offload is not None
        for req in self.offload.take_started():
            self.holding.add(req)
            done_s = self.offload.loads[req].done_s
            ended = self.env.timeout(max(0.0, done_s - self.env.now), value=req)
            ended.callbacks.append(self._loaded)

    def _loaded(self, event: simpy.Event) -> None:
        """The load of ``event``'s request ended: it waits with its loaded tokens computed,
        holding its blocks, ahead of every request that holds none (vLLM 0.34.0
        ``kv_holding_waiting``: ``SchedulerCore.add_holder``)."""
        assert self.offload is not None
        req = event.value
        assert isinstance(req, Request), "a load event carries its request"
        self.offload.finish_load(req)
        self.scheduler.add_holder(req)
        self._parked.add(req)
        self._wake_loop()

    def _drop_parked(self) -> None:
        """Nothing runs, no load is in flight, and requests that loaded from the CPU tier wait
        at the queue's front, holding their blocks, but the first cannot get the blocks for
        the rest of its prompt (those the parked requests hold among them): free their blocks,
        as a preemption would, so that the queue moves; they look the tier up again when their
        turn comes, a re-admission (``Request.readmitted``). vLLM 0.34.0 keeps such a
        request's remaining blocks reserved from the moment its load is parked
        (``Scheduler._reserve_parked``), which kvsim does not model;
        ``kv_offload_loads_dropped`` counts the requests freed here."""
        assert self.offload is not None
        for req in sorted(self._parked, key=lambda r: r.req_id):
            self.allocator.free(req.req_id, req.num_computed_tokens)
            req.num_computed_tokens = 0
            req.num_held_slots = 0
            req.num_loads_dropped += 1  # (its next admission is a re-admission)
            self.holding.discard(req)
            self.offload.num_loads_dropped += 1
        self.scheduler.unhold(self._parked)
        self._parked.clear()

    def _store_steps(self, plan: StepPlan, timing: Timing, start_s: float) -> None:
        """Before ``complete``: at the end of each of the plan's steps, offer the tier the full
        blocks that step's scheduled requests computed (their copies start then), in running
        order: in step 0 the explicit requests and the members whose block fills then, in a
        span's later steps the members whose block fills then (vLLM offers every scheduled
        request's newly full blocks after each step)."""
        offload = self.offload
        assert offload is not None
        lazy = self.scheduler.lazy
        cohort, seq = lazy.cohort, lazy.seq
        clock = plan.cohort_clock
        scheduled, num_new = plan.scheduled, plan.num_new_tokens
        step0: list[tuple[int, Request, int]] = []
        for i in range(len(scheduled)):  # (explicit requests: their counters are true)
            req = scheduled[i]
            computed = req.num_computed_tokens + num_new[i]
            storable = offload.storable_tokens(req, computed)
            if offload.may_store(req, computed, storable):  # (else store_tokens offers none)
                step0.append((seq[req], req, storable))
        # (members_may_store false: no member has a block to offer)
        if plan.cohort_advance and offload.members_may_store:
            for member in self._members_offering(clock):
                if member.sync <= clock:  # (not one that joined after step 0: explicit in it)
                    computed = cohort.computed_at(member, clock) + 1
                    step0.append((member.seq, member.request, computed))
        step0.sort(key=_by_first)
        end_s = start_s + timing.durations[0]
        offload.store_tokens([(req, computed) for _, req, computed in step0], end_s)
        clock += plan.cohort_advance
        for j in range(1, timing.num_steps):  # a span's later steps: every request a member
            end_s += timing.durations[j]
            filling = self._members_offering(clock) if offload.members_may_store else []
            if filling:
                filled = [(m.request, cohort.computed_at(m, clock) + 1) for m in filling]
                offload.store_tokens(filled, end_s)
            clock += 1

    def _members_offering(self, clock: int) -> list[Member]:
        """The decode cohort members with blocks to offer the tier at the step of ``clock``,
        in running order: those whose block fills then, and those whose last offer found no
        room (``OffloadConnector.retrying``: vLLM offers them again every step)."""
        assert self.offload is not None
        cohort = self.scheduler.lazy.cohort
        filling = cohort.filling_at(clock)
        if not self.offload.retrying:
            return filling
        members = cohort.members
        retry = [members[r] for r in self.offload.retrying.values() if r in members]
        if not retry:
            return filling
        return sorted(dict.fromkeys(filling + retry), key=by_seq)

    def _plan_time(self) -> PlanTime:
        scheduler = self.scheduler
        ids = tuple(r.req_id for r in scheduler.waiting) if self.frames is not None else ()
        num_waiting = len(scheduler.waiting) + len(self._staged)
        return PlanTime(num_waiting, scheduler.head_of_queue(), self.num_arrived, ids)

    @property
    def num_preemptions(self) -> int:
        """Preemptions so far (the scheduler's count)."""
        return self.scheduler.num_preemptions

    def _release_staged(self, everything: bool = False) -> None:
        """Async scheduling: hand the scheduler the requests that arrived before the step that
        just ended began (the step after it was planned then, vLLM ``EngineCore.
        step_with_batch_queue``), or every staged one when the engine has nothing to run or
        ``everything`` (no step runs that they would wait for)."""
        staged, idle = self._staged, everything or not self.scheduler.has_work()
        while staged and (idle or staged[0][0] <= self._last_step_start_s):
            self._queue(staged.popleft()[1])

    def _check_invariants(self, plan: StepPlan, num_steps: int) -> None:
        self.allocator.check_invariants()
        if self.offload is not None:
            self.offload.tier.check_invariants(self.env.now)
            if self.offload.disk is not None:
                self.offload.disk.check_invariants(self.env.now)
        if self.swap is not None:
            self.swap.check_invariants()
        self.scheduler.lazy.cohort.check()
        last = plan.cohort_clock  # the clock of the event's last step
        if num_steps > 1:
            last += plan.cohort_advance + num_steps - 2
        self.scheduler.lazy.check_groups(last)

    def _raise_never_fits(self) -> None:
        if self.swap is not None and self.swap.has_swapped():  # (v0: nothing runs meanwhile)
            self._raise_never_swaps_in(self.swap)
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

    def _raise_never_swaps_in(self, swap: SwapSpace) -> None:
        """The oldest swapped-out request cannot come back although nothing runs: vLLM v0's
        ``can_swap_in`` (block manager v1) wants its blocks and one more per sequence free
        beyond the watermark, more than the pool has."""
        req = swap.swapped[0]
        blocks = swap.held[req.req_id].num_blocks
        allocator = self.allocator
        assert isinstance(allocator, PagedAllocator)
        raise ValueError(
            f"request {req.req_id} ({req.num_seqs} sequence(s), {req.num_tokens} tokens) was "
            f"swapped out holding {blocks:,} blocks and can never swap back in: vLLM v0's "
            f"can_swap_in wants its {blocks:,} blocks + 1 per sequence ({req.num_seqs}) + the "
            f"watermark's {allocator.watermark_blocks:,} free, and the empty pool has "
            f"{allocator.pool.num_free:,} (vLLM 0.4-0.6 fails such a request, the paper's vLLM "
            "waits for it forever); raise the KV budget or lower n / beam_width / max_model_len"
        )

    def _next_known_arrival_s(self) -> float | None:
        """The next arrival known ahead when nobody waits (a lone engine), else ``None``."""
        if self.scheduler.waiting or self.num_arrived >= len(self._arrival_list):
            return None
        return self._arrival_list[self.num_arrived]

    def _plan_durations(self, plan: StepPlan, now: float) -> Timing:
        """How far ``plan`` can be fast-forwarded while nothing changes, as its step durations
        (the span's slots are taken when it ends: ``SchedulerCore.extend``).

        Step 0 runs the scheduled work; step ``j >= 1`` decodes every member, reading
        ``S + (j - 1) * N`` tokens of KV (``S`` = tokens after step 0, ``N`` = sequences).
        """
        # staged arrivals (and expected requests an async scheduler sees late) reach the
        # scheduler at the next boundary: no span past it (and no span while a CPU-tier load
        # is in flight: it ends with the step in flight)
        one = (
            self._staged
            or (self.async_scheduling and self._incoming)
            or (self.offload is not None and self.offload.loads)
        )
        step0_s = self.cost.step_s(
            plan.work_new_tokens,
            plan.work_context_tokens,
            plan.work_attention_pairs,
            plan.work_seqs,
            plan.work_drafting_seqs,
        )  # (one by one: a native call with unboxed floats)
        if self.scheduler.spec is not None:
            return self._speculative_timing(plan, step0_s, now, bool(one))
        k = self.scheduler.max_extension(plan, 1 if one else self.max_span_steps)
        if k > 1:
            start, num_seqs = self.scheduler.span_context(plan)
            until = self._next_known_arrival_s()  # durations only up to it (_cut_span)
            if until is not None:
                until -= now
            durations = self.cost.span_durations(step0_s, start, num_seqs, k - 1, until)
            k = self._cut_span(durations, now)
            if k > 1:
                return span_timing(durations[:k])
        if plan.swap_blocks:  # [swap] PCIe transfers of this step
            swap_s = self.cost.swap_s(plan.swap_blocks)
            step0_s += swap_s
            self.swap_time_s += swap_s
        return span_timing([step0_s])

    def _speculative_timing(self, plan: StepPlan, step0_s: float, now: float, one: bool) -> Timing:
        """Speculative decoding: the steps ``V1Scheduler.speculative_span`` plans past step 0
        until the next arrival, none where something else must see every step (a fleet's
        router, the memory map, a CPU tier, staged arrivals: ``one``) or under
        ``memory_resolution = "step"``.
        Its steps allocate as they are planned, so the span is never cut afterwards."""
        scheduler = self.scheduler
        assert isinstance(scheduler, V1Scheduler), "speculative decoding runs under vllm-v1"
        alone = not (one or self.handed or self.frames is not None or self.offload is not None)
        max_steps = self.max_span_steps if alone else 1
        until = self._next_known_arrival_s()
        if until is not None:
            until -= now
        durations = scheduler.speculative_span(plan, self.cost, step0_s, max_steps, until, now)
        return span_timing(durations)

    def _cut_span(self, durations: list[float], now: float) -> int:
        """Steps of a span to keep: up to the step during which the next request arrives when
        nobody waits, and up to the step in flight at the next memory-map capture."""
        k = len(durations)
        next_arrival = self._next_known_arrival_s()
        if next_arrival is not None:
            until_arrival = next_arrival - now
            k = min(k, steps_before(durations, until_arrival, "left") + 1)
        capture = self.frames.next_time() if self.frames is not None else None
        if capture is not None and capture >= now:  # (one at the span's start: its first step)
            until = capture - now  # end with the step in flight then
            k = min(k, steps_before(durations, until, "right") + 1)
        return k

    def _capture_frames(self, plan: StepPlan, timing: Timing, now: float, at: PlanTime) -> None:
        """Frames due before this span ends: an idle gap before it shows an empty pool; in it,
        the pool during its last step (the span was cut to end with the step in flight)."""
        assert self.frames is not None
        end = now + timing.total_s
        due = self.frames.pop_due(end)
        if not due:
            return
        tokens = last_step_tokens(self.scheduler.lazy, plan, timing.num_steps)
        need = self.allocator.admission_slots_needed(*at.head) if at.head is not None else 0
        for t in due:
            if t < now:
                self.frames.capture(t, self.allocator, {}, 0, [], 0)
            else:  # the queue at t: the plan's, and those arrived since (released at its end)
                waiting = list(at.waiting_ids)
                waiting += [r.req_id for s, r in self._staged if s <= t]
                for r in self._to_arrive:
                    if r.arrival_time_s > t:
                        break
                    waiting.append(r.req_id)
                self.frames.capture(t, self.allocator, tokens, len(tokens), waiting, need)

    def _record_groups(self, plan: StepPlan, timing: Timing, totals: list[int] | None) -> None:
        """One step's per-group row: the members' sums (``totals``: ``step0_group_totals``)
        and the explicit requests' own counts."""
        assert self.group_recorder is not None
        lazy = self.scheduler.lazy
        new = plan.tokens_by_request()
        running = [(r, r.num_computed_tokens + new.get(r, 0)) for r in lazy.others]
        self.group_recorder.record(timing.total_s, running, totals)

    @property
    def num_steps_run(self) -> int:
        """Engine steps so far, recorded in memory rows or not (each observed once by the
        scheduler: ``SchedulerCore.observe_step_tokens``)."""
        return self.scheduler.num_observed_steps

    def _record(self, plan: StepPlan, timing: Timing, now: float, at: PlanTime) -> None:
        """One memory row for the plan's steps, from the cohort's running totals
        (``kvsim.engine.span``), plus the blocks of requests whose KV is on its way."""
        if not self.config.record_memory:
            return
        scheduler = self.scheduler
        lazy = scheduler.lazy
        group_totals = None  # (a one-step row's members in step 0: for both rows, once)
        groups = lazy.cohort.groups
        if self.group_recorder is not None and timing.num_steps <= 1 and groups is not None:
            group_totals = lazy.step0_group_totals(plan.cohort_clock + plan.cohort_advance)
        slots = event_slots(lazy, plan, timing.num_steps, group_totals)
        slots.across = self.allocator.shared_slots()
        slots.overhead = self.allocator.overhead_slots
        for req in self.holding:  # (a fleet's decode replica): token states once received
            held = self.allocator.held_slots(req.req_id)
            slots.held += held
            slots.token_states += req.num_computed_tokens
            slots.internal += max(0, held - req.final_kv_tokens)
        waiting = waiting_per_step(
            timing.durations,
            now,
            at.num_waiting,
            self._arrival_list,
            at.num_arrived,
        )
        self.recorder.record(
            now,
            timing.durations,
            timing.total_s,
            slots,
            queue_head(self.allocator, at.head),
            len(scheduler.running),
            waiting,
            plan.num_prefills,
            plan.num_preempted,
        )
        if self.group_recorder is not None and timing.num_steps > 1:  # (all members)
            assert plan.span is not None, "extend() notes the span"
            self.group_recorder.record_span(timing.durations, timing.total_s, plan.span.group_rows)
        elif self.group_recorder is not None:  # the cohort's per-group sums and the others'
            self._record_groups(plan, timing, group_totals)
        if self.offload is not None:  # the tier's blocks by category at the row's time
            stored, storing, loading, free = self.offload.tier.occupancy(now)
            samples = self.tier_samples
            samples = append(append(samples, stored), storing)
            self.tier_samples = append(append(samples, loading), free)
            if self.offload.disk is not None:
                stored, writing, free = self.offload.disk.occupancy(now)
                samples = append(append(self.disk_samples, stored), writing)
                self.disk_samples = append(samples, free)


def _by_first(item: tuple[int, Request, int]) -> int:
    return item[0]
