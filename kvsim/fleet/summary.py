"""A fleet's results: each replica's metrics (its own ``Results`` summary, vLLM's names) and the
fleet's.

Fleet-wide, so that a fleet of one reports what its lone engine does (``tests/fleet/
test_one_engine.py``): latencies over every request (each counted once, from its arrival at the
fleet to its last token on the replica that decoded it); counts summed over replicas (steps,
preemptions, KV offload, speculative decoding, swap and copy-on-write counters), the rates
those counters give recomputed from the sums (acceptance rate, hit rates); prefix-cache queries
and hits over the replicas that prefill, so ``prefix_cache_hit_rate`` is the fleet's hits over its
lookups; KV-memory shares (hybrid groups' too) and gauges as the mean of the replicas' weighted
by the time each was busy (a replica's memory rows cover its engine steps, as a single run's
do), the per-step batch by its steps, peaks as the largest replica's; a replica's facts (pool,
groups, drafter) where every replica has the same; money over every GPU of the fleet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kvsim.config import SimConfig
from kvsim.core.kv.base import hit_rate
from kvsim.core.scheduler.spec import acceptance_rates
from kvsim.engine.intake import Rejected
from kvsim.engine.simulate import engine_counters, engine_memory_columns, keep_step_counts
from kvsim.fleet.fleet import Fleet
from kvsim.results import Results, build_results
from kvsim.results.metrics import (
    Columns,
    client_request_count,
    generated_tokens,
    latency_stats,
    output_tokens,
)
from kvsim.results.money import money_summary, price_or_none
from kvsim.results.saturation import past_saturation
from kvsim.results.tables import engine_summary, request_table_columns

if TYPE_CHECKING:
    import pandas as pd

# the replicas' metrics a fleet averages over their busy time
AVERAGED = (
    "token_states_pct",
    "reservation_pct",
    "internal_fragmentation_pct",
    "external_fragmentation_pct",
    "free_pct",
    "token_states_pct_of_used",
    "reservation_pct_of_used",
    "internal_fragmentation_pct_of_used",
    "external_fragmentation_pct_of_used",
    "token_utilization_perc",
    "kv_cache_usage_perc",
    "kv_cache_full_time_frac",
    "num_requests_running_mean",
    "num_requests_waiting_mean",
    "kv_saved_by_sharing_pct",
)
SUMMED = ("num_steps", "num_blocked_steps", "num_preemptions")
# the engine counters a fleet sums over the replicas that report them (``engine_counters``):
# KV offload (blocks, bytes, busy seconds, loads, lookups: ``OffloadConnector.summary``),
# speculative decoding's drafts and accepted tokens, swap, copy-on-write copies and the prefix
# cache's evictions; the rates read from them are recomputed from the sums (``_rates``)
SUMMED_PREFIXES = (
    "kv_offload_",
    "cpu_tier_",
    "disk_tier_",
    "external_prefix_cache_",
    "spec_decode_num_",
    "num_swap_",
    "swap_",
    "num_cow_",
    "cow_",
    "num_cache_evictions",
)
# one replica's facts (its pool, groups, drafter, cost model): reported where every replica
# that has one has the same, as a lone engine reports it (the replica table has each GPU's)
SHARED = (
    "cpu_tier_blocks",
    "disk_tier_blocks",
    "kv_cache_bytes",
    "usable_capacity_tokens",
    "num_gpu_blocks",
    "kv_cache_size_tokens",
    "kv_cache_max_concurrency",
    "kv_cache_block_size_tokens",
    "kv_cache_groups",
    "kv_cache_group_kinds",
    "kv_cache_group_layers",
    "kv_cache_padding_layers",
    "num_speculative_tokens",
    "num_lookahead_tokens",
    "layout_factor",
    "layout_source",
    "cost_source",
)
# a replica's row of the per-replica table (vLLM's metric names)
REPLICA_COLUMNS = (
    "num_requests",
    "time_to_first_token_seconds_p50",
    "time_to_first_token_seconds_p99",
    "request_time_per_output_token_seconds_p50",
    "request_time_per_output_token_seconds_p99",
    "e2e_request_latency_seconds_p50",
    "e2e_request_latency_seconds_p99",
    "request_queue_time_seconds_p50",
    "kv_cache_usage_perc",
    "kv_cache_usage_perc_max",
    "num_requests_running_mean",
    "num_requests_waiting_mean",
    "num_preemptions",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "prefix_cache_hit_rate",
    "throughput_output_tokens_per_s",
    "busy_s",
)


# a replica's row's KV offload columns, where a replica has a CPU tier
OFFLOAD_COLUMNS = (
    "external_prefix_cache_hit_rate",
    "kv_offload_bytes_cpu_to_gpu",
    "kv_offload_bytes_gpu_to_cpu",
    "disk_tier_promoted_blocks",
)


def _subset(columns: Columns, mask: npt.NDArray[np.bool_]) -> dict[str, Any]:
    return {name: values[mask] for name, values in columns.items()}


def replica_results(fleet: Fleet, served: Columns, prefilled: Columns | None) -> list[Results]:
    """Each replica's ``Results``: its requests (a prefill replica's: the prefill copies) and
    its memory rows, summarised as a single engine's run is, plus its pool's counters.

    Disaggregated, each side as its vLLM instance sees it (vLLM 0.34.0, NIXL connector): a
    decode replica's requests arrive when the proxy sends them on (their prefill copies' end),
    are first scheduled at the step after their KV arrived (vLLM records ``SCHEDULED`` then,
    not when it parks them for the transfer) and have their whole prompts cached, their own
    prefix hits and the tokens the connector pulled (``kv_transfer_received_tokens``: external
    ``p2p`` hits); ``kv_connector_queries`` counts the tokens each side asked its connector
    for (``Scheduler.schedule``: the prompt less the local hits; a prefill instance's go
    unanswered, or with a CPU tier are the tier's lookups, counted there). A decode replica's
    frontend reports each request's cached tokens as the
    prefill side found them (``Results.remote_cached_tokens``: vLLM's
    ``remote_prefill_cached_tokens``), which ``request_prefill_kv_computed_tokens`` observes."""
    out = []
    for replica in fleet.replicas:
        engine = replica.engine
        if replica.role == "prefill":
            assert prefilled is not None
            cols = _subset(prefilled, fleet.prefill_of == replica.index)
        else:
            mine = fleet.replica_of == replica.index
            cols = _subset(served, mine)
            if replica.role == "decode":
                cols["arrival_time_s"] = fleet.handoff_s[mine]
        if not len(cols["req_id"]):
            results = Results.from_records(
                replica.config, request_table_columns(cols), engine_memory_columns(engine), {}
            )
            results.summary = {  # (an idle server still reports its config and pool)
                "num_requests": 0,
                "num_preemptions": engine.num_preemptions,
                **engine_summary(replica.config),
                **engine_counters(engine),
                **(
                    {"kv_transfer_received_tokens": 0, "kv_connector_queries": 0}
                    if replica.role != "both"
                    else {}
                ),
            }
            keep_step_counts(results, engine)
            out.append(results)
            continue
        results = build_results(
            replica.config,
            cols,
            engine_memory_columns(engine),
            engine.num_preemptions,
            usable_capacity_tokens=engine.allocator.usable_capacity_tokens,
        )
        results.summary.update(engine_counters(engine))
        if replica.role == "decode":
            assert prefilled is not None
            mine = fleet.replica_of == replica.index
            remote = prefilled["num_cached_tokens"][mine]  # (rows: the same requests')
            results.remote_cached_tokens = dict(
                zip(cols["req_id"].tolist(), remote.tolist(), strict=True)
            )
            pulled = int(fleet.pulled_tokens[fleet.replica_of == replica.index].sum())
            results.summary["kv_transfer_received_tokens"] = pulled
            results.summary["kv_connector_queries"] = pulled
        elif replica.role == "prefill":
            asked = cols["prompt_tokens"] - cols["num_cached_tokens"]
            results.summary["kv_transfer_received_tokens"] = 0
            # with a CPU tier the one (multi-)connector lookup an admission makes is the
            # tier's, counted in external_prefix_cache_queries already (vLLM records the
            # connector's prefix-cache stats once an admission: Scheduler.schedule)
            tiered = "cpu_tier_blocks" in results.summary
            results.summary["kv_connector_queries"] = 0 if tiered else int(np.sum(asked))
        keep_step_counts(results, engine)
        out.append(results)
    return out


def replica_table(fleet: Fleet, replicas: list[Results]) -> pd.DataFrame:
    """One row per replica: index, role, model, GPU, TP, requests routed, and
    ``REPLICA_COLUMNS``."""
    import pandas as pd  # only when a fleet's tables are built

    rows = []
    for replica, results in zip(fleet.replicas, replicas, strict=True):
        summary = results.summary
        memory = replica.engine.recorder.arrays()
        row: dict[str, Any] = {
            "replica": replica.index,
            "role": replica.role,
            "model": replica.config.model.name,
            "gpu": replica.config.gpu.name,
            "tensor_parallel_size": replica.config.parallel.tensor_parallel_size,
            "num_routed": replica.num_routed,
        }
        busy = float(np.sum(memory["duration_s"]))
        for key in REPLICA_COLUMNS:
            row[key] = busy if key == "busy_s" else summary.get(key, np.nan)
        for key in OFFLOAD_COLUMNS:
            if any(key in r.summary for r in replicas):  # (a fleet with a CPU tier)
                row[key] = summary.get(key, np.nan)
        rows.append(row)
    return pd.DataFrame(rows)


def fleet_summary(
    config: SimConfig,
    fleet: Fleet,
    requests: Columns,
    replicas: list[Results],
    rejected: Rejected,
) -> dict[str, Any]:
    """The fleet's summary (see the module docstring)."""
    arrival, finish = requests["arrival_time_s"], requests["finish_time_s"]
    duration = float(np.max(finish) - np.min(arrival))
    num = len(arrival)
    out: dict[str, Any] = {"engine": config.replica_configs[0].engine_args.engine}
    # the engine's knobs and pool where every replica shares them, else None (replicas whose
    # overrides differ have no one value: replica 0's would read as the fleet's)
    knobs = [engine_summary(c) for c in config.replica_configs]
    out.update({k: v if all(o.get(k) == v for o in knobs) else None for k, v in knobs[0].items()})
    # (the longest request the fleet takes: the longest any replica holds)
    out["max_model_len"] = max(o["max_model_len"] for o in knobs)
    out["num_requests"] = num
    out["prompt_tokens_total"] = int(np.sum(requests["prompt_tokens"]))
    out["generation_tokens_total"] = generated_tokens(requests)
    out["prefix_cached_tokens_total"] = int(np.sum(requests["num_cached_tokens"]))
    out["duration_s"] = duration
    clients = client_request_count(requests)  # (a request of n > 1 once)
    out["throughput_requests_per_s"] = clients / duration if duration > 0 else np.nan
    tokens = output_tokens(requests)
    out["throughput_output_tokens_per_s"] = tokens / duration if duration > 0 else np.nan
    out.update(latency_stats(requests))
    busy = [float(np.sum(r.engine.recorder.arrays()["duration_s"])) for r in fleet.replicas]
    # hybrid groups' shares: only where every replica has the same groups (one of them without
    # them made replica 0's shares the fleet's)
    shares = [{k for k in s.summary if _is_group_share(k)} for s in replicas]
    groups = shares[0] if all(g == shares[0] for g in shares) else set()
    out.update(_weighted_means(replicas, [*AVERAGED, *sorted(groups)], busy))
    for key in SUMMED:
        out[key] = int(sum(s.summary.get(key, 0) for s in replicas))
    steps = [s.summary.get("num_steps", 0) for s in replicas]  # (a sample an engine step)
    out.update(_weighted_means(replicas, ["num_requests_running_step_mean"], steps))
    for key in ("kv_cache_usage_perc_max", "num_requests_running_max"):
        peaks = [s.summary[key] for s in replicas if key in s.summary]
        if peaks:
            out[key] = max(peaks)
    out["preemptions_per_request"] = out["num_preemptions"] / num if num else 0.0
    out.update(_prefix_cache_totals(fleet, replicas))
    out.update(_counter_totals(replicas))
    out.update(rejected.summary())
    spec = fleet.spec
    out["router"] = spec.router
    out["num_replicas"] = len(fleet.replicas)
    out["num_prefill_replicas"] = spec.prefill_replicas
    out["num_gpus"] = config.num_gpus
    out["replica_requests_max_share"] = _max_share(fleet)
    if spec.disaggregated:
        seconds = np.frombuffer(fleet.transfer_s, dtype=np.float64)
        out["kv_transfer_seconds_mean"] = float(seconds.mean()) if len(seconds) else np.nan
        out["kv_transfer_seconds_p99"] = (
            float(np.percentile(seconds, 99)) if len(seconds) else np.nan
        )
        out["kv_transfer_bytes_total"] = int(fleet.transfer_bytes)
    out["summary_window"] = "run"
    out["past_saturation"] = past_saturation(  # (its replicas' mean step)
        requests,
        duration * len(fleet.replicas),
        sum(r.engine.num_steps_run for r in fleet.replicas),
        config.workload.max_concurrency is not None,
    )
    pools = {c.capacity_tokens for c in config.replica_configs}
    out["capacity_tokens"] = pools.pop() if len(pools) == 1 else None
    out["config_key"] = config.key()
    out.update(
        money_summary(
            requests,
            duration,
            price_or_none(
                config.usd_per_hour, gpu_names=[c.gpu.name for c in config.replica_configs]
            ),
            config.slo.targets(),
        )
    )
    return out


def _max_share(fleet: Fleet) -> float:
    """The busiest replica's share of the requests routed among the replicas of its role (a
    disaggregated fleet's prefill replicas, its decode replicas; co-located, all), the largest
    over the roles with more than one replica (1 when none has; NaN when none was routed)."""
    roles: dict[str, list[int]] = {}
    for replica in fleet.replicas:
        roles.setdefault(replica.role, []).append(replica.num_routed)
    totals = {role: sum(routed) for role, routed in roles.items()}
    if not any(totals.values()):
        return float("nan")
    shares = [max(r) / totals[role] for role, r in roles.items() if len(r) > 1 and totals[role]]
    return max(shares, default=1.0)


def _prefix_cache_totals(fleet: Fleet, replicas: list[Results]) -> dict[str, Any]:
    """The fleet's prefix-cache counters (tokens; bytes): queries and hits over the replicas
    that prefill (a decode replica's lookups find the prompt it is sent), re-admissions'
    (``prefix_cache_preempted_*``) over every replica, and the KV not recomputed
    (``prefix_cache_saved_bytes``) as the bytes of both."""
    out: dict[str, Any] = {}
    if not any("prefix_cache_queries" in s.summary for s in replicas):
        return out
    fronts = [r.role != "decode" for r in fleet.replicas]
    totals = dict.fromkeys(("queries", "hits", "preempted_queries", "preempted_hits"), 0)
    saved = 0.0
    for results, front in zip(replicas, fronts, strict=True):
        summary = results.summary
        if "prefix_cache_queries" not in summary:
            continue
        hits, preempted = summary["prefix_cache_hits"], summary["prefix_cache_preempted_hits"]
        if front:
            totals["queries"] += summary["prefix_cache_queries"]
            totals["hits"] += hits
            saved += summary["prefix_cache_saved_bytes"]
        elif preempted:  # (its bytes a token: saved / (hits + preempted hits))
            saved += summary["prefix_cache_saved_bytes"] * preempted / (hits + preempted)
        totals["preempted_queries"] += summary["prefix_cache_preempted_queries"]
        totals["preempted_hits"] += preempted
    out.update({f"prefix_cache_{k}": int(v) for k, v in totals.items()})
    out["prefix_cache_hit_rate"] = hit_rate(totals["hits"], totals["queries"])
    out["prefix_cache_saved_bytes"] = round(saved)
    return out


def _is_group_share(key: str) -> bool:
    """Whether ``key`` is a hybrid KV cache group's share (``group{g}_{kind}_{category}_pct``:
    ``GroupRecorder.summary``)."""
    return key.startswith("group") and key[5:6].isdigit() and key.endswith("_pct")


def _weighted_means(
    replicas: list[Results], keys: list[str], weights: list[float]
) -> dict[str, float]:
    """Each of ``keys`` as the mean of the replicas' that report it, weighted by ``weights``
    (one a replica: its busy seconds, or its steps for a per-step mean); none where they weigh
    nothing."""
    out: dict[str, float] = {}
    for key in keys:
        pairs = [
            (s.summary[key], w) for s, w in zip(replicas, weights, strict=True) if key in s.summary
        ]
        weight = sum(w for _, w in pairs)
        if pairs and weight > 0:
            out[key] = sum(v * w for v, w in pairs) / weight
    return out


def _counter_totals(replicas: list[Results]) -> dict[str, Any]:
    """The fleet's engine counters: each of ``SUMMED_PREFIXES`` summed over the replicas that
    report it, the rates read from them recomputed from the sums (``_rates``), and each of
    ``SHARED`` where every replica reports it with the same value."""
    out: dict[str, Any] = {}
    for results in replicas:
        for key, value in results.summary.items():
            if key.startswith(SUMMED_PREFIXES) and key not in SHARED and not key.endswith("_rate"):
                out[key] = out.get(key, 0) + value
    for key in SHARED:
        if all(key in r.summary for r in replicas):
            values = {r.summary[key] for r in replicas}
            if len(values) == 1:
                out[key] = values.pop()
    out.update(_rates(out))
    return out


def _rates(totals: dict[str, Any]) -> dict[str, float]:
    """The rates a fleet's summed counters give, as a lone engine reads them from its own:
    the external prefix cache's hit rate (``OffloadConnector.summary``) and speculative
    decoding's acceptance rate and mean acceptance length (``SpecDecoder.summary``)."""
    out: dict[str, float] = {}
    if "external_prefix_cache_queries" in totals:
        out["external_prefix_cache_hit_rate"] = hit_rate(
            totals["external_prefix_cache_hits"], totals["external_prefix_cache_queries"]
        )
    if "spec_decode_num_drafts" in totals:
        out |= acceptance_rates(
            totals["spec_decode_num_drafts"],
            totals["spec_decode_num_draft_tokens"],
            totals["spec_decode_num_accepted_tokens"],
        )
    return out
