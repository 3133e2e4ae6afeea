"""A fleet of engine replicas behind a router, the service-level targets and the GPU prices.

``FleetSpec`` (``[fleet]``): how many replicas serve the workload, which router hands each
request to one of them, and whether prefill and decode run on separate replicas (disaggregated
prefill: the first ``prefill_replicas`` prefill, the rest decode, and a request's KV crosses a
``LinkSpec``). Replicas are alike unless ``replica_overrides`` gives one its own model, GPU,
parallelism, cache or scheduler. ``SloSpec`` (``[slo]``): per-request targets that goodput
counts. ``PricingSpec`` (``[pricing]``): where a GPU's price per hour comes from
(``kvsim/data/prices.toml`` by default). ``kvsim.fleet`` runs them; this module is data only.
"""

from __future__ import annotations

import logging
import tomllib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from kvsim.base.limits import MAX_HW_PER_S, MAX_OVERHEAD_S
from kvsim.base.names import preset_hint
from kvsim.base.say_once import warn_once
from kvsim.base.textfile import read_text, read_toml, toml_key_line
from kvsim.config.hardware import Frozen, preset_table, resolve_preset

RouterName = Literal["round_robin", "least_requests", "least_kv", "prefix", "kv_cost"]
ROUTERS: tuple[RouterName, ...] = (
    "round_robin",
    "least_requests",
    "least_kv",
    "prefix",
    "kv_cost",
)
# the fleet fields each router reads as its weights, in its constructor's order (make_router)
ROUTER_WEIGHTS: dict[RouterName, tuple[str, ...]] = {
    "prefix": ("prefix_weight", "kv_usage_weight", "queue_weight"),
    "kv_cost": ("overlap_score_weight",),
}
MAX_REPLICAS = 1024
MAX_USD_PER_GPU_HOUR = 1e9  # a price table's or the config's bound (a typo, not a GPU)
logger = logging.getLogger(__name__)

DEFAULT_LINK = "infiniband-ndr"  # the links.toml preset of a fleet that names none
# under 1 Gb Ethernet's 1.25e8 bytes/s: slower than any link a prefill-decode split would use
SLOWEST_PLAUSIBLE_KV_LINK_BYTES_PER_S = 1e8
# sections a replica may have of its own (the workload, seed and fleet are the fleet's)
REPLICA_SECTIONS = frozenset({"model", "gpu", "parallel", "cache", "scheduler", "cost", "pricing"})


class LinkSpec(Frozen):
    """The link a request's KV crosses from its prefill replica to its decode replica.

    A transfer of ``B`` bytes per GPU takes ``latency_s + B / bandwidth_bytes_per_s`` seconds;
    transfers do not slow each other down (no link contention is modelled). Presets in
    ``kvsim/data/links.toml`` (``nvlink``, ``infiniband-ndr``, ``roce-400``, ``roce-200``) say
    where each number comes from.

    Attributes:
        bandwidth_bytes_per_s: one direction of one GPU's link, bytes per second.
        latency_s: fixed seconds per transfer.
    """

    name: str = "custom"
    bandwidth_bytes_per_s: float = Field(ge=1, le=MAX_HW_PER_S)
    latency_s: float = Field(default=0.0, ge=0, le=MAX_OVERHEAD_S)

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, value: Any) -> Any:
        return resolve_preset("links", value)


class FleetSpec(Frozen):
    """Replicas of the engine behind a router (``kvsim.fleet`` runs it).

    Attributes:
        replicas: engines serving the workload, all in one simulated clock.
        router: how a request picks its replica: ``round_robin``; ``least_requests`` (fewest
            requests routed there and not finished, Vidur's least outstanding requests);
            ``least_kv`` (lowest ``kv_cache_usage_perc``); ``prefix`` (llm-d's scorers:
            ``prefix_weight`` x precise prefix-cache score + ``kv_usage_weight`` x (1 - KV usage)
            + ``queue_weight`` x queue score, highest wins); ``kv_cost`` (NVIDIA Dynamo's KV
            router: ``overlap_score_weight`` x prefill blocks + decode blocks, lowest wins).
            ``kvsim.fleet.routers`` gives each rule and its source. Ties go round robin.
        prefill_replicas: 0 serves every request on one replica (co-located prefill and
            decode); ``p > 0`` makes replicas ``0..p-1`` prefill replicas and the rest decode
            replicas (the router picks one of each).
        link: the prefill-to-decode KV link (a ``kvsim/data/links.toml`` preset or a table;
            ``DEFAULT_LINK`` by default, whose fields a ``--set fleet.link.*`` edits one by one).
        prefix_weight, kv_usage_weight, queue_weight: the ``prefix`` router's scorer weights
            (llm-d's precise-prefix-cache-aware guide: 2, 1, 1).
        overlap_score_weight: the ``kv_cost`` router's weight of prefill blocks (Dynamo's
            default 1).
        replica_overrides: replica ``i`` takes table ``i`` over the config's own sections
            (``model``, ``gpu``, ``parallel``, ``cache``, ``scheduler``, ``cost``,
            ``pricing``); fewer tables than replicas leave the rest as the config is. Every
            replica runs the config's ``scheduler.engine`` (a table naming another is refused:
            the workload is shaped once, by that engine's rules).
    """

    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS)
    router: RouterName = "round_robin"
    prefill_replicas: int = Field(default=0, ge=0, le=MAX_REPLICAS)
    link: LinkSpec = Field(default_factory=lambda: LinkSpec.model_validate(DEFAULT_LINK))
    prefix_weight: float = Field(default=2.0, ge=0, le=1e6)
    kv_usage_weight: float = Field(default=1.0, ge=0, le=1e6)
    queue_weight: float = Field(default=1.0, ge=0, le=1e6)
    overlap_score_weight: float = Field(default=1.0, ge=0, le=1e6)
    replica_overrides: list[dict[str, Any]] = Field(default_factory=list)

    @field_validator("router", mode="before")
    @classmethod
    def _known_router(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ROUTERS:
            raise ValueError(f"unknown router {value!r}; choose from {list(ROUTERS)}")
        return value

    @model_validator(mode="after")
    def _split_fits(self) -> FleetSpec:
        if self.prefill_replicas >= self.replicas and self.prefill_replicas:
            raise ValueError(
                f"prefill_replicas: {self.prefill_replicas} prefill replica(s) leave no decode "
                f"replica in a fleet of {self.replicas} (fleet.replicas); a disaggregated "
                "fleet needs at least one of each"
            )
        if len(self.replica_overrides) > self.replicas:
            raise ValueError(
                f"replica_overrides: {len(self.replica_overrides)} tables for "
                f"{self.replicas} replica(s)"
            )
        for i, table in enumerate(self.replica_overrides):
            extra = sorted(set(table) - REPLICA_SECTIONS)
            if extra:
                raise ValueError(
                    f"replica_overrides[{i}]: {extra[0]!r} is the fleet's, not a replica's; a "
                    f"replica may set {sorted(REPLICA_SECTIONS)}"
                )
        link = self.link.bandwidth_bytes_per_s
        if self.prefill_replicas and link < SLOWEST_PLAUSIBLE_KV_LINK_BYTES_PER_S:
            warn_once(
                logger,
                f"fleet.link.bandwidth_bytes_per_s: {link:,.0f} bytes/s is slower than any "
                "link between GPU servers (1 Gb Ethernet moves 1.25e8 bytes/s); each request's "
                "KV waits that long to reach its decode replica",
            )
        return self

    @property
    def disaggregated(self) -> bool:
        """Prefill and decode run on separate replicas."""
        return self.prefill_replicas > 0


class SloSpec(Frozen):
    """Per-request service-level targets (seconds), vLLM's metric names; ``None``: no target.

    A request meets the targets when every one set holds for it (TPOT is undefined for a
    one-token output and holds); goodput counts such requests (DistServe's goodput, per second
    and per dollar). With no target set there is no goodput (NaN: ``kvsim.results.money``).
    """

    time_to_first_token_seconds: float | None = Field(default=None, gt=0, le=1e9)
    request_time_per_output_token_seconds: float | None = Field(default=None, gt=0, le=1e9)
    e2e_request_latency_seconds: float | None = Field(default=None, gt=0, le=1e9)

    def targets(self) -> dict[str, float]:
        """The targets set, metric -> bound (seconds)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


class PricingSpec(Frozen):
    """Where a GPU's price comes from.

    Attributes:
        usd_per_gpu_hour: this config's GPU price (overrides the table).
        table: a TOML price table (``kvsim/data/prices.toml``'s shape: one table per GPU preset
            name with ``usd_per_gpu_hour``); ``None``: the shipped one.
    """

    usd_per_gpu_hour: float | None = Field(default=None, ge=0, le=MAX_USD_PER_GPU_HOUR)
    table: str | None = Field(default=None, min_length=1)

    @field_validator("table")
    @classmethod
    def _table_readable(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                price_table(value)  # the file's errors name it
            except FileNotFoundError:
                raise ValueError("no such file") from None
        return value


def price_table(path: str | None = None) -> dict[str, dict[str, Any]]:
    """A price table: GPU name -> ``{usd_per_gpu_hour, source, date}`` (the shipped one when
    ``path`` is ``None``).

    Raises:
        ValueError: the file is not TOML of that shape (naming the file and the GPU).
        FileNotFoundError: no such file.
    """
    if path is None:
        return _shipped_prices()
    table = _read_prices(str(Path(path).resolve()), Path(path).stat().st_mtime_ns)
    gpus = preset_table("gpus")
    for gpu in table:  # (a misspelt GPU's row: its price never read; said on each read, not
        hint = "" if gpu in gpus else preset_hint("gpus", gpu, gpus)  # cached: a check holds
        if hint:  # it back) (a name near none is a custom GPU's, priced by its name)
            line = toml_key_line(read_text(path), gpu)
            warn_once(
                logger,
                f"{path}{f' line {line}' if line else ''}: [{gpu}] names no GPU preset, so "
                f"only a custom GPU of that name reads its price{hint}",
            )
    return table


@cache
def _shipped_prices() -> dict[str, dict[str, Any]]:
    text = resources.files("kvsim.data").joinpath("prices.toml").read_text()
    return _checked(tomllib.loads(text), "kvsim/data/prices.toml", text)


@cache
def _read_prices(path: str, _mtime_ns: int) -> dict[str, dict[str, Any]]:
    return _checked(read_toml(path), path, read_text(path))


_PRICE_ROW_KEYS = ("usd_per_gpu_hour", "source", "date")


def _checked(table: dict[str, Any], where: str, text: str = "") -> dict[str, dict[str, Any]]:
    """``table`` if every row is ``[gpu] usd_per_gpu_hour = PRICE`` with at most ``source`` and
    ``date`` beside it; ``text``: the file's, for the line of a fault.

    Raises:
        ValueError: a price missing or out of range, or another key in a row (a misspelt price
            was read as no price; a misspelt ``source`` silently dropped), naming the row.
    """
    for gpu, row in table.items():
        if not isinstance(row, dict):  # (`h100-80gb = 3`: read as a row without a price)
            line = toml_key_line(text, gpu)
            raise ValueError(
                f"{where}{f' line {line}' if line else ''}: {gpu}: expected a table [{gpu}] "
                f"with usd_per_gpu_hour (and source, date), got {row!r}"
            )
        unknown = sorted(set(row) - set(_PRICE_ROW_KEYS))
        if unknown:
            line = toml_key_line(text, f"{gpu}.{unknown[0]}")
            raise ValueError(
                f"{where}{f' line {line}' if line else ''}: [{gpu}] expected the keys "
                f"{list(_PRICE_ROW_KEYS)}, got unknown {unknown}"
            )
        price = row.get("usd_per_gpu_hour") if isinstance(row, dict) else None
        if (
            not isinstance(price, (int, float))
            or isinstance(price, bool)
            or not 0 <= price <= MAX_USD_PER_GPU_HOUR  # (NaN and inf fail it too)
        ):
            bound = f"{MAX_USD_PER_GPU_HOUR:.0e}".replace("e+0", "e")  # ("1e9")
            line = toml_key_line(text, f"{gpu}.usd_per_gpu_hour")
            raise ValueError(
                f"{where}{f' line {line}' if line else ''}: [{gpu}] usd_per_gpu_hour: expected a "
                f"price in [0, {bound}] (USD per GPU-hour), got {price!r}"
            )
    return table


def gpu_price_per_hour(gpu_name: str, pricing: PricingSpec, *, among: str = "") -> float:
    """USD per GPU-hour of GPU ``gpu_name`` under ``pricing``; ``among`` names the other GPUs
    priced beside it (``--gpus``), for whom one price for all would not do.

    Raises:
        ValueError: the table has no price for the GPU (naming the table, the GPU and how to
            give one).
    """
    if pricing.usd_per_gpu_hour is not None:
        return pricing.usd_per_gpu_hour
    table = price_table(pricing.table)
    row = table.get(gpu_name)
    if row is None:
        where = pricing.table or "kvsim/data/prices.toml"
        advice = "set pricing.usd_per_gpu_hour or add the GPU to a price table (pricing.table)"
        if among:  # (one price for every GPU would make their ratio 1)
            to = pricing.table or f"a copy of {where} and set pricing.table to it"
            advice = (
                f"add a row [{gpu_name}] usd_per_gpu_hour = ... to {to}, or leave the GPU out "
                f"of {among} (pricing.usd_per_gpu_hour would price every GPU alike)"
            )
        raise ValueError(
            f"pricing: no price for GPU {gpu_name!r} in {where} (it prices {sorted(table)}); "
            f"{advice}"
        )
    return float(row["usd_per_gpu_hour"])
