"""Figure 17: a chatbot, the chat history truncated to its last 1,024 tokens (§6.5).

The lengths come from the ShareGPT multi-turn trace (``sharegpt_llama2``: a turn's prompt holds
the conversation so far): prompt ``min(history, 1024)``, reply ``min(reply, 1024)``, written as a
kvsim trace into the results folder; then Figure 12's sustainable-rate rule
(``kvsim.study.paper.fig12``) against the paper's "2x the three Orca baselines".
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from kvsim.study.paper.context import Context, Reproduction
from kvsim.study.paper.fig12 import run as run_fig12
from kvsim.study.sweep import POINTS, check_results_folder

DESCRIPTION = "Figure 17: chatbot (history truncated to 1,024 tokens), vLLM vs Orca"


def chatbot_lengths(history_tokens: int, reply_tokens: int) -> pd.DataFrame:
    """``prompt_tokens, output_tokens`` of every ShareGPT multi-turn turn, truncated.

    Raises:
        DataNotFoundError: the ``sharegpt_llama2`` trace is not in ``KVSIM_DATA``.
    """
    from kvsim.workload import resolve_trace
    from kvsim.workload.traces import load_trace

    path, info = resolve_trace("sharegpt_llama2")
    trace = load_trace(path, info.fmt if info is not None else None)
    prompt = np.minimum(np.asarray(trace.prompt_tokens), history_tokens)
    output = np.minimum(np.asarray(trace.output_tokens), reply_tokens)
    return pd.DataFrame({"prompt_tokens": prompt, "output_tokens": output})


def run(ctx: Context) -> Reproduction:
    """Write the chatbot lengths, then the sustainable rates and ratios (``fig12.run``)."""
    experiment = ctx.experiment("fig17")
    analysis = experiment.analysis
    lengths = chatbot_lengths(int(analysis["history_tokens"]), int(analysis["reply_tokens"]))
    folder = ctx.out_root / ("quick" if ctx.quick else "") / "fig17"
    check_results_folder(folder, ctx.out_root)
    (folder / POINTS).mkdir(parents=True, exist_ok=True)  # (the sweep's folder, the file beside)
    path = folder / "chatbot_lengths.csv"
    lengths.to_csv(path, index=False)
    ctx.say(
        f"{len(lengths):,} chatbot turns: prompt mean {lengths['prompt_tokens'].mean():.0f}, "
        f"reply mean {lengths['output_tokens'].mean():.0f} tokens -> {path}"
    )
    return run_fig12(ctx, "fig17", "fig17", trace=str(path.resolve()))
