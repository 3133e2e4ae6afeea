"""``kvsim plan --cheapest``: the cheapest fleet (GPU type x TP x replicas, x a prefill/decode
split) that meets the targets, with the frontier of every fleet tried.

    kvsim plan --cheapest --gpus h100-80gb,h200,a100-80gb --tp 2,4,8 \\
        --target "time_to_first_token_seconds_p99<=2" \\
        --target "request_time_per_output_token_seconds_p99<=0.05" \\
        --set model=llama-3.1-70b --set workload=azure_conv --set workload.rate_per_s=20
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from kvsim.cli.common import console


def parse_list(text: str | None, what: str, cast: type) -> list[Any]:
    """``"a,b,c"`` as a list of ``cast`` values (``None``: empty).

    Raises:
        ValueError: an item ``cast`` refuses (naming the option and the item).
    """
    if not text:
        return []
    out = []
    for item in (part.strip() for part in text.split(",")):
        try:
            out.append(cast(item))
        except ValueError:
            raise ValueError(f"{what}: expected a comma-separated list, got {item!r}") from None
    return out


def parse_split(text: str) -> tuple[int, int]:
    """``"1:2"`` -> ``(1, 2)`` (prefill and decode replicas per unit).

    Raises:
        ValueError: not ``P:D`` with ``P, D >= 1``.
    """
    p, sep, d = text.partition(":")
    try:
        split = (int(p), int(d))
    except ValueError:
        split = (0, 0)
    if not sep or min(split) < 1:
        raise ValueError(f"--split: expected P:D with P, D >= 1 (e.g. 1:2), got {text!r}")
    return split


def run_cheapest_command(
    base: dict[str, Any],
    targets: list[Any],
    *,
    gpus: str | None,
    tp: str | None,
    splits: list[str],
    max_replicas: int,
    name: str | None,
    out: Path,
    jobs: int,
    scheduler: str | None,
    quick: dict[str, Any] | None,
) -> None:
    """Search, print the options and the answer, write ``OUT/plan/NAME/`` (``answer.json``,
    ``points.csv``, ``frontier.png``).

    Raises:
        ValueError: no target, no GPU, a GPU without a price, a bad list.
    """
    from kvsim.base.workers import DASK_CONNECT_TIMEOUT_S, check_scheduler
    from kvsim.config.fleet import PricingSpec, gpu_price_per_hour
    from kvsim.study.cheapest import FleetOption, run_cheapest, save_cheapest
    from kvsim.study.plan import failure

    if not targets:
        raise ValueError("plan --cheapest: give at least one --target METRIC<=BOUND")
    gpu_names = parse_list(gpus, "--gpus", str) or ["h100-80gb", "h200", "a100-80gb"]
    sizes = parse_list(tp, "--tp", int) or [1, 2, 4, 8]
    layouts: list[tuple[int, int] | None] = [None, *(parse_split(s) for s in splits)]
    pricing = PricingSpec.model_validate(base.get("pricing", {}))
    for gpu in gpu_names:
        gpu_price_per_hour(gpu, pricing)  # every GPU priced, before anything runs
    if scheduler is not None:
        check_scheduler(scheduler, DASK_CONNECT_TIMEOUT_S)
    options = [FleetOption(g, t, s) for g in gpu_names for t in sizes for s in layouts]
    base.setdefault("fleet", {})
    plan_name = name or "cheapest"
    console.print(
        f"plan {plan_name}: the cheapest of {len(options)} fleet kinds ("
        f"{', '.join(gpu_names)} x TP {', '.join(map(str, sizes))}"
        + (f" x splits {', '.join(splits)}" if splits else "")
        + f", up to {max_replicas} replicas) with "
        + ", ".join(f"{t.metric} <= {t.bound:g}" for t in targets)
    )

    def show(option: Any, replicas: int, summary: dict[str, Any], meets: bool) -> None:
        from kvsim.study.plan import Plan

        verdict = "[green]meets[/]" if meets else "[red]fails[/]"
        stub = Plan("x", {}, "fleet.replicas", "smallest", 1, 2, tuple(targets))
        detail = failure(stub, summary)
        price = summary.get("usd_per_hour", math.nan)
        console.print(
            f"  {option.name} x{replicas:<3} ${price:8.2f}/h {verdict}  {escape(detail)}",
            highlight=False,
        )

    result = run_cheapest(
        plan_name,
        base,
        options,
        targets,
        max_replicas=max_replicas,
        out_root=out,
        jobs=jobs,
        scheduler=scheduler,
        quick=quick,
        on_point=show,
    )
    written = save_cheapest(result)
    console.print(_table(result))
    console.print(f"wrote {', '.join(str(p) for p in written)}")


def _table(result: Any) -> Table:
    table = Table(title="fleets that meet every target, cheapest first")
    for column in ("fleet kind", "replicas", "GPUs", "USD/h", "why not"):
        table.add_column(column, justify="left" if column in ("fleet kind", "why not") else "right")
    order = sorted(
        range(len(result.options)),
        key=lambda i: (result.options[i].usd_per_hour is None, result.options[i].usd_per_hour or 0),
    )
    for i in order:
        r = result.options[i]
        mark = "[bold green]* [/]" if i == result.best else ""
        gpus = "" if r.replicas is None else str(r.replicas * r.option.tensor_parallel_size)
        table.add_row(
            mark + r.option.name,
            "" if r.replicas is None else str(r.replicas),
            gpus,
            "" if r.usd_per_hour is None else f"{r.usd_per_hour:,.2f}",
            escape(r.why_not or ""),
        )
    if result.best is None:
        table.caption = "no fleet considered meets every target"
    else:
        best = result.options[result.best]
        table.caption = (
            f"answer: {best.replicas} x {best.option.name} = ${best.usd_per_hour:,.2f}/h "
            f"(binding {best.binding}, {100 * (best.headroom or 0):.1f} % under its bound)"
        )
    return table
