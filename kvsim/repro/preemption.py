"""§7.3: recompute vs swap preemption against block size (vLLM on ShareGPT, paper setup).

The paper finds the two comparable at block sizes 16-64 and swap much worse at tiny blocks,
where each block is a separate small PCIe copy. Two views: each mechanism's per-token cost
in the cost model (Figure 19a's microbenchmark), and end-to-end runs at a rate that preempts
(mean normalised latency, preemptions, swap bytes and time).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from kvsim.cost import StepCostModel
from kvsim.engine import simulate
from kvsim.repro.common import paper_config

BLOCK_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def overhead_per_token(
    block_sizes: Sequence[int] = BLOCK_SIZES, context_tokens: int = 512
) -> pd.DataFrame:
    """Seconds per token of swapping a sequence out and back in vs recomputing it (cost model)."""
    config = paper_config("vLLM", "ShareGPT", num_requests=10)
    rows = []
    for b in block_sizes:
        cost = StepCostModel(config.model, config.gpu, config.cost, paged=True, block_size_tokens=b)
        blocks = -(context_tokens // -b)
        rows.append(
            {
                "block_size_tokens": b,
                "swap_s_per_token": 2 * cost.swap_s(blocks) / context_tokens,
                "recompute_s_per_token": cost.recompute_s(context_tokens) / context_tokens,
            }
        )
    return pd.DataFrame(rows)


def recompute_vs_swap(
    block_sizes: Sequence[int] = BLOCK_SIZES,
    *,
    rate_per_s: float = 2.0,
    num_requests: int = 1000,
    seed: int = 0,
) -> pd.DataFrame:
    """End-to-end runs of both preemption modes at each block size."""
    rows = []
    for b in block_sizes:
        for mode in ("recompute", "swap"):
            config = paper_config(
                "vLLM",
                "ShareGPT",
                rate_per_s=rate_per_s,
                num_requests=num_requests,
                seed=seed,
                record_memory=False,
                cache__block_size_tokens=b,
                scheduler__preemption_mode=mode,
            )
            s = simulate(config).summary
            rows.append(
                {
                    "block_size_tokens": b,
                    "preemption_mode": mode,
                    "normalized_latency_seconds_mean": round(
                        s["normalized_latency_seconds_mean"], 4
                    ),
                    "num_preemptions": s["num_preemptions"],
                    "num_swap_fallbacks": s.get("num_swap_fallbacks", 0),
                    "swap_out_bytes": s.get("swap_out_bytes", 0),
                    "swap_time_s": round(s.get("swap_time_s", 0.0), 3),
                }
            )
    return pd.DataFrame(rows)
