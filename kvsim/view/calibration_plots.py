"""The figure of ``kvsim calibrate --fit-parts``: the cost model's step times against the steps
timed on a GPU (``kvsim.validate.gpu_steps``), and its error per step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from kvsim.view.style import styled

SPLIT_COLORS = {"train": "#8d99ae", "held out": "#e76f51"}
RANK_MARKERS = ("o", "s", "^", "D")


@styled
def steps_figure(points: Sequence[dict[str, Any]], *, title: str = "") -> Figure:
    """Predicted against measured step time (log-log, the line of equality and +-5 %), and the
    relative error of each step against its measured time.

    Args:
        points: ``fit_parts``'s ``points``: ``model``, ``phase``, ``split`` (``train`` or
            ``held out``), ``measured_ms``, ``predicted_ms``, ``error_pct``.
        title: the figure's title.
    """
    fig = Figure(figsize=(10, 4), layout="constrained")
    scatter, errors = fig.subplots(1, 2)
    ranks = sorted({p["model"] for p in points})
    for r, rank in enumerate(ranks):
        for split, color in SPLIT_COLORS.items():
            mine = [p for p in points if p["model"] == rank and p["split"] == split]
            if not mine:
                continue
            measured = np.array([p["measured_ms"] for p in mine])
            style = {
                "marker": RANK_MARKERS[r % len(RANK_MARKERS)],
                "color": color,
                "label": f"{rank}, {split}",
                "alpha": 0.85,
            }
            scatter.scatter(measured, [p["predicted_ms"] for p in mine], **style)
            errors.scatter(measured, [p["error_pct"] for p in mine], **style)
    low = min(min(p["measured_ms"], p["predicted_ms"]) for p in points) * 0.8
    high = max(max(p["measured_ms"], p["predicted_ms"]) for p in points) * 1.25
    line = np.array([low, high])
    scatter.plot(line, line, color="black", linewidth=0.8)
    for band in (0.95, 1.05):
        scatter.plot(line, line * band, color="black", linewidth=0.5, linestyle=":")
    scatter.set(
        xscale="log", yscale="log", xlabel="measured step (ms)", ylabel="predicted step (ms)"
    )
    scatter.legend(fontsize=7)
    errors.axhspan(-5, 5, color="#2a9d8f", alpha=0.12, label="within 5 %")
    errors.axhline(0, color="black", linewidth=0.8)
    errors.set(
        xscale="log", xlabel="measured step (ms)", ylabel="error (predicted / measured - 1, %)"
    )
    if title:
        fig.suptitle(title)
    return fig
