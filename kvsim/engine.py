"""SimPy wiring: an arrival source and one engine loop, built from a ``SimConfig``.

Time passes only here. The engine loop plans a step with the scheduler, asks the cost model for
its duration, records where the KV slots went and yields one timeout. Stable decode stretches are
fast-forwarded: one event covers every step up to the next finish, the next failed growth, or (when
nobody waits) the step during which the next request arrives. No process or event per token.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator
from typing import Any

import numpy as np
import simpy

from kvsim.allocators import Allocator, make_allocator
from kvsim.config import SimConfig
from kvsim.cost import StepCostModel
from kvsim.recorder import MemoryRecorder, span_categories
from kvsim.request import Request
from kvsim.results import Results, build_results
from kvsim.scheduler import Scheduler, StepPlan
from kvsim.swap import SwapSpace
from kvsim.workload import generate_requests

logger = logging.getLogger(__name__)

MAX_SPAN_STEPS = 4096  # bounds the [n, k] arrays of one fast-forwarded span


def allocator_from_config(config: SimConfig) -> Allocator:
    """Build the configured allocator on the config's KV pool."""
    return make_allocator(
        config.cache.allocator,
        capacity_tokens=config.capacity_tokens,
        bytes_per_token=config.model.bytes_per_token,
        block_size_tokens=config.cache.block_size_tokens,
        watermark=config.cache.watermark,
        reservation=config.cache.reservation,
        enable_prefix_caching=config.cache.enable_prefix_caching,
        beam_survival=config.cache.beam_survival,
        seed=config.seed,
        max_model_len=config.scheduler.max_model_len,
        full_context_tokens=config.model.max_position_embeddings,
    )


class Engine:
    """The simulated serving engine: owns the scheduler, cost model and recorder.

    Args:
        env: the SimPy environment.
        config: the run's config.
        requests: the workload, sorted by ``arrival_time_s``.
        on_finish: called with the number of requests finished by each event (progress bars).
        stop_at_s: if given, no fast-forwarded span runs past the step in flight at this
            simulated time, so the pool can be inspected then (``kvsim.snapshot``).
    """

    def __init__(
        self,
        env: simpy.Environment,
        config: SimConfig,
        requests: list[Request],
        on_finish: Callable[[int], None] | None = None,
        stop_at_s: float | None = None,
    ) -> None:
        self.env = env
        self.config = config
        self.requests = requests
        self.allocator = allocator_from_config(config)
        self.swap = swap_space_from_config(config)  # [swap] None under recompute
        self.scheduler = Scheduler(self.allocator, config.scheduler, self.swap)
        self.cost = StepCostModel(
            config.model,
            config.gpu,
            config.cost,
            paged=hasattr(self.allocator, "block_size_tokens"),
            block_size_tokens=config.cache.block_size_tokens,
        )
        self.swap_time_s = 0.0
        self.recorder = MemoryRecorder(config.capacity_tokens)
        self.on_finish = on_finish
        self.stop_at_s = stop_at_s
        self.max_span_steps = 1 if config.memory_resolution == "step" else MAX_SPAN_STEPS
        self.plan_in_flight: StepPlan | None = None
        self.num_arrived = 0
        self.num_finished = 0
        self._wake: simpy.Event = env.event()
        self._arrival_times = np.array([r.arrival_time_s for r in requests], np.float64)

    def arrival_source(self) -> Generator[simpy.Event, Any, None]:
        """SimPy process: releases each request into the waiting queue at its arrival time."""
        for req in self.requests:
            delay = req.arrival_time_s - self.env.now
            if delay > 0:
                yield self.env.timeout(delay)
            self.scheduler.add_request(req)
            self.num_arrived += 1
            if not self._wake.triggered:
                self._wake.succeed()

    def engine_loop(self) -> Generator[simpy.Event, Any, None]:
        """SimPy process: one scheduling step (or fast-forwarded decode span) per event."""
        total = len(self.requests)
        while self.num_finished < total:
            if not self.scheduler.has_work():
                self._wake = self.env.event()
                yield self._wake
                continue
            plan = self.scheduler.schedule()
            if plan.is_empty:
                head, num_tokens = (
                    self.scheduler.waiting[0],
                    self.scheduler.waiting[0].num_prefill_tokens,
                )
                raise ValueError(
                    f"request {head.req_id} ({head.num_seqs} sequence(s), prompt "
                    f"{head.prompt_tokens} tokens) can never be admitted: it needs "
                    f"{self.allocator.admission_slots_needed(head, num_tokens + 1)} KV slots at "
                    f"once ({self.config.cache.allocator}, reservation "
                    f"{self.config.cache.reservation}) and the empty pool holds "
                    f"{self.allocator.capacity_tokens}; raise the KV budget or lower "
                    "n / beam_width / max_model_len"
                )
            durations = self._plan_durations(plan)
            if self.config.debug_invariants:
                self.allocator.check_invariants()
                if self.swap is not None:
                    self.swap.check_invariants()
            self._record(plan, durations)
            first_step_end_s = self.env.now + float(durations[0])
            yield self.env.timeout(float(durations.sum()))
            finished = self.scheduler.complete(plan, self.env.now, first_step_end_s)
            if finished:
                self.num_finished += len(finished)
                if self.on_finish is not None:
                    self.on_finish(len(finished))

    def _plan_durations(self, plan: StepPlan) -> np.ndarray:
        """Fast-forward ``plan`` as far as nothing changes and return its step durations (s).

        Step 0 runs the prefills and reads the decodes' KV; step ``j >= 1`` decodes every request
        of the plan, reading ``S + j * N`` tokens of KV (``S`` = tokens before step 0, ``N`` =
        requests).
        """
        k = self.scheduler.max_extension(plan, self.max_span_steps)
        assert plan.lengths0 is not None
        num_dec = len(plan.decodes)
        if plan.num_seqs is None:  # single sequences
            weighted, num_seqs, num_dec_seqs = plan.lengths0, float(len(plan.lengths0)), num_dec
        else:  # a group of w sequences reads and writes w times
            weighted = plan.num_seqs * plan.lengths0
            num_seqs, num_dec_seqs = float(plan.num_seqs.sum()), int(plan.num_seqs[:num_dec].sum())
        steps = np.arange(k, dtype=np.float64)
        contexts = float(weighted.sum()) + num_seqs * steps
        contexts[0] = float(weighted[:num_dec].sum())
        num_decodes = np.full(k, num_seqs)
        num_decodes[0] = num_dec_seqs
        durations = self.cost.decode_span_s(contexts, num_decodes, plan.prefill_tokens)
        if k > 1 and not self.scheduler.waiting and self.num_arrived < len(self.requests):
            until_arrival = self._arrival_times[self.num_arrived] - self.env.now
            k = min(k, int(np.searchsorted(np.cumsum(durations), until_arrival)) + 1)
        if k > 1 and self.stop_at_s is not None and self.stop_at_s > self.env.now:
            until_stop = self.stop_at_s - self.env.now  # end with the step in flight then
            k = min(k, int(np.searchsorted(np.cumsum(durations), until_stop, side="right")) + 1)
        durations = durations[:k]
        self.scheduler.extend(plan, k)
        self.plan_in_flight = plan
        if plan.swap_blocks:  # [swap] PCIe transfers of this step
            swap_s = self.cost.swap_s(plan.swap_blocks)
            durations[0] += swap_s
            self.swap_time_s += swap_s
        return durations

    def _record(self, plan: StepPlan, durations: np.ndarray) -> None:
        if not self.config.record_memory:
            return
        lengths = self.scheduler.span_lengths(plan)
        assert plan.final is not None
        assert plan.held0 is not None
        cats = span_categories(
            self.allocator,
            plan.members,
            lengths,
            plan.final,
            plan.held0,
            self.scheduler.head_of_queue(),
        )
        self.recorder.record(
            self.env.now,
            durations,
            cats,
            len(lengths),
            len(self.scheduler.waiting),
            len(plan.prefills),
            plan.num_preempted,
        )


def swap_space_from_config(config: SimConfig) -> SwapSpace | None:
    """The CPU swap pool of a ``preemption_mode = "swap"`` run (``None`` under recompute)."""
    if config.scheduler.preemption_mode != "swap":
        return None
    return SwapSpace.from_gib(
        config.scheduler.swap_space_gib,
        block_size_tokens=config.cache.block_size_tokens,
        bytes_per_token=config.model.bytes_per_token,
    )


def simulate(
    config: SimConfig,
    requests: list[Request] | None = None,
    on_finish: Callable[[int], None] | None = None,
) -> Results:
    """Run one simulation.

    Args:
        config: the run (model, GPU, cache, scheduler, workload, seed).
        requests: a ready workload; generated from ``config.workload`` and ``config.seed`` if None.
        on_finish: progress callback, called with the number of requests finished per event.

    Returns:
        ``Results`` with per-request records, the memory time series and a summary.

    Raises:
        ValueError: a request can never fit (longer than max_model_len or the KV pool).
    """
    if requests is None:
        rng = np.random.default_rng(config.seed)
        requests = generate_requests(
            config.workload, rng, max_model_len=config.scheduler.max_model_len
        )
    limit = min(config.scheduler.max_model_len, config.capacity_tokens)
    for req in requests:
        if req.final_tokens > limit:
            raise ValueError(
                f"request {req.req_id}: prompt + output = {req.final_tokens} tokens exceeds "
                f"min(max_model_len, KV capacity) = {limit}"
            )
        if req.num_seqs * req.final_tokens > config.capacity_tokens:
            raise ValueError(
                f"request {req.req_id}: a group of {req.num_seqs} sequences of {req.final_tokens} "
                f"tokens may need {req.num_seqs * req.final_tokens} KV slots, more than the "
                f"capacity of {config.capacity_tokens}; raise the KV budget or lower n/beam_width"
            )
    env = simpy.Environment()
    engine = Engine(env, config, requests, on_finish)
    env.process(engine.arrival_source())
    env.process(engine.engine_loop())
    env.run()
    logger.debug("simulated %d requests to t=%.1f s", len(requests), env.now)
    results = build_results(
        config, requests, engine.recorder.rows, engine.scheduler.num_preemptions
    )
    if engine.swap is not None:  # [swap]
        results.summary.update(engine.swap.summary(engine.swap_time_s))
    prefix_summary = getattr(engine.allocator, "prefix_cache_summary", None)
    if prefix_summary is not None:  # shared-prefix / radix allocators
        results.summary.update(prefix_summary())
    results.summary["layout_factor"] = engine.cost.layout_factor
    results.summary["layout_source"] = engine.cost.layout_source
    return results
