"""Figure 13 batch sizes within +-15 % of the paper in a short run, and the latency helpers."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from kvsim.latency import explosion_rate
from kvsim.repro.fig12 import fig12_ratios
from kvsim.repro.fig13 import PAPER_FIG13, TOLERANCE, fig13

# The vllm-2023 cost preset was fitted to these bars with kvsim's former mixed-step engine; on
# the faithful vllm-v0 profile (prefill-only steps, v0's append check) vLLM on Alpaca lands about
# +48 % high. Kept as a known miss (asserted to be one, so a fix is noticed) until the
# paper-figures issue re-derives the step costs from independent sources.
KNOWN_MISSES = {("Alpaca", "vLLM")}


def test_fig13_batch_sizes_in_band() -> None:
    # Half-length runs (1,000 ShareGPT / 3,000 Alpaca requests), seed 0; the paper's numbers
    # are typed in from the paper.
    df = fig13(scale=0.5, seed=0)
    assert len(df) == 8
    for r in df.itertuples():
        paper = PAPER_FIG13[(r.dataset, r.system)]
        assert r.paper == paper
        within = abs(r.mean_batched_requests / paper - 1) <= TOLERANCE
        assert within != ((r.dataset, r.system) in KNOWN_MISSES), (
            r.dataset,
            r.system,
            r.mean_batched_requests,
        )


def test_explosion_rate_interpolates() -> None:
    # baseline 0.1 s/token -> threshold 0.4; crossing between 2 (0.2) and 3 (0.6): 2 + 0.2/0.4 = 2.5
    sweep = pd.DataFrame(
        {"rate_per_s": [1.0, 2.0, 3.0], "normalized_latency_seconds_mean": [0.1, 0.2, 0.6]}
    )
    assert explosion_rate(sweep, factor=4.0) == pytest.approx(2.5)
    assert explosion_rate(sweep, threshold_s=1.0) == math.inf
    assert explosion_rate(sweep, threshold_s=0.05) == 1.0


def test_fig12_ratios_by_hand() -> None:
    rates = pd.DataFrame(
        {
            "system": ["Orca (Max)", "Orca (Oracle)", "vLLM"],
            "sustainable_rate_per_s": [0.5, 1.0, 2.0],
        }
    )
    out = fig12_ratios(rates).set_index("ratio")
    assert out.loc["vLLM / Orca (Oracle)", "value"] == 2.0  # in 1.7-2.7
    assert out.loc["vLLM / Orca (Max)", "value"] == 4.0  # in 2.7-8
    assert out["in_band"].all()
