"""Snapshots of the physical KV pool at a chosen moment: who owns which slot range.

``snapshot_frame(config, time_s)`` replays the run up to ``time_s`` (simulated seconds) and reads
the allocator's ownership: a contiguous allocator's slabs (``SlabAllocator.slab_of``) or a paged
allocator's block tables (``PagedAllocator.block_tables``). Fast-forwarded decode spans are cut at
``time_s`` so that the pool is read during the step in flight at that moment, with the same token
counts the recorder uses (``Scheduler.lengths_during``). The engine itself is not changed.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import simpy

from kvsim.allocators.paged import PagedAllocator
from kvsim.allocators.slab import SlabAllocator
from kvsim.config import SimConfig
from kvsim.engine import MAX_SPAN_STEPS, Engine
from kvsim.request import Request
from kvsim.scheduler import StepPlan
from kvsim.workload import generate_requests

SNAPSHOT_COLUMNS = ("req_id", "start_slot", "num_slots", "num_tokens")


class _StoppingEngine(Engine):
    """An ``Engine`` whose decode spans never run past ``stop_s``; remembers the plan in flight."""

    def __init__(self, *args: Any, stop_s: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stop_s = stop_s
        self.plan_in_flight: StepPlan | None = None

    def _plan_durations(self, plan: StepPlan) -> np.ndarray:
        self.plan_in_flight = plan
        k = self.scheduler.max_extension(plan, MAX_SPAN_STEPS)
        context0 = float(sum(r.num_computed_tokens for r in plan.decodes))
        n = len(plan.decodes)
        contexts = context0 + n * np.arange(k, dtype=np.float64)
        durations = self.cost.decode_span_s(contexts, n, plan.prefill_tokens)
        ends = np.cumsum(durations)
        if k > 1 and not self.scheduler.waiting and self.num_arrived < len(self.requests):
            until_arrival = self._arrival_times[self.num_arrived] - self.env.now
            k = min(k, int(np.searchsorted(ends, until_arrival)) + 1)  # as Engine does
        until_stop = self.stop_s - self.env.now
        if until_stop > 0:  # end the span with the step in flight at stop_s
            k = min(k, int(np.searchsorted(ends, until_stop, side="right")) + 1)
        durations = durations[:k]
        self.scheduler.extend(plan, k)
        return durations


def _token_counts(engine: _StoppingEngine) -> dict[int, int]:
    """Token states of every running request during the step in flight.

    The span in flight was cut to end with the step in flight at ``stop_s``: its last step.
    """
    plan = engine.plan_in_flight
    if plan is None or plan.is_empty:
        return {}
    reqs, lengths = engine.scheduler.lengths_during(plan)
    return {r.req_id: int(n) for r, n in zip(reqs, lengths[:, -1], strict=True)}


def pool_ownership(allocator: Any, tokens: dict[int, int]) -> pd.DataFrame:
    """Ownership rows (``SNAPSHOT_COLUMNS``) of a slab or paged allocator.

    Args:
        allocator: a ``SlabAllocator`` or ``PagedAllocator``.
        tokens: req_id -> token states it holds now.

    Returns:
        One row per slab (contiguous) or per block (paged): owner, first slot, slots, and the
        token states written in it; rows sorted by ``start_slot``.
    """
    rows: list[tuple[int, int, int, int]] = []
    if isinstance(allocator, PagedAllocator):
        b = allocator.block_size_tokens
        for req_id, table in allocator.block_tables.items():
            n = tokens.get(req_id, 0)
            for i, block_id in enumerate(table):
                rows.append((req_id, block_id * b, b, int(np.clip(n - i * b, 0, b))))
    elif isinstance(allocator, SlabAllocator):
        for req_id in sorted(tokens):
            slab = allocator.slab_of(req_id)
            if slab is not None:
                rows.append((req_id, slab[0], slab[1], min(tokens[req_id], slab[1])))
    else:
        raise TypeError(f"no snapshot for allocator {type(allocator).__name__}")
    frame = pd.DataFrame(rows, columns=list(SNAPSHOT_COLUMNS), dtype=np.int64)
    return frame.sort_values("start_slot", ignore_index=True)


def snapshot_frame(config: SimConfig, time_s: float,
                   requests: list[Request] | None = None) -> pd.DataFrame:
    """The KV pool of ``config``'s run at simulated time ``time_s``.

    Args:
        config: the run.
        time_s: the moment, in simulated seconds (after the last finish: an empty pool).
        requests: the workload (generated from the config and seed when ``None``).

    Returns:
        ``pool_ownership`` rows; ``attrs`` holds ``capacity_slots``, ``time_s`` and ``allocator``.
    """
    if requests is None:
        rng = np.random.default_rng(config.seed)
        requests = generate_requests(config.workload, rng,
                                     max_model_len=config.scheduler.max_model_len)
    env = simpy.Environment()
    engine = _StoppingEngine(env, config, requests, stop_s=time_s)
    env.process(engine.arrival_source())
    env.process(engine.engine_loop())
    env.run(until=time_s)
    frame = pool_ownership(engine.allocator, _token_counts(engine))
    frame.attrs.update(capacity_slots=config.capacity_tokens, time_s=time_s,
                       allocator=config.cache.allocator)
    return frame
