"""Automatic prefix caching: hit rates on the Mooncake conversation trace against the KV budget
and block size, beside the trace's unbounded ceiling; and a synthetic sweep showing that a shared
prefix shorter than one block never hits (vLLM caches full blocks only)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from kvsim.study.paper.context import Context, Reproduction, write_outputs
from kvsim.view.labels import axis_label
from kvsim.view.plots import log_axis
from kvsim.view.style import styled

DESCRIPTION = "Prefix caching: Mooncake hit rate vs KV budget and block size; sub-block prefixes"
HASH_BLOCK_TOKENS = 512  # Mooncake's hash_ids cover 512-token blocks


def unbounded_ceiling(num_requests: int | None) -> tuple[float, float]:
    """Hit ceilings (%) of an unbounded cache on a Mooncake window: ``(blocks, tokens)``.

    A request's leading hash ids that an earlier request already had are hits (they are chained,
    so a shared id means a shared prefix). ``blocks`` counts ids (36.6 % over the whole trace,
    per the data README); ``tokens`` counts their tokens over prompt tokens, comparable with
    ``prefix_cache_hit_rate``.
    """
    from kvsim.workload import generate_requests, load_workload

    spec = load_workload("mooncake_conversation", num_requests=num_requests, overflow="truncate")
    requests = generate_requests(spec, np.random.default_rng(0), max_model_len=131072)
    seen: set[int] = set()
    hit = total = hit_tokens = prompt_tokens = 0
    for req in requests:
        ids = req.prefix_hash_ids or ()
        k = 0
        while k < len(ids) and ids[k] in seen:
            k += 1
        hit, total = hit + k, total + len(ids)
        hit_tokens += min(k * HASH_BLOCK_TOKENS, req.prompt_tokens)
        prompt_tokens += req.prompt_tokens
        seen.update(ids)
    return 100.0 * hit / max(total, 1), 100.0 * hit_tokens / max(prompt_tokens, 1)


@styled
def figure(mooncake: pd.DataFrame, ceilings: tuple[float, float], prefix: pd.DataFrame) -> Figure:
    """Mooncake hit rate vs KV budget with the ceilings; hit rate vs shared prefix length."""
    fig = Figure(figsize=(11, 4), layout="constrained")
    left, right = fig.subplots(1, 2)
    for block, part in mooncake.groupby("cache.block_size_tokens"):
        part = part.sort_values("capacity_tokens")
        left.plot(
            part["capacity_tokens"] / 1e6,
            100 * part["prefix_cache_hit_rate"],
            marker="o",
            label=f"block_size {block}",
        )
    left.axhline(
        ceilings[0], color="k", ls="--", label=f"unbounded, 512-token ids {ceilings[0]:.1f} %"
    )
    left.axhline(ceilings[1], color="grey", ls=":", label=f"unbounded, tokens {ceilings[1]:.1f} %")
    left.set(
        xlabel="KV cache (million token slots)",
        ylabel="prefix cache hit rate (% of tokens)",
        title="Mooncake conversation trace",
    )
    log_axis(left, "x", mooncake["capacity_tokens"].to_numpy(dtype=float) / 1e6)
    # (the curves run low on the left and rise to the ceilings on the right: the legend goes
    # in the empty upper left, below the ceiling lines)
    left.legend(loc="upper left", bbox_to_anchor=(0.0, 0.93))
    for block, part in prefix.groupby("cache.block_size_tokens"):
        part = part.sort_values("workload.shared_prefix_tokens")
        right.step(
            part["workload.shared_prefix_tokens"],
            100 * part["prefix_cache_hit_rate"],
            where="post",
            marker="o",
            label=f"block_size {block}",
        )
        right.axvline(float(block), color="grey", ls=":")
    right.set(
        xlabel=axis_label("workload.shared_prefix_tokens"),
        ylabel="prefix cache hit rate (% of tokens)",
        title="a prefix shorter than one block never hits",
    )
    right.legend()
    return fig


def run(ctx: Context) -> Reproduction:
    """Sweep ``prefix-caching`` and ``prefix-length``; add the Mooncake ceiling."""
    experiment = ctx.experiment("prefix-caching")
    mooncake = ctx.sweep(experiment)
    prefix = ctx.sweep(ctx.experiment("prefix-length"))
    requests = experiment.quick_set.get("workload.num_requests") if ctx.quick else None
    num = int(requests or experiment.base.get("workload", {}).get("num_requests", 2000))
    ceilings = unbounded_ceiling(num)
    cols = [
        "cache.block_size_tokens",
        "cache.kv_cache_gib",
        "capacity_tokens",
        "prefix_cache_hit_rate",
        "num_preemptions",
    ]
    table = mooncake.summary[cols].copy()
    table["ceiling_blocks_pct"], table["ceiling_tokens_pct"] = ceilings
    view = pd.DataFrame(
        {
            "block_size": table["cache.block_size_tokens"],
            "KV (GiB)": table["cache.kv_cache_gib"],
            "KV (M slots)": [f"{v / 1e6:.2f}" for v in table["capacity_tokens"]],
            "hit rate (%)": [f"{100 * v:.1f}" for v in table["prefix_cache_hit_rate"]],
            "preemptions": table["num_preemptions"],
        }
    )
    rep = Reproduction(
        "prefix-caching",
        table,
        view=view,
        beside_paper=False,
        notes=[
            f"unbounded ceiling over the same {num:,} requests: {ceilings[0]:.1f} % of "
            f"512-token ids, {ceilings[1]:.1f} % of prompt tokens"
        ],
    )
    return write_outputs(rep, mooncake.folder, figure(mooncake.summary, ceilings, prefix.summary))
