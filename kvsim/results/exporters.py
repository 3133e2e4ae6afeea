"""Results in other tools' formats: Vidur's ``request_metrics.csv`` and a Prometheus snapshot.

- :func:`vidur_request_metrics`: one row per request under the column names of Vidur's
  ``request_metrics.csv`` (microsoft/vidur, ``vidur/metrics/constants.py``
  ``RequestMetricsTimeDistributions`` and ``RequestMetricsHistogram``, written by
  ``MetricsStore._store_request_metrics`` in ``vidur/metrics/metrics_store.py``, with the values of
  ``vidur/entities/request.py``), seconds and tokens, so Vidur's analysis scripts read kvsim runs.
- ``metrics.prom``: ``kvsim.results.prometheus.prometheus_snapshot``, under vLLM's metric names.

``write_exports(results, folder)`` writes both (``request_metrics.csv``, ``metrics.prom``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from kvsim.results.prometheus import prometheus_snapshot

if TYPE_CHECKING:
    from kvsim.results import Results

VIDUR_REQUEST_COLUMNS = (
    "Request Id",
    "request_e2e_time",
    "request_e2e_time_normalized",
    "request_execution_time",
    "request_execution_time_normalized",
    "request_model_execution_time",
    "request_model_execution_time_normalized",
    "request_preemption_time",
    "request_scheduling_delay",
    "request_execution_plus_preemption_time",
    "request_execution_plus_preemption_time_normalized",
    "prefill_e2e_time",
    "prefill_time_execution_plus_preemption",
    "prefill_time_execution_plus_preemption_normalized",
    "decode_time_execution_plus_preemption_normalized",
    "request_inter_arrival_delay",
    "request_num_tokens",
    "request_num_prefill_tokens",
    "request_num_decode_tokens",
    "request_pd_ratio",
    "request_num_restarts",
)


def vidur_request_metrics(results: Results) -> pd.DataFrame:
    """Per-request metrics in the columns of Vidur's ``request_metrics.csv`` (seconds, tokens).

    Mapping (Vidur's definition -> kvsim's columns):

    - ``request_e2e_time`` = completed - arrived = ``e2e_request_latency_seconds``;
    - ``request_scheduling_delay`` = first scheduled - arrived = ``request_queue_time_seconds``;
    - ``prefill_e2e_time`` = prefill completed - arrived = ``time_to_first_token_seconds``;
    - ``prefill_time_execution_plus_preemption`` = prefill completed - first scheduled =
      ``request_prefill_time_seconds``;
    - ``request_execution_plus_preemption_time`` = the request's stage times plus the gaps
      between them, i.e. completed - first scheduled = ``request_inference_time_seconds``;
    - ``_normalized`` columns divide by decode tokens (output tokens), the prefill one by prefill
      tokens; ``decode_time_execution_plus_preemption_normalized`` = (completed - prefill
      completed) / decode tokens;
    - ``request_inter_arrival_delay``: gap to the previous arrival (blank for the first, as in
      Vidur); ``request_num_*_tokens`` and ``request_pd_ratio`` = prefill / decode tokens;
    - ``request_num_restarts`` = kvsim's ``num_preemptions`` (recompute or swap).

    ``request_execution_time``, ``request_model_execution_time``, their ``_normalized`` columns
    and ``request_preemption_time`` split a request's time between running and being preempted;
    kvsim does not record that split, so they are blank (NaN).

    Returns:
        One row per request sorted by ``Request Id`` (Vidur's outer merge sorts on it), columns
        ``VIDUR_REQUEST_COLUMNS``.
    """
    df = results.requests.sort_values("req_id", kind="stable").reset_index(drop=True)
    prefill = df["prompt_tokens"].astype(float)
    decode = df["output_tokens"].astype(float)
    e2e = df["e2e_request_latency_seconds"]
    inference = df["request_inference_time_seconds"]
    prefill_time = df["request_prefill_time_seconds"]
    nan = pd.Series(np.nan, index=df.index)
    by_arrival = df["arrival_time_s"].sort_values(kind="stable")
    gaps = by_arrival.diff().reindex(df.index)
    out = pd.DataFrame(
        {
            "Request Id": df["req_id"],
            "request_e2e_time": e2e,
            "request_e2e_time_normalized": e2e / decode,
            "request_execution_time": nan,
            "request_execution_time_normalized": nan,
            "request_model_execution_time": nan,
            "request_model_execution_time_normalized": nan,
            "request_preemption_time": nan,
            "request_scheduling_delay": df["request_queue_time_seconds"],
            "request_execution_plus_preemption_time": inference,
            "request_execution_plus_preemption_time_normalized": inference / decode,
            "prefill_e2e_time": df["time_to_first_token_seconds"],
            "prefill_time_execution_plus_preemption": prefill_time,
            "prefill_time_execution_plus_preemption_normalized": prefill_time / prefill,
            "decode_time_execution_plus_preemption_normalized": (
                df["request_decode_time_seconds"] / decode
            ),
            "request_inter_arrival_delay": gaps,
            "request_num_tokens": df["prompt_tokens"] + df["output_tokens"],
            "request_num_prefill_tokens": df["prompt_tokens"],
            "request_num_decode_tokens": df["output_tokens"],
            "request_pd_ratio": prefill / decode,
            "request_num_restarts": df["num_preemptions"],
        }
    )
    return out[list(VIDUR_REQUEST_COLUMNS)]


def write_exports(results: Results, folder: str | Path) -> Path:
    """Write ``request_metrics.csv`` (Vidur) and ``metrics.prom`` (Prometheus) into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vidur_request_metrics(results).to_csv(folder / "request_metrics.csv", index=False)
    (folder / "metrics.prom").write_text(prometheus_snapshot(results), encoding="utf-8")
    return folder
