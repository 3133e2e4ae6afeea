"""Snapshots of the physical KV pool at a chosen moment: who owns which slot range.

``snapshot_frame(config, time_s)`` replays the run up to ``time_s`` (simulated seconds) and reads
the allocator's ownership: a contiguous allocator's slabs (``SlabAllocator.slab_of``) or a paged
allocator's block tables (``PagedAllocator.block_tables`` and its groups' tables). Fast-forwarded
decode spans are cut at ``time_s`` (``Engine(stop_at_s=...)``) so that the pool is read during the
step in flight at that moment, with the same token counts the recorder uses
(``SchedulerCore.span_lengths``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import simpy

from kvsim.allocators.paged import PagedAllocator
from kvsim.allocators.slab import SlabAllocator
from kvsim.config import SimConfig
from kvsim.engine import Engine, prepare_requests
from kvsim.request import Request

SNAPSHOT_COLUMNS = ("req_id", "start_slot", "num_slots", "num_tokens")


def _token_counts(engine: Engine) -> dict[int, int]:
    """Token states of every running request during the step in flight at ``stop_at_s``.

    The engine cut the span in flight to end with that step: its last column.
    """
    plan = engine.plan_in_flight
    if plan is None or plan.is_empty:
        return {}
    lengths = engine.scheduler.span_lengths(plan)
    return {r.req_id: int(n) for r, n in zip(plan.members, lengths[:, -1], strict=True)}


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
        tables = [(rid, t) for rid, t in allocator.block_tables.items()]
        tables += [(rid, t) for rid, g in allocator.groups.items() for t in g.seqs]
        seen: set[int] = set()
        for req_id, table in tables:
            n = tokens.get(req_id, 0)
            for i, block_id in enumerate(table):
                if block_id not in seen:  # a block shared by sequences or requests: once
                    seen.add(block_id)
                    rows.append((req_id, block_id * b, b, int(np.clip(n - i * b, 0, b))))
    elif isinstance(allocator, SlabAllocator):
        for req_id in sorted(tokens):
            for start, size in allocator.slabs_of(req_id):
                rows.append((req_id, start, size, min(tokens[req_id], size)))
    else:
        raise TypeError(f"no snapshot for allocator {type(allocator).__name__}")
    frame = pd.DataFrame(rows, columns=list(SNAPSHOT_COLUMNS), dtype=np.int64)
    return frame.sort_values("start_slot", ignore_index=True)


def snapshot_frame(
    config: SimConfig, time_s: float, requests: list[Request] | None = None
) -> pd.DataFrame:
    """The KV pool of ``config``'s run at simulated time ``time_s``.

    Args:
        config: the run.
        time_s: the moment, in simulated seconds (after the last finish: an empty pool).
        requests: the workload (generated from the config and seed when ``None``).

    Returns:
        ``pool_ownership`` rows; ``attrs`` holds ``capacity_slots``, ``time_s`` and ``allocator``.
    """
    runnable, _ = prepare_requests(config, requests)
    env = simpy.Environment()
    engine = Engine(env, config, runnable, stop_at_s=time_s)
    env.process(engine.arrival_source())
    env.process(engine.engine_loop())
    env.run(until=time_s)
    frame = pool_ownership(engine.allocator, _token_counts(engine))
    frame.attrs.update(
        capacity_slots=config.capacity_tokens, time_s=time_s, allocator=config.cache.allocator
    )
    return frame
