"""The aggregate engine core: vLLM v1 on a paged pool of private requests, in one plain loop.

``kvsim.engine`` is general (every profile, allocator and sharing policy) and pays for it at
every event: SimPy processes, a scheduler object, a plan object, block ids in a block pool. For
the most common run (``vllm-v1``, ``paged``, requests that share no tokens, no memory map) this
module runs the same rules with the state as running totals, so an event costs a few dozen
Python operations whatever the number of running requests:

- the pool is a count of free blocks (no request's blocks are ever read by id here); under
  prefix caching the free queue's order, which decides what a preempted request finds of its
  own blocks when it comes back, is kept as positions (``kvsim.allocators.counted_queue``);
- steady decoders are a cohort as in ``kvsim.scheduler.cohort`` (a clock, sums of computed
  tokens, held slots and internal fragmentation, crossings by residue, a heap of finishes);
- the requests mid-prefill are the only ones handled one by one; admission is FCFS;
- a preemption takes the last running requests out until the step's blocks fit, leaving the
  cohort as it is where the token budget holds everyone; a step the lazy path cannot plan (a
  token budget that ends before a steady decoder's turn, or a preemption then) takes the exact
  pass, request by request as ``V1Scheduler._schedule_running`` (``kvsim.aggregate_preemption``);
- time is the sum of the events' durations, and arrivals are released exactly when SimPy
  releases them in ``kvsim.engine`` (its timeouts, ties included).

It makes the same decisions in the same order and computes every recorded number with the same
floating-point operations as ``kvsim.engine`` with ``V1Scheduler``, so the results are identical
(``tests/test_aggregate_core.py``, against that engine and the step-by-step reference). Whatever
it does not model -- a request preempted more than ``max_preemptions_per_request`` times, a
running request with nothing to compute, a head that can never be admitted -- makes it stop
(``NotModeledError``) before anything is returned; ``simulate`` then runs ``kvsim.engine``
instead.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kvsim.aggregate_preemption import (
    NotModeledError,
    RunningSet,
    exact_running,
    preempt_for_step,
)
from kvsim.allocators.counted_queue import CountedFreeQueue, ReleasedTable
from kvsim.allocators.paged import PagedAllocator
from kvsim.config import SimConfig
from kvsim.cost import StepCostModel
from kvsim.recorder import MemoryRecorder, categorize, categorize_step
from kvsim.request import Request
from kvsim.request_log import RequestLog
from kvsim.scheduler.cohort import DecodeCohort
from kvsim.timing import MAX_SPAN_STEPS, SHORT_SPAN_STEPS, numpy_sum, steps_before, waiting_per_step
from kvsim.units import SimTime


def applies(config: SimConfig, allocator: object, requests: Sequence[Request]) -> bool:
    """Whether a run is one the aggregate core models: ``vllm-v1``, iteration-level batching, a
    paged pool, event resolution, no invariant checks, no long-prefill threshold, and requests
    of one sequence that share no tokens with others."""
    args = config.engine_args
    return (
        args.engine == "vllm-v1"
        and args.batching == "iteration"
        and args.long_prefill_token_threshold == 0
        and type(allocator) is PagedAllocator
        and config.memory_resolution == "event"
        and not config.debug_invariants
        and all(r.num_seqs == 1 and not r.shares_tokens for r in requests)
    )


class AggregateCore:
    """One run of the aggregate core; ``run`` fills ``log`` and ``recorder``.

    Attributes mirror ``kvsim.engine.Engine``'s for ``simulate``: ``log``, ``recorder``,
    ``allocator`` (built for its sizes and counters, which the run sets at its end; no block is
    taken from it), ``cost``, ``swap`` (always ``None``), ``swap_time_s`` (always 0) and
    ``num_preemptions`` (set by the run).

    Args:
        config: the run (``applies`` holds).
        requests: the workload, sorted by arrival, every one runnable; they are used as the
            requests' state (their counters change), and each entry of the list is set to
            ``None`` when its request finishes, so a million-request run frees them as it goes.
        allocator: the run's ``PagedAllocator`` (sizes, prefix-cache counters).
        cost: the run's step-cost model.
        on_finish: called with the number of requests finished by each event.
    """

    swap = None
    swap_time_s = 0.0
    num_preemptions = 0

    def __init__(
        self,
        config: SimConfig,
        requests: list[Request],
        allocator: PagedAllocator,
        cost: StepCostModel,
        on_finish: Callable[[int], None] | None = None,
    ) -> None:
        self.config = config
        self.requests = requests
        self.allocator = allocator
        self.cost = cost
        self.on_finish = on_finish
        self.recorder = MemoryRecorder(config.capacity_tokens)
        arrivals = np.array([r.arrival_time_s for r in requests])
        self.log = RequestLog(arrivals)
        self._arrival_times = arrivals.astype(np.float64, copy=False)

    def run(self) -> None:
        """Simulate every request to its finish.

        One long loop by design (against the style guide's 40 lines): its state lives in local
        variables, which CPython reads faster than attributes, and every call costs. Moving four
        inline pieces of it into the functions both engines now share took the Azure 100k bench
        from 9.6 to 8.2 M decode tokens per CPU-second (measured). Each phase is marked and names
        the general engine's code it follows.

        Raises:
            NotModeledError: the run needs a rule this core does not model.
        """
        requests = self.requests
        num_requests = len(requests)
        allocator, cost, recorder = self.allocator, self.cost, self.recorder
        args = self.config.engine_args
        record_memory = self.config.record_memory
        on_finish, log_add = self.on_finish, self.log.add
        budget0, max_num_seqs = args.max_num_batched_tokens, args.max_num_seqs
        chunked = args.enable_chunked_prefill
        full_isl = args.scheduler_reserve_full_isl
        caching = args.enable_prefix_caching
        b = allocator.block_size_tokens
        free = allocator.num_free_blocks  # the pool, counted
        step_s = cost.step_s
        arrival_array = self._arrival_times
        last_release: SimTime = 0  # SimPy's clock when the arrival process last released
        queries = 0
        span_durations = cost.span_durations

        # the cohort (kvsim.scheduler.cohort): every member pooled; its clock is ``clock``
        cohort = DecodeCohort(b, caching, pooled=True)
        members = cohort.members
        member_seq: dict[Request, int] = {}  # running order of every running request
        next_seq = 0
        others: dict[Request, None] = {}  # running, mid-prefill, in running order
        waiting: deque[Request] = deque()
        blocks_of: dict[Request, int] = {}  # blocks held by the others
        row_of: dict[Request, int] = {}
        clock = 0
        # preemption (V1Scheduler._preempt_recompute): under prefix caching a preempted
        # request's blocks stay findable in the free queue, modelled by positions
        num_preemptions = preempted_queries = preempted_hits = 0
        free_queue = CountedFreeQueue(allocator.pool.num_blocks) if caching else None
        released: dict[Request, ReleasedTable] = {}  # preempted, waiting: where its blocks lie
        keyed_of: dict[Request, int] = {}  # running: blocks it holds that keep a key (its hits)
        pool = RunningSet(
            cohort,
            others,
            member_seq,
            blocks_of,
            waiting,
            free_queue,
            released,
            keyed_of,
            args.max_preemptions_per_request,
        )

        now: SimTime = 0
        num_arrived = 0
        num_finished = 0

        while num_finished < num_requests:
            if (
                not members and not others and not waiting
            ):  # idle: the next arrival wakes the engine
                i = num_arrived
                now, _ = _next_release(requests[i].arrival_time_s, last_release)
                last_release = now
                while True:
                    row_of[requests[i]] = i
                    waiting.append(requests[i])
                    i += 1
                    if i == num_requests:
                        break
                    t, together = _next_release(requests[i].arrival_time_s, last_release)
                    if not together:
                        break
                num_arrived = i

            # -- schedule (V1Scheduler.schedule): the lazy path, else the exact pass -------
            n = len(members)
            left = budget0 - n
            scheduled: list[Request] = []
            new_tokens: list[int] = []
            w_new = w_ctx = w_pairs = w_seqs = 0.0
            num_prefills = num_preempted = 0
            partial = False
            exact = left < 0  # the budget ends before a steady decoder: the exact pass
            chunks: list[tuple[Request, int]] = []
            starved = False
            takes = free_queue  # the free queue hears of this step's takes below
            if not exact:
                need = 0
                boundary: Request | None = None
                for req in others:
                    if left <= 0:
                        boundary = boundary or req
                        break
                    computed = req.num_computed_tokens
                    num_new = req.prompt_tokens + req.num_output_tokens - computed
                    if num_new <= 0:
                        raise NotModeledError("a running request with nothing to compute")
                    if num_new >= left:
                        num_new, boundary = left, req
                    need += max(-((computed + num_new) // -b) - blocks_of[req], 0)
                    left -= num_new
                    chunks.append((req, num_new))
                if boundary is not None:
                    bseq = member_seq[boundary]
                    if any(m.seq > bseq for m in members.values()):
                        exact = True  # a steady decoder after the budget ends
                    others_list = list(others)
                    num_later = len(others_list) - others_list.index(boundary) - 1
                    starved = num_later > 0 or not chunks or chunks[-1][0] is not boundary
                if not exact and need + cohort.crossings_at(clock) > free:
                    if boundary is None:  # the budget holds everyone: preempt, cohort kept
                        freed, num_preempted, chunks = preempt_for_step(pool, chunks, clock, free)
                        free += freed
                        num_preemptions += num_preempted
                        takes = None  # (it told the queue of them, between its releases)
                    else:
                        exact = True  # a preemption where the budget ends
            if not exact:
                crossed = cohort.allocate_pooled(clock, 1)[0][0]
                free -= crossed
                if takes is not None:
                    takes.take(crossed)
                for req, num_new in chunks:  # in running order
                    computed = req.num_computed_tokens
                    total = computed + num_new
                    extra = -(total // -b) - blocks_of[req]
                    if extra > 0:
                        free -= extra
                        if takes is not None:
                            takes.take(extra)
                        blocks_of[req] += extra
                        req.num_held_slots = blocks_of[req] * b
                    partial = partial or total < req.prompt_tokens + req.num_output_tokens
                    scheduled.append(req)
                    new_tokens.append(num_new)
                    if num_new != 1 or not req.num_output_tokens:
                        num_prefills += 1  # (else a decode: SchedulerCore's add_decode)
                    w_new += num_new
                    w_ctx += computed
                    w_pairs += 2 * num_new * computed + num_new * num_new
                    w_seqs += 1
                partial = partial or starved
                n = len(members)  # (after any preemption)
            if exact:  # V1Scheduler._schedule_running after _flush
                step = exact_running(pool, budget0, free)
                free, left, partial = step.free, step.budget, step.partial
                scheduled, new_tokens = step.scheduled, step.new_tokens
                w_new, w_ctx, w_pairs, w_seqs = step.work
                num_prefills, num_preempted = step.num_prefills, step.num_preempted
                num_preemptions += num_preempted
                n = 0
            else:
                context = cohort.sum_computed(clock)
                w_new += n
                w_ctx += context
                w_pairs += 2 * context + n
                w_seqs += n
            budget = left
            head_blocked: str | None = None
            guard: int | None = None  # V1Scheduler._guard_blocks
            if num_preempted:
                head_blocked = "preempted" if waiting else None
            while waiting and budget > 0 and not num_preempted:
                if len(members) + len(others) >= max_num_seqs:
                    head_blocked = "max_num_seqs"
                    break
                head = waiting[0]
                tokens = head.prompt_tokens + head.num_output_tokens
                hit_tokens = 0
                table = released.get(head) if head.num_preemptions else None
                if table is not None:  # its own blocks, cached when it was preempted
                    hit_tokens = b * free_queue.num_hits(table, (tokens - 1) // b, free)  # type: ignore[union-attr]
                num_new = tokens - hit_tokens
                if not chunked and num_new > budget:
                    head_blocked = "budget"
                    break
                if num_new > budget:
                    num_new = budget
                if full_isl and -(tokens // -b) > free:  # V1Scheduler: whole sequence, its
                    head_blocked = "kv"  # hits all free (its own), so no eviction lowers it
                    break
                need_blocks = -((hit_tokens + num_new) // -b)  # its free hits count
                if need_blocks > free:
                    head_blocked = "kv"
                    if hit_tokens and tokens > budget:  # V1Scheduler._blocked_reason
                        guard = free_queue.blocks_before_evicting(table, hit_tokens // b, free)  # type: ignore[union-attr,arg-type]
                    break
                waiting.popleft()
                free -= need_blocks
                if free_queue is not None:  # (its hits are touched, not taken)
                    free_queue.take(need_blocks - hit_tokens // b)
                blocks_of[head] = need_blocks
                head.num_held_slots = need_blocks * b
                member_seq[head] = next_seq
                next_seq += 1
                others[head] = None
                if hit_tokens + num_new < tokens:
                    partial = True
                scheduled.append(head)
                new_tokens.append(num_new)
                w_new += num_new
                w_seqs += 1
                budget -= num_new
                if num_new != 1 or not head.num_output_tokens:
                    num_prefills += 1  # (else a decode: SchedulerCore's add_decode)
                if table is None:
                    if caching:  # (a preempted request always has a table then)
                        queries += tokens
                    w_pairs += num_new * num_new
                    continue
                # a preempted request comes back (PagedAllocator._admit, _record_lookup)
                del released[head]
                preempted_queries += tokens
                preempted_hits += hit_tokens
                if hit_tokens:
                    free_queue.touch(table, hit_tokens // b)  # type: ignore[union-attr]
                    keyed_of[head] = hit_tokens // b
                    head.num_computed_tokens = hit_tokens
                w_ctx += hit_tokens
                w_pairs += 2 * num_new * hit_tokens + num_new * num_new
            if waiting and head_blocked is None:
                head_blocked = "budget"
            if not scheduled and not n:
                raise NotModeledError("nothing can run: the head of the queue never fits")
            extendable = (
                not num_preempted
                and head_blocked != "budget"
                and not partial
                and len(scheduled) + n == len(members) + len(others)
            )

            for req in scheduled:
                if req.first_scheduled_time_s is None:
                    req.first_scheduled_time_s = now

            # -- durations (Engine._plan_durations) -----------------------------------------
            after = clock + 1
            k = 1
            num_running = len(members) + len(others)
            if extendable and num_running:
                for req, num_new in zip(
                    scheduled, new_tokens, strict=False
                ):  # prejoin (built together)
                    computed = req.num_computed_tokens + num_new
                    del others[req]
                    cohort.join(req, member_seq[req], after, computed, req.num_output_tokens + 1)
                top = cohort.next_finish_clock()
                assert top is not None
                remaining = top - after
                if remaining > 0:
                    k = min(MAX_SPAN_STEPS, remaining + 1)
                    k = 1 + cohort.max_steps_within(
                        after, k - 1, free if guard is None else min(free, guard)
                    )
            step0_s = step_s(w_new, w_ctx, w_pairs, w_seqs)
            m = len(members)
            durations: Any = None
            if 1 < k <= SHORT_SPAN_STEPS:  # computed only up to the next arrival (_cut_span)
                until = None
                if not waiting and num_arrived < num_requests:
                    until = requests[num_arrived].arrival_time_s - now
                durations = span_durations(
                    step0_s, float(cohort.sum_computed(after)), float(m), k - 1, until
                )
                k = len(durations)
            elif k > SHORT_SPAN_STEPS:
                durations = np.empty(k)
                durations[0] = step0_s
                durations[1:] = cost.decode_steps_s(
                    float(cohort.sum_computed(after)), float(m), k - 1
                )
                if not waiting and num_arrived < num_requests:  # Engine._cut_span
                    until_arrival = arrival_array[num_arrived] - now
                    k = min(k, steps_before(durations, until_arrival, "left") + 1)
            head_q = None
            if waiting and record_memory:
                head = waiting[0]
                tokens = head.prompt_tokens + head.num_output_tokens
                head_q = (head, min(tokens, budget0) if chunked and not full_isl else tokens)
            if k == 1:
                total_s = step0_s
                if record_memory:  # Engine._record_lazy, one step
                    token = cohort.sum_computed(after)
                    held, internal_now = cohort.sum_held, cohort.sum_internal
                    if others:
                        new = dict(zip(scheduled, new_tokens, strict=True))
                        for req in others:
                            length = req.num_computed_tokens + new.get(req, 0)
                            slots = -(length // -b) * b
                            token += length
                            held += slots
                            internal_now += max(
                                slots - (req.prompt_tokens + req.output_tokens - 1), 0
                            )
                    cats = categorize_step(allocator, held, token, internal_now, held, head_q)
                    recorder.record_step(
                        now,
                        step0_s,
                        num_running,
                        float(len(waiting)),
                        num_prefills,
                        num_preempted,
                        cats,
                    )
            else:  # LazyDecodes.extend, then Engine._record_lazy over the span
                held0, internal0 = cohort.sum_held, cohort.sum_internal
                span_blocks, span_internal = cohort.allocate_pooled(after, k - 1)
                free -= sum(span_blocks)
                if free_queue is not None:
                    free_queue.take(sum(span_blocks))
                durations = durations[:k]
                short = not isinstance(durations, np.ndarray)
                total_s = numpy_sum(durations) if short else float(durations.sum())
                if record_memory:
                    queue = waiting_per_step(
                        durations, now, len(waiting), arrival_array, num_arrived
                    )
                    token0 = cohort.sum_computed(after)
                    if short:
                        recorder.record_span_steps(
                            now,
                            durations,
                            total_s,
                            (held0, token0, internal0),
                            (b, [0, *span_blocks], [0, *span_internal], m),
                            0,
                            allocator,
                            head_q,
                            num_running,
                            queue,  # type: ignore[arg-type]
                            num_prefills,
                            0,
                        )
                    else:
                        steps = np.arange(k, dtype=np.int64)
                        token_k = token0 + m * steps
                        held_k = held0 + b * np.cumsum(np.array([0, *span_blocks], np.int64))
                        internal_k = internal0 + np.cumsum(np.array([0, *span_internal], np.int64))
                        cats_k = categorize(allocator, held_k, token_k, internal_k, held_k, head_q)
                        recorder.record(now, durations, cats_k, num_running, queue, num_prefills, 0)

            # -- the span passes (SimPy timeout), arrivals during it ------------------------
            step0_end_s = now + step0_s
            span_start = num_arrived
            now = now + total_s
            i = num_arrived
            while i < num_requests:
                t, together = _next_release(requests[i].arrival_time_s, last_release)
                if t > now or (t == now and not together and not _released_first(i, span_start)):
                    break
                last_release = t
                row_of[requests[i]] = i
                waiting.append(requests[i])
                i += 1
            num_arrived = i

            # -- complete (SchedulerCore.complete, lazy) --------------------------------------
            for req, num_new in zip(scheduled, new_tokens, strict=False):  # built together
                req.num_computed_tokens += num_new
                if req.num_computed_tokens >= req.prompt_tokens + req.num_output_tokens:
                    req.num_output_tokens += 1
                    if req.first_token_time_s is None:
                        req.first_token_time_s = step0_end_s
            finished = [
                r for r in scheduled if r.num_output_tokens >= r.output_tokens and r not in members
            ]
            clock = cohort.clock = after + k - 1
            for member in cohort.pop_finished():  # LazyDecodes.release
                cohort.materialize(member)
                req = member.request
                req.num_held_slots = held = cohort.leave(member)
                blocks_of[req] = held // b
                finished.append(req)
            if finished:
                if len(finished) > 1:
                    finished.sort(key=member_seq.__getitem__)
                for req in finished:
                    req.finish_time_s = now
                    req.num_held_slots = 0
                    num_blocks = blocks_of.pop(req)
                    free += num_blocks
                    if free_queue is not None:  # full blocks to the back, the partial one
                        num_full = req.num_computed_tokens // b  # to the front
                        free_queue.release(num_blocks, num_full, keyed_of.pop(req, 0))
                    others.pop(req, None)
                    del member_seq[req]
                    row = row_of.pop(req)
                    log_add(row, req)
                    requests[row] = None  # type: ignore[call-overload]  # freed as it finishes
                num_finished += len(finished)
                if on_finish is not None:
                    on_finish(len(finished))
            for req in scheduled:  # steady after step 0: join the cohort
                if (
                    req.finish_time_s is None
                    and req not in members
                    and req.num_output_tokens > 0
                    and req.num_computed_tokens == req.prompt_tokens + req.num_output_tokens - 1
                    and req.num_held_slots == -(req.num_computed_tokens // -b) * b
                ):
                    del others[req]
                    cohort.join(
                        req, member_seq[req], clock, req.num_computed_tokens, req.num_output_tokens
                    )
        allocator.prefix_cache_queries = queries
        allocator.preempted_queries = preempted_queries
        allocator.preempted_hits = preempted_hits
        self.num_preemptions = num_preemptions
        if free_queue is not None:
            free_queue.head(free)  # (the keyed blocks passed by the last takes are evictions)
            allocator.pool.num_evictions = free_queue.num_evictions


def _next_release(arrival_s: SimTime, last_release_s: SimTime) -> tuple[SimTime, bool]:
    """When ``kvsim.engine``'s SimPy arrival process releases a request arriving at
    ``arrival_s``, the previous one released at ``last_release_s``; and whether it is released
    together with the previous one (in the same process step).

    A request arriving ``delay > 0`` seconds after the previous release waits for a timeout
    and is released at that release plus the delay (``now + (a - now)``, which can differ from
    ``a`` in its last bit); one whose delay is not positive is released with the previous one.
    """
    delay = arrival_s - last_release_s
    if delay > 0:
        return last_release_s + delay, False
    return last_release_s, True


def _released_first(i: int, span_start: int) -> bool:
    """Whether request ``i`` (not released with the previous one), released at the very moment
    a span ends, is released before the engine resumes. SimPy orders events at one time by
    creation: request ``i``'s timeout was created when request ``i - 1`` was released, which is
    before the span's timeout iff that release came before the span started
    (``i - 1 < span_start``); the arrival process starts before the engine."""
    return i == 0 or i - 1 < span_start
