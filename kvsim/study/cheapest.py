"""The cheapest fleet that meets latency targets: GPU type x tensor parallelism x replicas (x a
prefill/decode split), priced by the GPU price table (``kvsim/data/prices.toml``).

For each option (a GPU and a TP size, co-located or split ``P:D``) the fewest replicas meeting
every target is a capacity plan (``kvsim.study.plan``: the knob ``fleet.replicas``, smallest,
searched by the plan's k-ary search over cached sweep points; meeting a latency bound gets
easier with more replicas). A split ``P:D`` grows in units of ``P + D`` replicas, ``P`` of them
prefill. Options are tried from the cheapest replica up, and an option is searched only up to
the replicas that would cost no more than the best fleet found so far (one that cannot is
reported as such, not run). The answer is the option and replica count of the lowest price per
hour (between fleets of one price, the one with the most headroom under its binding target);
``points`` holds every fleet evaluated (its price and metrics: the frontier).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from kvsim.base.textfile import json_text
from kvsim.base.units import plural
from kvsim.config import config_from_dict
from kvsim.config.fleet import PricingSpec, gpu_price_per_hour
from kvsim.study.experiment import check_name
from kvsim.study.plan import (
    Plan,
    Target,
    UnmeasuredTargetError,
    failure,
    plan_folder,
    run_plan,
)
from kvsim.study.sweep import check_results_folder
from kvsim.view.fleet_plots import cost_frontier

FIELD = "fleet.replicas"


@dataclass(frozen=True)
class FleetOption:
    """One kind of fleet: its GPU, tensor-parallel size and prefill/decode split.

    Attributes:
        gpu: a GPU preset name (``kvsim/data/gpus.toml``).
        tensor_parallel_size: GPUs per replica.
        split: ``(P, D)`` prefill and decode replicas per unit, or ``None`` (co-located).
    """

    gpu: str
    tensor_parallel_size: int
    split: tuple[int, int] | None = None

    @property
    def name(self) -> str:
        text = f"{self.gpu}-tp{self.tensor_parallel_size}"
        if self.split is not None:
            text += f"-pd{self.split[0]}to{self.split[1]}"
        return text

    @property
    def unit(self) -> int:
        """Replicas the option grows by."""
        return 1 if self.split is None else sum(self.split)

    def base(self, base: dict[str, Any]) -> dict[str, Any]:
        """``base`` with this option's GPU, TP size and fleet (router kept)."""
        data: dict[str, Any] = json.loads(json.dumps(base))
        gpu = data.get("gpu")
        data["gpu"] = self.gpu if not isinstance(gpu, dict) else {**gpu, "preset": self.gpu}
        data.setdefault("parallel", {})["tensor_parallel_size"] = self.tensor_parallel_size
        fleet = data.setdefault("fleet", {})
        fleet.pop("prefill_replicas", None)
        return data


@dataclass(frozen=True)
class SplitPlan(Plan):
    """A plan over ``fleet.replicas`` in units of ``P + D`` whose first ``P`` of each unit
    prefill: the value sets ``fleet.prefill_replicas`` too."""

    prefill_share: tuple[int, int] = (0, 1)

    def config(self, x: float, *, quick: bool = False) -> dict[str, Any]:
        spec = super().config(x, quick=quick)
        p, total = self.prefill_share
        replicas = int(spec["overrides"][FIELD])
        spec["overrides"]["fleet.prefill_replicas"] = replicas * p // total
        return spec


@dataclass
class OptionResult:
    """One option's answer: the fewest replicas meeting every target (``None``: none within
    its bracket), their price per hour, and why not (an invalid config, a bracket no fleet
    meets, or one that cannot be cheaper than the best)."""

    option: FleetOption
    gpus_per_replica: int = 1
    replicas: int | None = None
    usd_per_hour: float | None = None
    why_not: str | None = None
    headroom: float | None = None
    binding: str | None = None


@dataclass
class CheapestResult:
    """``run_cheapest``'s answer: every option's, the cheapest (``best``: an index of
    ``options``, ``None`` when no fleet meets the targets), and every fleet evaluated."""

    options: list[OptionResult]
    best: int | None
    points: pd.DataFrame
    targets: tuple[Target, ...]
    folder: Path


def replica_gpus(option: FleetOption, base: dict[str, Any]) -> int:
    """GPUs one replica of ``option`` takes: its TP size times the base config's pipeline
    stages (``parallel.pipeline_parallel_size``, 1 unset), as ``ParallelConfig.world_size``."""
    parallel = base.get("parallel")
    stages = parallel.get("pipeline_parallel_size", 1) if isinstance(parallel, dict) else 1
    return option.tensor_parallel_size * int(stages)


def replica_price(option: FleetOption, base: dict[str, Any]) -> float:
    """USD per hour of one replica of ``option`` (its GPUs, ``replica_gpus``, at the price
    table's price).

    Raises:
        ValueError: the GPU has no price (naming it).
    """
    spec = PricingSpec.model_validate(base.get("pricing", {}))
    return replica_gpus(option, base) * gpu_price_per_hour(option.gpu, spec)


def _plan_for(
    name: str,
    option: FleetOption,
    base: dict[str, Any],
    targets: Sequence[Target],
    hi: int,
    quick: dict[str, Any],
) -> Plan:
    unit = option.unit
    choices = tuple(float(unit * u) for u in range(1, hi // unit + 1))  # (one: only checked)
    common: dict[str, Any] = {
        "name": check_name(f"{name}-{option.name}", "plan name"),
        "base": option.base(base),
        "field": FIELD,
        "direction": "smallest",
        "lo": choices[0],
        "hi": choices[-1],
        "targets": tuple(targets),
        "integer": True,
        "choices": choices,
        "quick": quick,
    }
    if option.split is None:
        return Plan(**common)
    return SplitPlan(**common, prefill_share=(option.split[0], unit))


def run_cheapest(
    name: str,
    base: dict[str, Any],
    options: Sequence[FleetOption],
    targets: Sequence[Target],
    *,
    max_replicas: int = 16,
    out_root: str | Path = "results",
    jobs: int = 1,
    scheduler: str | None = None,
    quick: dict[str, Any] | None = None,
    on_point: Callable[[FleetOption, int, dict[str, Any], bool], None] | None = None,
) -> CheapestResult:
    """Answer the cheapest-fleet question (see the module docstring).

    Args:
        name: results under ``OUT/plan/NAME-OPTION/`` (one plan per option) and the answer in
            ``OUT/plan/NAME/``.
        base: the SimConfig table (model, workload, router...).
        options: the fleets to consider.
        targets: upper bounds on summary metrics.
        max_replicas: the most replicas of one option: no fleet past it is simulated.
        jobs, scheduler: where points run (``run_plan``).
        quick: dotted overrides of small runs (``None``: none).
        on_point: called with ``(option, replicas, summary, meets)`` per evaluated fleet.

    Raises:
        ValueError: a GPU without a price, or no option at all.
    """
    if not options:
        raise ValueError("plan --cheapest: no fleet to consider (give --gpus and --tp)")
    check_results_folder(plan_folder(out_root, name, quick=quick is not None), Path(out_root))
    priced = sorted(((replica_price(o, base), i, o) for i, o in enumerate(options)))
    results: dict[int, OptionResult] = {}
    rows: list[dict[str, Any]] = []
    best_cost = math.inf
    for price, index, option in priced:
        result = OptionResult(option, replica_gpus(option, base))
        results[index] = result
        unit_price = price * option.unit
        allowed = max_replicas // option.unit  # units within max_replicas
        cheaper = allowed  # units within max_replicas costing no more than the best
        if math.isfinite(best_cost):
            cheaper = min(cheaper, math.floor(best_cost / unit_price * (1 + 1e-12)))
        if allowed < 1:
            result.why_not = (
                f"one unit is {option.unit} replicas, more than max_replicas = {max_replicas}"
            )
            continue
        if cheaper < 1:
            result.why_not = f"one unit costs ${unit_price:.2f}/h, more than the best"
            continue

        at: dict[int, dict[str, Any]] = {}  # this option's summaries, by replicas

        def seen(
            value: float | int,
            summary: dict[str, Any],
            meets: bool,
            o: FleetOption = option,
            at: dict[int, dict[str, Any]] = at,
        ) -> None:
            at[int(value)] = summary
            rows.append(_row(o, int(value), summary, meets, targets, replica_gpus(o, base)))
            if on_point is not None:
                on_point(o, int(value), summary, meets)

        most = cheaper * option.unit
        plan = _plan_for(name, option, base, targets, most, quick or {})
        invalid = _invalid_config(plan, option.unit, quick is not None)
        if invalid is not None:  # (replicas leave each replica's config as it is: all fail)
            result.why_not = f"invalid config: {invalid}"
            continue
        try:
            found = run_plan(
                plan,
                out_root,
                jobs=jobs,
                quick=quick is not None,
                on_point=seen,
                scheduler=scheduler,
            )
        except UnmeasuredTargetError:  # (every fleet kind's runs lack it: the question's fault)
            raise
        except ValueError as err:
            result.why_not = _first_reason(str(err))
            continue
        if found.answer is None:
            bound = f"all that cost at most ${best_cost:,.2f}/h" if cheaper < allowed else None
            result.why_not = _none_within(plan, most, bound, at.get(most))
            continue
        result.replicas = int(found.answer)
        result.usd_per_hour = result.replicas * price
        result.binding, result.headroom = found.binding, found.headroom
        best_cost = min(best_cost, result.usd_per_hour)
    ordered = [results[i] for i in range(len(options))]
    meeting = [i for i, r in enumerate(ordered) if r.usd_per_hour is not None]
    # the lowest price; between fleets of one price, the one further under its binding bound
    best = (
        min(meeting, key=lambda i: (ordered[i].usd_per_hour or 0.0, -(ordered[i].headroom or 0.0)))
        if meeting
        else None
    )
    folder = plan_folder(out_root, name, quick=quick is not None)
    points = pd.DataFrame(rows).drop_duplicates(subset=["fleet"], keep="last", ignore_index=True)
    return CheapestResult(ordered, best, points, tuple(targets), folder)


def _none_within(plan: Plan, most: int, bound: str | None, summary: dict[str, Any] | None) -> str:
    """Why an option has no answer within ``most`` replicas (its plan's largest value, whose
    ``summary`` says why it fails); ``bound``: what else than max_replicas limits them (the
    best fleet's price), or ``None``."""
    text = f"none of up to {plural(most, 'replica')} ({bound or 'max_replicas'}) meets every target"
    if summary is not None:
        text += f" ({plural(most, 'replica')}: {failure(plan, summary)})"
    return text + ("" if bound else "; raise --replicas or relax a target")


def _invalid_config(plan: Plan, replicas: int, quick: bool) -> str | None:
    """The config's error at ``replicas`` (the option's first unit), whole, or ``None`` where
    it is valid; a plan's error would bury it inside its own."""
    spec = plan.config(replicas, quick=quick)
    try:
        config_from_dict(spec["data"], spec["overrides"], warn=False)
    except ValueError as err:
        return str(err)
    return None


def _first_reason(message: str, limit: int = 160) -> str:
    """The first reason of a plan's error (one value's, when it lists several), shortened."""
    text = message.splitlines()[0].split("; 2:")[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _row(
    option: FleetOption,
    replicas: int,
    summary: dict[str, Any],
    meets: bool,
    targets: Sequence[Target],
    gpus_per_replica: int,
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "fleet": f"{option.name} x{replicas}",
        "gpu": option.gpu,
        "tensor_parallel_size": option.tensor_parallel_size,
        "split": "co-located" if option.split is None else f"{option.split[0]}:{option.split[1]}",
        "replicas": replicas,
        "num_gpus": replicas * gpus_per_replica,
        "meets": bool(meets),
        "error": summary.get("error"),
    }
    keys = (
        "usd_per_hour",
        "usd_per_million_output_tokens",
        "goodput_requests_per_usd",
        "slo_attainment",
        "num_rejected_kv_pool",
    )
    for key in (*keys, *(t.metric for t in targets)):
        row[key] = summary.get(key, math.nan)
    return row


def answer_record(result: CheapestResult) -> dict[str, Any]:
    """The answer as plain data (``answer.json``)."""
    best = result.options[result.best] if result.best is not None else None
    return {
        "targets": {t.metric: t.bound for t in result.targets},
        "answer": None
        if best is None
        else {
            "gpu": best.option.gpu,
            "tensor_parallel_size": best.option.tensor_parallel_size,
            "split": best.option.split,
            "replicas": best.replicas,
            "num_gpus": (best.replicas or 0) * best.gpus_per_replica,
            "usd_per_hour": best.usd_per_hour,
            "binding": best.binding,
            "headroom": best.headroom,
        },
        "options": [
            {
                **dataclasses.asdict(r.option),
                "gpus_per_replica": r.gpus_per_replica,
                "replicas": r.replicas,
                "usd_per_hour": r.usd_per_hour,
                "why_not": r.why_not,
            }
            for r in result.options
        ],
    }


def save_cheapest(result: CheapestResult) -> list[Path]:
    """Write ``answer.json``, ``points.csv`` (every fleet evaluated) and ``frontier.png`` (each
    fleet's price against each target, ``kvsim.view.fleet_plots.cost_frontier``) into the
    result's folder; returns the paths."""
    folder = result.folder
    folder.mkdir(parents=True, exist_ok=True)
    written = [folder / "answer.json", folder / "points.csv"]
    written[0].write_text(json_text(answer_record(result), indent=2))
    result.points.to_csv(written[1], index=False)
    runs = result.points[result.points["error"].isna()] if len(result.points) else result.points
    if len(runs):
        best = result.options[result.best] if result.best is not None else None
        cheapest = None
        if best is not None:
            name = f"{best.option.name} x{best.replicas}"
            matches = runs.index[runs["fleet"] == name]
            cheapest = int(matches[0]) if len(matches) else None
        figure = cost_frontier(
            runs,
            {t.metric: t.bound for t in result.targets},
            cheapest=cheapest,
            title="every fleet tried: price per hour against each target",
        )
        path = folder / "frontier.png"
        figure.savefig(path)
        written.append(path)
    return written
