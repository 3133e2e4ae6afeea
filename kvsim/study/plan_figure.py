"""The capacity-planning curve: each target metric against the knob, the bound and the answer.

One panel per target: the evaluated points (filled where every target holds, crosses where one
fails), the bound as a horizontal dashed line, the interval meeting every target shaded and the
answer (one of its ends) as a vertical line. The knob axis is
logarithmic when the bracket spans 4x or more and labelled in the knob's own numbers (GiB, req/s,
GPUs); a metric axis is logarithmic when its values span more than a decade.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from kvsim.base.textfile import json_text
from kvsim.study.plan import Plan, PlanResult, answer_utilization, format_value
from kvsim.view.labels import LATENCY_SHORT_NAMES, display_unit, metric_unit

_MEETS, _FAILS, _TARGET = "#1b7f3b", "#c0392b", "#444444"


def _plain(value: float, _pos: int | None = None) -> str:
    return f"{value:g}"


_STATS = ("p50", "p90", "p95", "p99", "mean", "max")
_UNITS_AFTER_A_NUMBER = frozenset({"s", "tokens/s", "req/s"})


def _panel_labels(metric: str, bound: float) -> tuple[str, str]:
    """``(panel title, y label)`` of a target's panel: vLLM's metric name and the bound on top
    (a name such as ``request_time_per_output_token_seconds_p95`` does not fit along a y axis),
    the statistic and unit beside the axis (``p95 (s)``, ``TTFT p99 (s)`` for a latency vLLM's
    benchmark names short)."""
    unit = metric_unit(metric)
    stat = next((s for s in _STATS if metric.endswith(f"_{s}")), "")
    short = LATENCY_SHORT_NAMES.get(metric.removesuffix(f"_{stat}"), "") if stat else ""
    stat = f"{short} {stat}" if short else stat  # (TTFT p99 (s))
    ylabel = (f"{stat} ({unit})" if unit else stat) if stat else (unit or metric)
    after = f" {unit}" if unit in _UNITS_AFTER_A_NUMBER else ""
    return f"{metric} <= {bound:g}{after}", ylabel


def plan_figure(result: PlanResult) -> Figure:
    """Draw ``result`` (see the module docstring): one 4.2 x 4 in panel per target, titled by
    its metric and bound, and one legend below them."""
    plan, points = result.plan, result.points
    targets = plan.targets
    fig = Figure(figsize=(4.2 * len(targets) + 0.4, 4.0), layout="constrained")
    axes = fig.subplots(1, len(targets), squeeze=False)[0]
    knob = points[plan.field].astype(float) if len(points) else points.get(plan.field)
    shown = display_unit(plan.field)  # (a bandwidth: bytes/s drawn, GB/s as its label says)
    scale = shown[0] if shown else 1.0
    in_label_unit = FuncFormatter(lambda v, _pos=None: _plain(v / scale))
    for ax, target in zip(axes, targets, strict=True):
        values = points[target.metric].astype(float) if len(points) else None
        if values is not None:
            ok = points["meets"].astype(bool)
            ax.plot(knob, values, color="#888888", lw=1, zorder=1)
            ax.scatter(knob[ok], values[ok], color=_MEETS, zorder=3, label="meets every target")
            ax.scatter(knob[~ok], values[~ok], color=_FAILS, marker="x", zorder=3, label="fails")
            finite = values[np.isfinite(values) & (values > 0)]
            if len(finite) and finite.max() / finite.min() > 10:
                ax.set_yscale("log")
        ax.axhline(target.bound, color=_TARGET, ls="--", lw=1.2, label="target (upper bound)")
        if result.interval is not None:
            ax.axvspan(
                *result.interval,
                color=_MEETS,
                alpha=0.08,
                lw=0,
                label="values meeting every target",
            )
        if result.answer is not None:
            text = format_value(plan.value(result.answer), plan.field, unit=False)
            ax.axvline(result.answer, color=_MEETS, lw=1.5, label=f"answer: {text}")
        title, ylabel = _panel_labels(target.metric, target.bound)
        ax.set_title(title, fontsize="small")
        ax.set(xlabel=plan.knob_label(), ylabel=ylabel)
        ax.set_xlim(plan.lo / 1.15, plan.hi * 1.15)
        if plan.hi / plan.lo >= 4:
            ax.set_xscale("log", base=2 if plan.choices or plan.integer else 10)
            if plan.choices:
                ax.set_xticks(list(plan.choices))
            else:
                ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                ax.xaxis.set_minor_formatter(NullFormatter())
            ax.xaxis.set_major_formatter(in_label_unit)
        elif shown:
            ax.xaxis.set_major_formatter(in_label_unit)
        ax.grid(alpha=0.3, which="both")
    handles, labels = axes[0].get_legend_handles_labels()
    columns = len(labels) if len(targets) > 1 else 2  # one panel: the legend in two columns
    fig.legend(handles, labels, loc="outside lower center", ncols=columns, fontsize="small")
    knob_label = plan.knob_label()

    def value(x: float) -> str:  # (as the answer table writes it: the unit is in the label)
        return format_value(plan.value(x), plan.field, unit=False)

    answer = (
        f"{plan.direction} {knob_label} = {value(result.answer)}"
        if result.answer is not None
        else f"no {knob_label} in [{value(plan.lo)}, {value(plan.hi)}] meets the targets"
    )
    fig.suptitle(f"{plan.name}: {answer}", fontsize="medium")
    return fig


def _utilization(plan: Plan, answer: float | None) -> float | None:
    """A KV answer's ``gpu_memory_utilization`` (``answer_utilization``), ``None`` above 1:
    no share vLLM takes derives it (the table says why)."""
    share = answer_utilization(plan, answer)
    return share if share is not None and share <= 1 else None


def save_plan(result: PlanResult) -> list[Path]:
    """Write ``points.csv``, ``answer.json`` and ``plan.png`` into the plan's folder."""
    folder, plan = result.folder, result.plan
    points_csv = folder / "points.csv"
    result.points.to_csv(points_csv, index=False, float_format="%.6g")
    answer = {
        "field": plan.field,
        "direction": plan.direction,
        "answer": None if result.answer is None else plan.value(result.answer),
        "gpu_memory_utilization": _utilization(plan, result.answer),
        "binding_target": result.binding,
        "headroom": result.headroom,
        "ends_valid_range": result.ends_valid_range,
        "targets": {t.metric: t.bound for t in plan.targets},
        "bracket": [plan.lo, plan.hi],
        "min_window_s": plan.min_window_s,
        "monotone": result.monotone,
        "next_value_fails": result.beyond,
        "interval": list(result.interval) if result.interval else None,
        "past_the_other_end": result.other_end,
        "why_none": result.why_none,
        "skipped": {str(value): why for value, why in result.skipped.items()},
        "num_points": len(result.points),
        "other_draws": [{"seed": d.seed, "meets": d.meets, **d.values} for d in result.other_draws],
    }
    answer_json = folder / "answer.json"
    answer_json.write_text(json_text(answer, indent=2) + "\n")
    png = folder / "plan.png"
    plan_figure(result).savefig(png, dpi=120)
    return [points_csv, answer_json, png]
