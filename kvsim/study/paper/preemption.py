"""§7.3 (Figure 19): recompute vs swap preemption against block size, vLLM on ShareGPT.

Two views: each mechanism's per-token cost in kvsim's cost model (Figure 19a's microbenchmark:
swapping a 512-token sequence out and back in block by block, against recomputing its prefill),
and end-to-end runs of both modes at a rate that preempts (the sweep). Paper: comparable at
16-64-token blocks, swap much worse at small blocks.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from matplotlib.figure import Figure

from kvsim.config import config_from_dict
from kvsim.core.cost import StepCostModel
from kvsim.study.paper.context import Context, Reproduction, write_outputs
from kvsim.view.labels import axis_label
from kvsim.view.style import styled

DESCRIPTION = "§7.3: recompute vs swap preemption against block size (cost model and end to end)"


def overhead_per_token(
    base: dict[str, object], block_sizes: Sequence[int], context_tokens: int = 512
) -> pd.DataFrame:
    """Seconds per token of swapping a ``context_tokens`` sequence out and in (one PCIe copy per
    block) vs recomputing it, from the cost model of the experiment's base config."""
    config = config_from_dict(dict(base))
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


@styled
def figure(micro: pd.DataFrame, e2e: pd.DataFrame) -> Figure:
    """Per-token cost (left) and mean normalised latency (right) against block size."""
    fig = Figure(figsize=(10, 3.8), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.plot(micro["block_size_tokens"], micro["swap_s_per_token"] * 1e3, marker="o", label="swap")
    left.plot(
        micro["block_size_tokens"],
        micro["recompute_s_per_token"] * 1e3,
        marker="o",
        label="recompute",
    )
    left.set(ylabel="overhead per token (ms)", title="cost model: one 512-token sequence")
    for mode, part in e2e.groupby("label", sort=False):
        part = part.sort_values("cache.block_size_tokens")
        right.plot(
            part["cache.block_size_tokens"],
            part["normalized_latency_seconds_mean"],
            marker="o",
            label=str(mode),
        )
    right.set(ylabel=axis_label("normalized_latency_seconds_mean"), title="end to end, ShareGPT")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(axis_label("cache.block_size_tokens"))
        ax.legend()
    fig.suptitle("§7.3: recompute vs swap against block size")
    return fig


def run(ctx: Context) -> Reproduction:
    """Sweep ``experiments/preemption.toml``; add the cost model's per-token view."""
    experiment = ctx.experiment("preemption")
    sweep = ctx.sweep(experiment)
    summary = sweep.summary
    blocks = sorted({int(b) for b in summary["cache.block_size_tokens"]})
    micro = overhead_per_token(experiment.base, blocks)
    cols = [
        "label",
        "cache.block_size_tokens",
        "normalized_latency_seconds_mean",
        "num_preemptions",
        "num_swap_fallbacks",
        "swap_out_bytes",
        "swap_time_s",
    ]
    e2e = summary[[c for c in cols if c in summary]].copy()
    table = e2e.merge(micro, left_on="cache.block_size_tokens", right_on="block_size_tokens")
    table = table.drop(columns="block_size_tokens").rename(columns={"label": "preemption_mode"})
    view = pd.DataFrame(
        {
            "mode": table["preemption_mode"],
            "block_size": table["cache.block_size_tokens"],
            "latency (s/token)": [f"{v:.4f}" for v in table["normalized_latency_seconds_mean"]],
            "preemptions": table["num_preemptions"],
            "swap time (s)": [
                f"{v:.2f}" for v in table.get("swap_time_s", 0.0 * table["num_preemptions"])
            ],
            "model: swap / recompute per token": [
                f"{s / r:.2f}x"
                for s, r in zip(
                    table["swap_s_per_token"], table["recompute_s_per_token"], strict=True
                )
            ],
        }
    )
    rep = Reproduction(
        "preemption", table, notes=["paper: comparable at 16-64, swap worse below"], view=view
    )
    return write_outputs(rep, sweep.folder, figure(micro, e2e))
