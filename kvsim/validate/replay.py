"""Replaying a measured run in kvsim and setting its predictions beside the measurements.

``replay_run`` builds the run's ``SimConfig`` from its own settings (model, GPU, tensor
parallelism, the KV pool vLLM measured, block size, scheduler knobs, prefix caching, async
scheduling), serves the run's requests at their recorded arrivals, and returns one row per
measured request with the measured and predicted TTFT, E2E, TPOT and queue time (seconds), plus
kvsim's KV usage at the moments vLLM logged its own. Latencies timed by the load generator
(``MeasuredRun.clock == "client"``) include the HTTP and API-server path: the replay adds
``frontend_latency_s`` (FITTED with the step cost, ``kvsim.validate.fit``) to TTFT and E2E.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from pydantic import ValidationError

from kvsim.config import CostSpec, ParallelConfig, SimConfig, kv_bytes_per_token_per_gpu
from kvsim.config.cost_spec import cost_fit_table
from kvsim.engine import simulate
from kvsim.validate.runs import MeasuredRun

METRICS = ("ttft_s", "e2e_s", "tpot_s", "queue_s")


@dataclass(frozen=True)
class Replay:
    """A measured run and kvsim's replay of it.

    Attributes:
        run: the measured run.
        requests: one row per measured request: ``req_id``, ``stage``, ``measured_<m>`` and
            ``predicted_<m>`` for each of ``METRICS`` (seconds; NaN where not measured).
        kv_usage: ``time_s``, vLLM's ``kv_cache_pct`` and kvsim's ``predicted_kv_pct`` (and
            the running / waiting gauges of both), ``None`` when the run logged none.
        summary: kvsim's run summary (``Results.summary``).
        frontend_latency_s: what was added to the predicted TTFT and E2E.
    """

    run: MeasuredRun
    requests: pd.DataFrame
    kv_usage: pd.DataFrame | None
    summary: dict[str, object]
    frontend_latency_s: float


def run_config(run: MeasuredRun, cost: CostSpec | None = None) -> SimConfig:
    """The ``SimConfig`` of ``run``: its model, GPU, parallelism, KV pool and scheduler."""
    data: dict[str, object] = {
        "model": run.model,
        "gpu": run.gpu,
        "parallel": {"tensor_parallel_size": run.tensor_parallel_size},
        "cost": cost or CostSpec(),
        "record_memory": run.kv_usage is not None,
        "scheduler": {
            "engine": "vllm-v1",
            "max_num_seqs": run.max_num_seqs,
            "max_num_batched_tokens": run.max_num_batched_tokens,
            "max_model_len": run.max_model_len,
            "async_scheduling": run.async_scheduling,
        },
    }
    parallel = ParallelConfig(tensor_parallel_size=run.tensor_parallel_size)
    per_token = kv_bytes_per_token_per_gpu(run.model, parallel)
    kv_bytes = run.num_gpu_blocks * run.block_size_tokens * per_token
    cache = {
        "kv_cache_bytes": kv_bytes,
        "block_size_tokens": run.block_size_tokens,
        "enable_prefix_caching": run.enable_prefix_caching,
    }
    try:
        return SimConfig.model_validate({**data, "cache": cache})
    except ValidationError as err:  # (pydantic's dump named no run and no file)
        from kvsim.config.sim import format_validation_error

        said = "; ".join(format_validation_error(err).splitlines())
        files = "its replay file's config" if run.kind == "h100" else "its meta.json"
        raise ValueError(
            f"run {run.name}: the server settings in {files} (tensor_parallel_size "
            f"{run.tensor_parallel_size}, {run.num_gpu_blocks:,} blocks of "
            f"{run.block_size_tokens} tokens, max_model_len {run.max_model_len:,}) make no "
            f"config kvsim can replay: {said}"
        ) from None


def default_frontend_latency_s() -> float:
    """The fitted frontend latency (seconds) of the shipped table (``cost_fit.toml``)."""
    return float(cost_fit_table().get("validate", {}).get("frontend_latency_s", 0.0))


def replay_run(
    run: MeasuredRun, cost: CostSpec | None = None, frontend_latency_s: float | None = None
) -> Replay:
    """Replay ``run`` with ``cost`` (``None``: ``CostSpec()``, the fitted table).

    Args:
        frontend_latency_s: seconds added to client-timed TTFT and E2E (``None``: the fitted
            table's); nothing is added to engine-timed runs.

    Raises:
        ValueError: a request the replay could not serve (longer than the pool or the model).
    """
    if frontend_latency_s is None:
        frontend_latency_s = default_frontend_latency_s()
    added = frontend_latency_s if run.clock == "client" else 0.0
    config = run_config(run, cost)
    results = simulate(config, run.requests, strict=True)
    table = results.requests.set_index("req_id")
    measured = run.measured.set_index("req_id")
    rows = table.loc[measured.index]
    predicted = pd.DataFrame(index=measured.index)
    predicted["ttft_s"] = rows["first_token_time_s"] - rows["arrival_time_s"] + added
    predicted["e2e_s"] = rows["finish_time_s"] - rows["arrival_time_s"] + added
    decodes = (rows["output_tokens"] - 1).clip(lower=1)
    predicted["tpot_s"] = (rows["finish_time_s"] - rows["first_token_time_s"]) / decodes
    predicted["queue_s"] = rows["first_scheduled_time_s"] - rows["arrival_time_s"]
    out = pd.DataFrame({"req_id": measured.index, "stage": measured["stage"].to_numpy()})
    for metric in METRICS:
        out[f"measured_{metric}"] = measured[metric].to_numpy()
        out[f"predicted_{metric}"] = predicted[metric].to_numpy()
    usage = None
    if run.kv_usage is not None:
        usage = kv_usage_beside(run.kv_usage, results.memory, config, results.summary)
    return Replay(run, out, usage, dict(results.summary), added)


def kv_usage_beside(
    logged: pd.DataFrame, memory: pd.DataFrame, config: SimConfig, summary: dict[str, object]
) -> pd.DataFrame:
    """kvsim's KV usage (percent, vLLM's ``kv_cache_usage_perc``: allocated blocks but the null
    block over the usable ones) and gauges at each logged moment, beside vLLM's.

    The memory table holds one row per engine event, a span's row its steps' duration-weighted
    mean; the value at ``t`` is the row whose event was under way then (0 between events).
    """
    blocks = summary.get("num_gpu_blocks", 0)
    usable = blocks if isinstance(blocks, int) else 0
    capacity = config.capacity_tokens
    usable_slots = (usable - 1) * config.cache.block_size_tokens if usable > 1 else capacity
    unusable = capacity - usable_slots
    starts = memory["time_s"].to_numpy()
    ends = starts + memory["duration_s"].to_numpy()
    at = np.searchsorted(starts, logged["time_s"].to_numpy(), side="right") - 1
    inside = (at >= 0) & (ends[np.clip(at, 0, None)] > logged["time_s"].to_numpy())
    pick = np.clip(at, 0, None)
    usage = (memory["allocated"].to_numpy()[pick] - unusable) / usable_slots
    out = logged.copy()
    out["predicted_kv_pct"] = np.where(inside, 100.0 * np.clip(usage, 0.0, 1.0), 0.0)
    for gauge in ("running", "waiting"):
        column = f"num_requests_{gauge}"
        out[f"predicted_{gauge}"] = np.where(inside, memory[column].to_numpy()[pick], 0.0)
    return out
