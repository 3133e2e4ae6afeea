"""Results of one run: per-request records and the memory time series as DataFrames, plus a summary.

``Results.save(folder)`` writes ``requests.parquet``, ``memory.parquet``, ``summary.json`` and
``config.json``; ``Results.load(folder)`` reads them back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from kvsim.config import SimConfig
from kvsim.metrics import summarize
from kvsim.recorder import MEMORY_COLUMNS
from kvsim.request import Request

REQUEST_COLUMNS = (
    "req_id",
    "arrival_time_s",
    "first_token_time_s",
    "finish_time_s",
    "prompt_tokens",
    "output_tokens",
    "num_preemptions",
)


@dataclass
class Results:
    """One run's tables.

    Attributes:
        config: the run's config.
        requests: one row per request (``REQUEST_COLUMNS`` plus ``ttft_s``, ``tpot_s``,
            ``e2e_s``, ``normalized_latency_s``), seconds.
        memory: one row per engine event (``recorder.MEMORY_COLUMNS``), slots and seconds.
        summary: scalar metrics (see ``metrics.summarize``).
    """

    config: SimConfig
    requests: pd.DataFrame
    memory: pd.DataFrame
    summary: dict[str, Any]

    def save(self, folder: str | Path) -> Path:
        """Write the tables as parquet and the summary/config as JSON into ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.requests.to_parquet(folder / "requests.parquet", index=False)
        self.memory.to_parquet(folder / "memory.parquet", index=False)
        (folder / "summary.json").write_text(json.dumps(self.summary, indent=2, sort_keys=True))
        (folder / "config.json").write_text(self.config.canonical_json())
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> Results:
        """Read a folder written by ``save``."""
        folder = Path(folder)
        config = SimConfig.model_validate_json((folder / "config.json").read_text())
        return cls(
            config,
            pd.read_parquet(folder / "requests.parquet"),
            pd.read_parquet(folder / "memory.parquet"),
            json.loads((folder / "summary.json").read_text()),
        )


def request_frame(requests: list[Request]) -> pd.DataFrame:
    """Per-request DataFrame with latency columns (seconds)."""
    df = pd.DataFrame(
        [[getattr(r, c) for c in REQUEST_COLUMNS] for r in requests], columns=list(REQUEST_COLUMNS)
    ).astype({"first_token_time_s": float, "finish_time_s": float})
    df["ttft_s"] = df["first_token_time_s"] - df["arrival_time_s"]
    df["e2e_s"] = df["finish_time_s"] - df["arrival_time_s"]
    decode_tokens = (df["output_tokens"] - 1).where(df["output_tokens"] > 1)
    df["tpot_s"] = (df["finish_time_s"] - df["first_token_time_s"]) / decode_tokens
    df["normalized_latency_s"] = df["e2e_s"] / df["output_tokens"]
    return df


def build_results(
    config: SimConfig,
    requests: list[Request],
    memory_rows: list[tuple[float, ...]],
    num_preemptions: int,
) -> Results:
    """Assemble ``Results`` from the engine's records."""
    req_df = request_frame(requests)
    mem_df = pd.DataFrame(memory_rows, columns=list(MEMORY_COLUMNS))
    summary = summarize(mem_df, req_df, capacity_slots=config.capacity_tokens)
    summary["num_preemptions"] = num_preemptions
    summary["capacity_tokens"] = config.capacity_tokens
    summary["kv_cache_bytes"] = config.kv_cache_bytes
    summary["config_key"] = config.key()
    return Results(config, req_df, mem_df, summary)
