"""Results of one run: per-request records and the memory time series as DataFrames, plus a summary.

``Results.save(folder)`` writes ``requests.parquet``, ``memory.parquet``, ``summary.json``,
``config.json``, Vidur's ``request_metrics.csv`` and a Prometheus ``metrics.prom``
(``kvsim.exporters``) and, when frames were captured, ``mapframes.parquet`` and ``frames.parquet``;
``Results.load(folder)`` reads them back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from kvsim.config import SimConfig, format_validation_error
from kvsim.metrics import summarize
from kvsim.request import Request
from kvsim.textfile import read_json, read_parquet

REQUEST_COLUMNS = (
    "req_id",
    "parent_id",
    "arrival_time_s",
    "first_scheduled_time_s",
    "first_token_time_s",
    "finish_time_s",
    "prompt_tokens",
    "output_tokens",
    "num_preemptions",
    "num_cached_tokens",
)
# vLLM's per-request latency histograms (vllm/v1/metrics/stats.py), seconds: name -> (end, start)
LATENCY_INTERVALS = {
    "request_queue_time_seconds": ("first_scheduled_time_s", "arrival_time_s"),
    "request_prefill_time_seconds": ("first_token_time_s", "first_scheduled_time_s"),
    "request_decode_time_seconds": ("finish_time_s", "first_token_time_s"),
    "request_inference_time_seconds": ("finish_time_s", "first_scheduled_time_s"),
    "time_to_first_token_seconds": ("first_token_time_s", "arrival_time_s"),
    "e2e_request_latency_seconds": ("finish_time_s", "arrival_time_s"),
}


@dataclass
class Results:
    """One run's tables.

    Attributes:
        config: the run's config.
        requests: one row per request (``REQUEST_COLUMNS`` plus vLLM's latencies:
            ``LATENCY_INTERVALS``, ``request_time_per_output_token_seconds`` and the paper's
            ``normalized_latency_seconds``), seconds.
        memory: one row per engine event (``recorder.MEMORY_COLUMNS``), slots and seconds.
        summary: scalar metrics (see ``metrics.summarize``).
        mapframes, frames: memory-map frames captured during the run (``kvsim.poolmap``), or
            ``None`` when none was asked for.
    """

    config: SimConfig
    requests: pd.DataFrame
    memory: pd.DataFrame
    summary: dict[str, Any]
    mapframes: pd.DataFrame | None = None
    frames: pd.DataFrame | None = None

    def save(self, folder: str | Path, *, exports: bool = True) -> Path:
        """Write the tables as parquet and the summary/config as JSON into ``folder``, and with
        ``exports`` Vidur's ``request_metrics.csv`` and a Prometheus ``metrics.prom``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.requests.to_parquet(folder / "requests.parquet", index=False)
        self.memory.to_parquet(folder / "memory.parquet", index=False)
        if self.mapframes is not None and self.frames is not None:
            self.mapframes.to_parquet(folder / "mapframes.parquet", index=False)
            self.frames.to_parquet(folder / "frames.parquet", index=False)
        (folder / "summary.json").write_text(json.dumps(self.summary, indent=2, sort_keys=True))
        (folder / "config.json").write_text(self.config.canonical_json())
        if exports:
            from kvsim.exporters import write_exports  # prometheus_client only when saving

            write_exports(self, folder)  # request_metrics.csv (Vidur), metrics.prom (Prometheus)
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> Results:
        """Read a folder written by ``save``.

        Raises:
            FileNotFoundError: a file of the folder is missing.
            ValueError: a corrupt file, or a ``config.json`` that is not a valid config (naming
                the file).
        """
        folder = Path(folder)
        try:
            config = SimConfig.model_validate(read_json(folder / "config.json"))
        except ValidationError as err:
            raise ValueError(f"{folder / 'config.json'}: {format_validation_error(err)}") from None
        maps = folder / "mapframes.parquet"
        summary = read_json(folder / "summary.json")
        if not isinstance(summary, dict):
            raise ValueError(f"{folder / 'summary.json'}: expected a JSON object")
        return cls(
            config,
            read_parquet(folder / "requests.parquet"),
            read_parquet(folder / "memory.parquet"),
            summary,
            read_parquet(maps) if maps.is_file() else None,
            read_parquet(folder / "frames.parquet") if maps.is_file() else None,
        )


def request_frame(requests: list[Request]) -> pd.DataFrame:
    """Per-request DataFrame with vLLM's latency columns (seconds).

    ``request_time_per_output_token_seconds`` is decode time / (output tokens - 1) (vLLM's
    TPOT; NaN for one-token outputs); ``normalized_latency_seconds`` is E2E / output tokens (the
    PagedAttention paper's Figure 12 metric).
    """
    data: Any = {c: [getattr(r, c) for r in requests] for c in REQUEST_COLUMNS}  # column-wise
    if not requests:
        data = []  # pandas types an empty table built from rows as object columns
    df = pd.DataFrame(data, columns=list(REQUEST_COLUMNS)).astype(
        {
            "parent_id": "Int64",
            "first_scheduled_time_s": float,
            "first_token_time_s": float,
            "finish_time_s": float,
        }
    )
    for name, (end, start) in LATENCY_INTERVALS.items():
        df[name] = df[end] - df[start]
    decode_tokens = (df["output_tokens"] - 1).where(df["output_tokens"] > 1)
    df["request_time_per_output_token_seconds"] = df["request_decode_time_seconds"] / decode_tokens
    df["normalized_latency_seconds"] = df["e2e_request_latency_seconds"] / df["output_tokens"]
    return df


def build_results(
    config: SimConfig,
    requests: list[Request],
    memory: pd.DataFrame,
    num_preemptions: int,
    *,
    usable_capacity_tokens: int | None = None,
) -> Results:
    """Assemble ``Results`` from the engine's records.

    Args:
        memory: the recorded memory rows (``MemoryRecorder.frame``).
        usable_capacity_tokens: slots requests can hold (``Allocator.usable_capacity_tokens``),
            the denominator of ``kv_cache_usage_perc``; the capacity when ``None``.
    """
    req_df = request_frame(requests)
    mem_df = memory
    capacity = config.capacity_tokens
    start_s = end_s = None
    if config.summary_window == "arrivals" and len(req_df):
        first, last = req_df["arrival_time_s"].min(), req_df["arrival_time_s"].max()
        start_s, end_s = float(first + 0.1 * (last - first)), float(last)
    summary: dict[str, Any] = {"engine": config.engine_args.engine}
    summary.update(
        summarize(
            mem_df,
            req_df,
            capacity_slots=capacity,
            usable_capacity_slots=usable_capacity_tokens or capacity,
            start_s=start_s,
            end_s=end_s,
        )
    )
    summary["summary_window"] = config.summary_window
    summary["num_preemptions"] = num_preemptions
    finished = summary.get("num_requests") or 0
    summary["preemptions_per_request"] = num_preemptions / finished if finished else 0.0
    summary.update(engine_summary(config))
    summary["capacity_tokens"] = capacity
    summary["usable_capacity_tokens"] = usable_capacity_tokens or capacity
    summary["kv_cache_bytes"] = config.kv_cache_bytes
    summary["config_key"] = config.key()
    return Results(config, req_df, mem_df, summary)


def engine_summary(config: SimConfig) -> dict[str, Any]:
    """The resolved serving knobs a run used (what its profile defaulted), for its summary."""
    args = config.engine_args
    return {
        "max_num_seqs": args.max_num_seqs,
        "max_num_batched_tokens": args.max_num_batched_tokens,
        "max_model_len": args.max_model_len,
        "enable_chunked_prefill": args.enable_chunked_prefill,
        "enable_prefix_caching": args.enable_prefix_caching,
        "preemption_mode": args.preemption_mode or "default",
        "tensor_parallel_size": config.parallel.tensor_parallel_size,
        "pipeline_parallel_size": config.parallel.pipeline_parallel_size,
        "kv_cache_dtype": config.cache.kv_cache_dtype,
        "bytes_per_token": config.bytes_per_token,
    }
