"""Figure 13: average number of batched requests, ShareGPT at 2 req/s and Alpaca at 30 req/s.

The batch is averaged per engine step over the window from 10 % of the arrival span to the last
arrival (ramp-up and drain excluded). At these rates the Orca baselines are memory-bound (their
batch is what the buddy pool holds), while vLLM's batch follows Little's law: rate x mean
latency, so it depends on the step time (the ``vllm-2023`` cost preset).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd

from kvsim.engine import simulate
from kvsim.metrics import mean_batched_requests
from kvsim.repro.common import DATASETS, SYSTEMS, paper_config

logger = logging.getLogger(__name__)

PAPER_FIG13: dict[tuple[str, str], float] = {
    ("ShareGPT", "Orca (Max)"): 7.00,
    ("ShareGPT", "Orca (Pow2)"): 9.81,
    ("ShareGPT", "Orca (Oracle)"): 13.62,
    ("ShareGPT", "vLLM"): 30.42,
    ("Alpaca", "Orca (Max)"): 7.00,
    ("Alpaca", "Orca (Pow2)"): 43.24,
    ("Alpaca", "Orca (Oracle)"): 72.75,
    ("Alpaca", "vLLM"): 132.44,
}
TOLERANCE = 0.15
NUM_REQUESTS = {"ShareGPT": 2000, "Alpaca": 6000}
FIG13_COLUMNS = (
    "dataset",
    "system",
    "mean_batched_requests",
    "paper",
    "rel_error",
    "mean_batched_requests_time_weighted",
    "normalized_latency_seconds_mean",
    "num_requests",
    "num_preemptions",
)


def fig13_point(
    dataset: str, system: str, *, num_requests: int | None = None, seed: int = 0
) -> dict[str, object]:
    """Simulate one bar of Figure 13; a row of ``FIG13_COLUMNS``."""
    n = num_requests or NUM_REQUESTS[dataset]
    results = simulate(paper_config(system, dataset, num_requests=n, seed=seed))
    arrivals = results.requests["arrival_time_s"]
    start = float(arrivals.min() + 0.1 * (arrivals.max() - arrivals.min()))
    end = float(arrivals.max())
    batched = mean_batched_requests(results.memory, start, end, per="step")
    paper = PAPER_FIG13[(dataset, system)]
    return {
        "dataset": dataset,
        "system": system,
        "mean_batched_requests": round(batched, 2),
        "paper": paper,
        "rel_error": round(batched / paper - 1, 3),
        "mean_batched_requests_time_weighted": round(
            mean_batched_requests(results.memory, start, end, per="time"), 2
        ),
        "normalized_latency_seconds_mean": results.summary.get("normalized_latency_seconds_mean"),
        "num_requests": n,
        "num_preemptions": results.summary["num_preemptions"],
    }


def fig13(*, scale: float = 1.0, seed: int = 0) -> pd.DataFrame:
    """All eight bars; ``scale`` multiplies the number of requests per run (short runs < 1)."""
    rows = []
    for dataset in DATASETS:
        for system in SYSTEMS:
            n = max(200, int(NUM_REQUESTS[dataset] * scale))
            rows.append(fig13_point(dataset, system, num_requests=n, seed=seed))
            logger.info("%s", rows[-1])
    return pd.DataFrame(rows, columns=list(FIG13_COLUMNS))


def write_fig13(out_dir: str | Path, *, scale: float = 1.0, seed: int = 0) -> Path:
    """Run ``fig13`` and write ``<out_dir>/batched.csv``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "batched.csv"
    fig13(scale=scale, seed=seed).to_csv(path, index=False)
    return path
