"""Figure 12 shape on ShareGPT: the request rate each system sustains, and their ratios.

The paper finds vLLM sustaining 1.7-2.7x the rate of Orca (Oracle) and 2.7-8x that of Orca (Max)
(Kwon et al. 2023, §6.2). ``sustainable_rate`` bisects for the highest rate whose mean normalised
latency stays below ``factor`` x the system's own low-load latency.
"""

from __future__ import annotations

import logging

import pandas as pd

from kvsim.latency import sustainable_rate
from kvsim.repro.common import paper_config

logger = logging.getLogger(__name__)

FIG12_SYSTEMS = ("Orca (Max)", "Orca (Oracle)", "vLLM")
PAPER_RATIO_BANDS = {"vLLM / Orca (Oracle)": (1.7, 2.7), "vLLM / Orca (Max)": (2.7, 8.0)}


def fig12_rates(
    *,
    num_requests: int = 1000,
    factor: float = 4.0,
    iterations: int = 8,
    seed: int = 0,
    dataset: str = "ShareGPT",
) -> pd.DataFrame:
    """Sustainable rate (req/s) per system; columns ``system, sustainable_rate_per_s``."""
    rows = []
    for system in FIG12_SYSTEMS:
        config = paper_config(
            system, dataset, num_requests=num_requests, seed=seed, record_memory=False
        )
        rate = sustainable_rate(
            config,
            lo_per_s=0.05,
            hi_per_s=20.0,
            factor=factor,
            baseline_per_s=0.02,
            iterations=iterations,
        )
        rows.append({"system": system, "sustainable_rate_per_s": round(rate, 3)})
        logger.info("%s", rows[-1])
    return pd.DataFrame(rows)


def fig12_ratios(rates: pd.DataFrame) -> pd.DataFrame:
    """vLLM's sustainable rate over each baseline's, next to the paper's band."""
    by = dict(zip(rates["system"], rates["sustainable_rate_per_s"], strict=True))
    rows = []
    for name, (lo, hi) in PAPER_RATIO_BANDS.items():
        ratio = by["vLLM"] / by[name.split(" / ")[1]]
        rows.append(
            {
                "ratio": name,
                "value": round(ratio, 2),
                "paper_low": lo,
                "paper_high": hi,
                "in_band": lo <= ratio <= hi,
            }
        )
    return pd.DataFrame(rows)
