"""Figure 12 (ShareGPT): the highest request rate each system sustains, and vLLM's over Orca's.

A system sustains a rate while its mean normalised latency (seconds per output token) stays
within ``latency_factor`` (4) times its own latency at a low baseline rate; past that the queue
grows without bound. The baseline comes from the sweep; the rate from ``kvsim plan`` (largest
``workload.rate_per_s`` meeting the bound, bisection over stored points), each rate drawing at
least ``[analysis] window_s`` seconds of arrivals (``Plan.min_window_s``). Bands: the paper's
§6.2 ratios (vLLM / Orca (Oracle) 1.7-2.7, vLLM / Orca (Max) 2.7-8, vLLM / FasterTransformer
up to 22 and, FasterTransformer being no better than Orca (Max), at least 2.7).
"""

from __future__ import annotations

import re
import textwrap

import pandas as pd
from matplotlib.figure import Figure

from kvsim.study.paper.context import Context, Reproduction, write_outputs
from kvsim.study.paper.published import published
from kvsim.study.plan import Plan, PlanResult, Target, run_plan
from kvsim.view.labels import axis_label
from kvsim.view.style import styled

DESCRIPTION = (
    "Figure 12: sustainable ShareGPT rate, vLLM vs Orca (Max / Oracle) and FasterTransformer"
)
METRIC = "normalized_latency_seconds_mean"


def ratios(rates: dict[str, float], figure: str | None = "fig12") -> pd.DataFrame:
    """Each published rate ratio ``"A / B"`` of ``figure`` computed from kvsim's sustainable
    rates, next to the paper's band (``in_band``) or value (``rel_error``). ``figure`` ``None``
    (a panel published only as a plot): vLLM's rate over every other system's, with no paper
    value."""
    if figure is None:
        return pd.DataFrame(
            {
                "ratio": f"vLLM / {system}",
                "value": rates["vLLM"] / rate,
                "paper": float("nan"),
                "paper_low": float("nan"),
                "paper_high": float("nan"),
                "rel_error": float("nan"),
                "in_band": None,
            }
            for system, rate in rates.items()
            if system != "vLLM"
        )
    rows = []
    for _, ref in published(figure).iterrows():
        name = str(ref["system"])
        top, bottom = name.split(" / ")
        value = rates[top] / rates[bottom]
        banded = ref["low"] == ref["low"]  # not NaN
        rows.append(
            {
                "ratio": name,
                "value": value,
                "paper": ref["value"],
                "paper_low": ref["low"],
                "paper_high": ref["high"],
                "rel_error": value / ref["value"] - 1 if not banded else float("nan"),
                "in_band": bool(ref["low"] <= value <= ref["high"]) if banded else None,
            }
        )
    return pd.DataFrame(rows)


@styled
def figure(
    results: dict[str, PlanResult], thresholds: dict[str, float], title: str = "Figure 12"
) -> Figure:
    """Normalised latency against rate per system (the plans' points), bound and answer."""
    fig = Figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.add_subplot()
    for system, result in results.items():
        pts = result.points.sort_values("workload.rate_per_s")
        (line,) = ax.plot(pts["workload.rate_per_s"], pts[METRIC], marker="o", label=system)
        ax.axhline(thresholds[system], color=line.get_color(), ls=":", lw=1)
        if result.answer is not None:
            ax.axvline(result.answer, color=line.get_color(), ls="--", lw=1)
    ax.set(
        xscale="log",
        yscale="log",
        xlabel=axis_label("workload.rate_per_s"),
        ylabel=axis_label(METRIC),
    )
    ax.set_title(  # wrapped: the larger models' descriptions run past the axes
        textwrap.fill(f"{title}: 4x baseline latency (dotted), sustainable rate (dashed)", 70),
        fontsize="medium",
    )
    ax.legend()
    return fig


def run(
    ctx: Context, name: str = "fig12", figure_key: str | None = "fig12", trace: str | None = None
) -> Reproduction:
    """Baselines by sweep, sustainable rates by plan, ratios against the paper's
    (``name``: the experiment, ``fig12`` for OPT-13B, ``fig12-66b``, ``fig12-175b``, their
    ``-alpaca`` panels, ``fig14``; ``figure_key``: its rows in the published numbers, ``None``
    for a panel the paper gives only as a plot; ``trace``: a trace file the workload reads, set
    on the base)."""
    import copy
    import dataclasses

    from kvsim.config import set_dotted

    experiment = ctx.experiment(name)
    if trace is not None:
        base = copy.deepcopy(experiment.base)
        set_dotted(base, "workload.trace", trace)
        set_dotted(base, "workload.sample", "resample")
        experiment = dataclasses.replace(experiment, base=base)
    sweep = ctx.sweep(experiment)
    analysis = experiment.analysis
    factor = float(analysis.get("latency_factor", 4.0))
    lo, hi = (float(v) for v in analysis.get("rate_bracket", [0.05, 20.0]))
    window_s = analysis.get("window_s")
    rows, results, thresholds = [], {}, {}
    for _, row in sweep.summary.iterrows():
        system = str(row["label"])
        baseline = float(row[METRIC])
        thresholds[system] = factor * baseline
        plan = Plan(
            name=f"{name}-{re.sub(r'[^a-z0-9]+', '-', system.lower()).strip('-')}",
            base=experiment.labelled_base(system),
            field="workload.rate_per_s",
            direction="largest",
            lo=lo,
            hi=hi,
            targets=(Target(METRIC, factor * baseline),),
            resolution=float(analysis.get("resolution", 0.02)),
            quick=dict(experiment.quick_set),
            min_window_s=None if window_s is None else float(window_s),
        )
        ctx.say(f"{system}: largest rate with {METRIC} <= {factor:g} x {baseline:.4g} s")
        result = run_plan(plan, ctx.out_root, jobs=ctx.jobs, quick=ctx.quick)
        results[system] = result
        rows.append(
            {
                "system": system,
                "baseline_rate_per_s": experiment.base["workload"]["rate_per_s"],
                f"baseline_{METRIC}": baseline,
                "sustainable_rate_per_s": result.answer,
                "points_evaluated": len(result.points),
            }
        )
    rates = pd.DataFrame(rows)
    ratio = ratios(
        dict(zip(rates["system"], rates["sustainable_rate_per_s"], strict=True)), figure_key
    )
    table = pd.concat([rates, ratio], ignore_index=True)
    view = pd.DataFrame(
        [
            *(
                {
                    "": f"{r.system}: sustainable rate (req/s)",
                    "kvsim": f"{r.sustainable_rate_per_s:.3g}",
                    "paper": "",
                }
                for r in rates.itertuples()
            ),
            *(
                {
                    "": f"{r.ratio} (rate ratio)",
                    "kvsim": f"{r.value:.2f}",
                    "paper": f"{r.paper_low:g}-{r.paper_high:g}"
                    if r.in_band is not None
                    else f"{r.paper:g} ({r.rel_error:+.0%})"
                    if r.paper == r.paper  # not NaN
                    else "plot only",
                }
                for r in ratio.itertuples()
            ),
        ]
    )
    rep = Reproduction(
        name,
        table,
        notes=[f"sustainable: {METRIC} <= {factor:g} x the system's own at the baseline rate"],
        in_band=bool(ratio["in_band"].dropna().all()) if ratio["in_band"].notna().any() else None,
        view=view,
    )
    return write_outputs(rep, sweep.folder, figure(results, thresholds, experiment.description))
