"""``simulate``: any run, one engine or a fleet, from its config to its ``Results``.

A config without ``[fleet]`` and with open-loop arrivals is one engine
(``kvsim.engine.simulate``, unchanged); a fleet, or closed-loop load
(``workload.max_concurrency``), runs here: every replica's engine in one SimPy environment
behind the router (``kvsim.fleet.fleet``), fed by the clients (``kvsim.fleet.clients``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from kvsim.config import SimConfig
from kvsim.engine import simulate as simulate_engine
from kvsim.engine.build import allocator_from_config
from kvsim.engine.intake import Rejected, prepare_requests, split_runnable
from kvsim.engine.simulate import engine_memory_columns
from kvsim.fleet.clients import ClosedLoop, open_loop
from kvsim.fleet.fleet import Fleet
from kvsim.fleet.summary import fleet_summary, replica_results, replica_table
from kvsim.results import Results
from kvsim.results.tables import request_table_columns
from kvsim.workload.request import Request, RequestSpec

logger = logging.getLogger(__name__)


def is_fleet(config: SimConfig) -> bool:
    """Whether ``config`` runs as a fleet: a ``[fleet]`` section, or closed-loop users."""
    return config.fleet is not None or config.workload.max_concurrency is not None


def simulate(
    config: SimConfig,
    requests: Sequence[Request | RequestSpec] | None = None,
    on_finish: Callable[[int], None] | None = None,
    **options: Any,
) -> Results:
    """Run ``config``: one engine (``kvsim.engine.simulate``, every option of it) or a fleet
    (``simulate_fleet``: ``strict`` and ``on_start``; a memory map is one engine's).

    Raises:
        ValueError: as the engine's, or a memory map asked of a fleet.
    """
    if not is_fleet(config):
        return simulate_engine(config, requests, on_finish, **options)
    maps = [k for k in ("map_at_s", "map_every_s", "map_max_frames") if options.get(k)]
    if maps:
        raise ValueError(
            f"{maps[0]}: the memory map shows one engine's pool; a fleet has "
            f"{config.num_gpus} GPUs in {len(config.replica_configs)} replica(s) (run one "
            "replica's config to see its map)"
        )
    return simulate_fleet(
        config,
        requests,
        on_finish,
        strict=bool(options.get("strict", False)),
        on_start=options.get("on_start"),
    )


def _runnable(
    config: SimConfig, requests: Sequence[Request | RequestSpec] | None, strict: bool
) -> tuple[list[Request], Rejected]:
    """The requests every replica can run (a router may send one anywhere of its role)."""
    replicas = config.replica_configs
    runnable, rejected = prepare_requests(replicas[0], requests, strict=strict)
    seen = {replicas[0].key()}
    for index, other in enumerate(replicas[1:], start=1):
        if other.key() in seen:
            continue
        seen.add(other.key())
        pool = allocator_from_config(other)
        runnable, more = split_runnable(runnable, other, pool)
        rejected.max_model_len += more.max_model_len
        rejected.kv_pool += more.kv_pool
        if not more.count:
            continue
        total = len(runnable) + more.count  # (those replica 0 could run)
        if strict or not runnable:
            raise ValueError(
                f"replica {index} (fleet.replica_overrides): "
                + more.message(
                    total, other.max_model_len, pool.usable_capacity_tokens, skipped=False
                )
            )
        logger.warning(  # (a router may send a request to any replica of its role)
            "replica %d (fleet.replica_overrides): %s",
            index,
            more.message(total, other.max_model_len, pool.usable_capacity_tokens),
        )
    return runnable, rejected


def simulate_fleet(
    config: SimConfig,
    requests: Sequence[Request | RequestSpec] | None = None,
    on_finish: Callable[[int], None] | None = None,
    *,
    strict: bool = False,
    on_start: Callable[[int], None] | None = None,
) -> Results:
    """Run a fleet (see the module docstring).

    Returns:
        ``Results`` whose ``requests`` has one row per request (with the ``replica`` that
        decoded it and, disaggregated, its ``prefill_replica``; -1 otherwise), ``memory`` every
        replica's rows (a ``replica`` column), ``replicas`` one row of vLLM-named metrics per
        replica, and a fleet-wide ``summary`` (``kvsim.fleet.summary``).

    Raises:
        ValueError: as ``kvsim.engine.simulate``; a run that ends with requests unfinished.
    """
    runnable, rejected = _runnable(config, requests, strict)
    if on_start is not None:
        on_start(len(runnable))
    del requests
    import simpy  # (kvsim imports SimPy only to run)

    env = simpy.Environment()
    fleet = Fleet(env, config, runnable, on_finish)
    fleet.start()
    users = config.workload.max_concurrency
    if users is not None:
        think = config.workload.think_time_s or 0.0
        fleet.closed = ClosedLoop(env, runnable, users, think, fleet.send)
    else:
        env.process(open_loop(env, runnable, fleet.send))
    num = len(runnable)
    del runnable
    env.run()
    if fleet.num_finished != num:
        raise RuntimeError(
            f"fleet invariant violated: {fleet.num_finished} of {num} requests finished when "
            "the simulation ran out of events"
        )
    logger.debug("simulated a fleet of %d replicas to t=%.1f s", len(fleet.replicas), env.now)
    return _results(config, fleet, rejected)


def _results(config: SimConfig, fleet: Fleet, rejected: Rejected) -> Results:
    served = fleet.served.columns()
    prefilled = fleet.prefilled.columns() if fleet.prefilled is not None else None
    replicas = replica_results(fleet, served, prefilled)  # (each replica's own view)
    if prefilled is not None:  # the request as its client sees it: prefilled, then decoded
        served = {
            **served,
            "num_cached_tokens": prefilled["num_cached_tokens"],
            "first_scheduled_time_s": prefilled["first_scheduled_time_s"],
            "num_preemptions": served["num_preemptions"] + prefilled["num_preemptions"],
        }
    table = dict(request_table_columns(served))
    table["replica"] = fleet.replica_of
    table["prefill_replica"] = fleet.prefill_of
    summary = fleet_summary(config, fleet, table, replicas, rejected)
    memory: dict[str, Any] = {}
    arrays = [engine_memory_columns(r.engine) for r in fleet.replicas]
    names = dict.fromkeys(name for a in arrays for name in a)  # (every replica's, in order)
    for name in names:
        memory[name] = np.concatenate(
            [
                a[name].astype(np.float64)
                if name == "time_s"
                # a column another replica lacks (no CPU tier, another model's groups): NaN
                else a.get(name, np.full(len(a["time_s"]), np.nan))
                for a in arrays
            ]
        )
    memory["replica"] = np.concatenate(
        [
            np.full(len(a["time_s"]), r.index, dtype=np.int64)
            for a, r in zip(arrays, fleet.replicas, strict=True)
        ]
    )
    results = Results.from_records(config, table, memory, summary)
    results.replicas = replica_table(fleet, replicas)
    results.replica_runs = replicas
    return results
