"""Figure 18(b): vLLM's end-to-end latency against the block size, ShareGPT and Alpaca.

The paper gives no numbers for this figure, only where it is best (§7.2): block sizes 16 to 128
on ShareGPT, 16 and 32 on Alpaca. The check: the block size with the lowest mean normalised
latency falls in the paper's best range for each dataset.
"""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

from kvsim.study.paper.context import Context, Reproduction, write_outputs
from kvsim.view.labels import axis_label
from kvsim.view.style import styled

DESCRIPTION = "Figure 18b: vLLM latency against block size, ShareGPT and Alpaca"
METRIC = "normalized_latency_seconds_mean"
BLOCK = "cache.block_size_tokens"


@styled
def figure(summary: pd.DataFrame, best: dict[str, list[int]]) -> Figure:
    """Normalised latency against block size per dataset, the paper's best range shaded."""
    labels = list(dict.fromkeys(summary["label"]))
    fig = Figure(figsize=(4.6 * len(labels), 3.8), layout="constrained")
    axes = fig.subplots(1, len(labels), squeeze=False)[0]
    for ax, label in zip(axes, labels, strict=True):
        part = summary[summary["label"] == label].sort_values(BLOCK)
        ax.plot(part[BLOCK], part[METRIC], marker="o", label="kvsim")
        lo, hi = best.get(label, [None, None])
        if lo is not None:
            ax.axvspan(lo, hi, color="#2ca02c", alpha=0.15, label="paper: best range")
        ax.set(xscale="log", yscale="log", xlabel=axis_label(BLOCK), ylabel=axis_label(METRIC))
        ax.set_xscale("log", base=2)
        ax.set_title(label)
        ax.legend()
    fig.suptitle("Figure 18b: vLLM latency against block size")
    return fig


def run(ctx: Context) -> Reproduction:
    """Sweep ``experiments/fig18b.toml``; the best block size per dataset against the paper's."""
    experiment = ctx.experiment("fig18b")
    sweep = ctx.sweep(experiment)
    best = {k: [int(v) for v in vs] for k, vs in experiment.analysis.get("paper_best", {}).items()}
    rows = []
    for label, part in sweep.summary.groupby("label", sort=False):
        top = part.loc[part[METRIC].idxmin()]
        lo, hi = best.get(str(label), [0, 0])
        rows.append(
            {
                "dataset": label,
                "best_block_size_tokens": int(top[BLOCK]),
                f"best_{METRIC}": float(top[METRIC]),
                "paper_best_low": lo,
                "paper_best_high": hi,
                "in_band": lo <= int(top[BLOCK]) <= hi,
                **{
                    f"latency_block_{int(b)}": float(v)
                    for b, v in zip(part[BLOCK], part[METRIC], strict=True)
                },
            }
        )
    table = pd.DataFrame(rows)
    view = pd.DataFrame(
        {
            "dataset": table["dataset"],
            "best block": table["best_block_size_tokens"],
            "latency there (s/token)": [f"{v:.4f}" for v in table[f"best_{METRIC}"]],
            "paper best": [
                f"{a}-{b}"
                for a, b in zip(table["paper_best_low"], table["paper_best_high"], strict=True)
            ],
            "in band": table["in_band"],
        }
    )
    rep = Reproduction(
        "fig18b",
        table,
        notes=["rates: the paper's Figure 13 rates (it states none for Figure 18b); predicted"],
        in_band=bool(table["in_band"].all()),
        view=view,
    )
    return write_outputs(rep, sweep.folder, figure(sweep.summary, best))
