"""``kvsim plan --cheapest``: the cheapest fleet (GPU type x TP x replicas, x a prefill/decode
split) that meets the targets, with the frontier of every fleet tried.

    kvsim plan --cheapest --gpus h100-80gb,h200,a100-80gb --tp 2,4,8 \\
        --target "time_to_first_token_seconds_p99<=2" \\
        --target "request_time_per_output_token_seconds_p99<=0.05" \\
        --set model=llama-3.1-70b --set workload=azure_conv --set workload.rate_per_s=20
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from kvsim.base.units import plural
from kvsim.cli.common import console

logger = logging.getLogger(__name__)

# a number is shown as typed in an error (got 0, got 1.5), other text quoted (got 'two')
_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


def parse_list(
    text: str | None,
    what: str,
    cast: Callable[[str], Any],
    expected: str = "a comma-separated list",
) -> list[Any]:
    """``"a,b,c"`` as a list of ``cast`` values, each once (``None``: the option not given,
    an empty list); a value named more than once is warned about (``first_of_each``).

    Raises:
        ValueError: the option given but empty, an empty item, or an item ``cast`` refuses
            (naming the option and the item, and ``expected``).
    """
    if text is None:
        return []
    items = [part.strip() for part in text.split(",")]
    if not text.strip():  # given but empty: not the defaults, which leaving it out gives
        raise ValueError(
            f"{what}: expected a comma-separated list, got {text!r} (leave {what} out for "
            "its defaults)"
        )
    if "" in items:
        raise ValueError(
            f"{what}: expected a comma-separated list without empty items, got {text!r}"
        )
    out = []
    for item in items:
        try:
            out.append(cast(item))
        except ValueError:
            shown = item if _NUMBER.fullmatch(item) else repr(item)
            raise ValueError(f"{what}: expected {expected}, got {shown}") from None
    return first_of_each(out, what)


def tp_size(text: str) -> int:
    """A tensor-parallel size: a whole number >= 1.

    Raises:
        ValueError: ``text`` is not one.
    """
    size = int(text)
    if size < 1:
        raise ValueError(text)
    return size


def first_of_each(values: list[Any], what: str, shown: Callable[[Any], str] = repr) -> list[Any]:
    """``values`` without repeats, in their first order; a value named more than once is
    warned about (naming ``what`` and ``shown(value)``): each fleet kind is simulated once."""
    for value, count in Counter(values).items():
        if count > 1:
            times = "twice" if count == 2 else f"{count} times"
            logger.warning(
                "%s: %s named %s; each fleet kind is considered once", what, shown(value), times
            )
    return list(dict.fromkeys(values))


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


def _split_text(split: tuple[int, int]) -> str:
    return f"{split[0]}:{split[1]}"


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
        ValueError: no target, an unknown GPU or one without a price, a bad list (given but
            empty, an empty item, a TP size not a whole number >= 1), a bad split, or no fleet
            kind a valid config (after the table).
    """
    from kvsim.base.workers import DASK_CONNECT_TIMEOUT_S, check_scheduler
    from kvsim.config.fleet import PricingSpec, gpu_price_per_hour
    from kvsim.config.hardware import resolve_preset
    from kvsim.study.cheapest import FleetOption, run_cheapest, save_cheapest
    from kvsim.study.plan import failure

    if not targets:
        raise ValueError("plan --cheapest: give at least one --target METRIC<=BOUND")
    overrides = (base.get("fleet") or {}).get("replica_overrides") or []
    searched = sorted(
        {k for t in overrides if isinstance(t, dict) for k in t} & {"gpu", "parallel", "pricing"}
    )
    if searched:  # (the fleet run would not be the one named and priced)
        raise ValueError(
            f"plan --cheapest: fleet.replica_overrides sets {', '.join(searched)}, which the "
            "search chooses for every replica (--gpus, --tp); remove them from the overrides"
        )
    gpu_names = parse_list(gpus, "--gpus", str) or ["h100-80gb", "h200", "a100-80gb"]
    sizes = parse_list(tp, "--tp", tp_size, "whole numbers >= 1") or [1, 2, 4, 8]
    pairs = first_of_each([parse_split(s) for s in splits], "--split", _split_text)
    layouts: list[tuple[int, int] | None] = [None, *pairs]
    for gpu in gpu_names:  # (a price table's "no price for GPU" would name no typo)
        try:
            resolve_preset("gpus", gpu)
        except ValueError as err:
            raise ValueError(f"--gpus: {err}") from None
    from pydantic import ValidationError

    from kvsim.config.sim import format_validation_error

    try:
        pricing = PricingSpec.model_validate(base.get("pricing", {}))
    except ValidationError as err:  # (one line a problem, as `kvsim run` says them)
        lines = format_validation_error(err).splitlines()
        raise ValueError("; ".join(f"pricing.{line}" for line in lines)) from None
    for gpu in gpu_names:  # every GPU priced, before anything runs
        if not gpu_price_per_hour(gpu, pricing, among="--gpus" if len(gpu_names) > 1 else ""):
            logging.getLogger("kvsim.cli").warning(
                "plan --cheapest: %s is priced at $0/h, so every fleet of it costs nothing "
                "and is the cheapest that meets the targets",
                gpu,
            )
    fleet = base.get("fleet")
    if isinstance(fleet, dict) and fleet.get("prefill_replicas"):  # (FleetOption.base drops it)
        logging.getLogger("kvsim.cli").warning(
            "plan --cheapest: fleet.prefill_replicas = %s is not read: the search tries "
            "co-located fleets and each --split P:D given (P prefill and D decode replicas a "
            "unit)",
            fleet["prefill_replicas"],
        )
    if scheduler is not None:
        check_scheduler(scheduler, DASK_CONNECT_TIMEOUT_S)
    options = [FleetOption(g, t, s) for g in gpu_names for t in sizes for s in layouts]
    base.setdefault("fleet", {})
    plan_name = name or "cheapest"
    from kvsim.cli.common import say_if_another_answer_goes
    from kvsim.study.plan import plan_folder

    folder = plan_folder(out, plan_name, quick=quick is not None)
    say_if_another_answer_goes(folder, (None, None, {t.metric: t.bound for t in targets}, None))
    console.print(
        f"plan {plan_name}: the cheapest of {plural(len(options), 'fleet kind')} ("
        f"{', '.join(gpu_names)} x TP {', '.join(map(str, sizes))}"
        + (f" x splits {', '.join(map(_split_text, pairs))}" if pairs else "")
        + f", up to {plural(max_replicas, 'replica')}) with "
        + ", ".join(f"{t.metric} <= {t.bound:g}" for t in targets)
    )

    def show(option: Any, replicas: int, summary: dict[str, Any], meets: bool) -> None:
        from kvsim.study.plan import Plan

        verdict = "[green]meets[/]" if meets else "[red]fails[/]"
        if meets:  # (the measured values, not "meets every target" after "meets")
            detail = ", ".join(
                f"{t.metric} = {float(summary.get(t.metric, math.nan)):.4g} <= {t.bound:g}"
                for t in targets
            )
        else:
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
    if all((r.why_not or "").startswith("invalid config") for r in result.options):
        raise ValueError(  # (nothing was simulated: the question, not the fleets, is wrong)
            f"plan --cheapest: none of the {plural(len(options), 'fleet kind')} is a valid "
            "config (each one's error in the table); change --gpus, --tp or the config"
        )


def _table(result: Any) -> Table:
    # (every kind considered: those with no answer say why, some never simulated)
    table = Table(title="fleet kinds considered, those meeting every target cheapest first")
    for column in ("fleet kind", "replicas", "GPUs", "USD/h", "why not"):
        table.add_column(column, justify="left" if column in ("fleet kind", "why not") else "right")
    order = sorted(
        range(len(result.options)),
        key=lambda i: (result.options[i].usd_per_hour is None, result.options[i].usd_per_hour or 0),
    )
    for i in order:
        r = result.options[i]
        mark = "[bold green]* [/]" if i == result.best else ""
        gpus = "" if r.replicas is None else str(r.replicas * r.gpus_per_replica)
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
