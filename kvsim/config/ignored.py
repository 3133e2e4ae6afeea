"""Settings a run ignores: a field the user set that another of the config's choices makes moot.

An explicit KV budget (``kv_cache_gib``, ``kv_cache_bytes``, ``kv_cache_gb``) takes precedence
over the derived one, so ``gpu_memory_utilization`` and ``activation_headroom_bytes`` go unread (as
vLLM's ``kv_cache_memory_bytes`` ignores ``gpu_memory_utilization``); each allocator reads only its
own knobs (``reservation`` sizes slabs, ``block_size_tokens`` paged blocks; in a fleet a knob
any replica's allocator takes is read) and the radix tree
caches prefixes whether ``enable_prefix_caching`` is off or not; trace arrivals have no rate,
only gamma arrivals read ``cv``, only beam search reads ``beam_branch_tokens``, and each length
distribution only its own parameters (``LENGTH_KNOBS``: the lognormal's means and sigmas, the
fixed lengths, the uniform totals and split); speculative
decoding's settings go unread while ``num_speculative_tokens`` is never set, the link's
bandwidth and ``offload_prompt_only`` while ``kv_offloading_size`` is never set, and a disk's
bandwidths while ``disk_offloading_size`` is never set; a fleet's router has nothing to choose when
each pick has one candidate (``replicas`` never set, or one prefill and one decode replica),
and each router reads only its own weights; a CPU swap space goes unread where there is no swap
(the vllm-v1 profile, or vllm-v0 over an allocator that is not paged), and so do the swap
settings, as over a swap space too small for one KV block, where every swap-out falls back to
recompute; and the prefill-to-decode link goes unread in a fleet that never split prefill from
decode. Such a config runs as written; ``config_from_dict`` logs one warning per ignored
setting.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kvsim.config.allocators import (
    POLICY_ARGUMENTS,
    accepted_arguments,
    caches_prefixes_always,
    hands_out_blocks,
    maps_virtual_pages,
    vattention_pages,
)
from kvsim.config.cost_spec import CostSpec
from kvsim.config.fleet import DEFAULT_LINK, ROUTER_WEIGHTS, FleetSpec, LinkSpec
from kvsim.config.offload import OffloadConfig
from kvsim.config.serving import CacheSpec, SchedulerConfig, swap_blocks
from kvsim.config.speculative import SpeculativeConfig
from kvsim.workload.spec import WorkloadSpec


class ConfigParts(Protocol):
    """What this module reads of a ``SimConfig``."""

    @property
    def cache(self) -> CacheSpec: ...

    @property
    def workload(self) -> WorkloadSpec: ...

    @property
    def speculative(self) -> SpeculativeConfig: ...

    @property
    def offload(self) -> OffloadConfig: ...

    @property
    def fleet(self) -> FleetSpec | None: ...

    @property
    def scheduler(self) -> SchedulerConfig: ...

    @property
    def cost(self) -> CostSpec: ...

    @property
    def bytes_per_token(self) -> int: ...

    @property
    def num_kv_tensors(self) -> int: ...

    @property
    def replica_configs(self) -> Sequence[Any]: ...


BUDGET_FIELDS = ("cache.kv_cache_bytes", "cache.kv_cache_gib", "cache.kv_cache_gb")
# cache fields the engine hands to the allocator under the same name, and what each one sets
ALLOCATOR_KNOBS = {
    "block_size_tokens": "blocks",
    "reservation": "reservation rule",
    "watermark": "admission watermark",
    "share_sequence_groups": "shared prompt blocks",
    "page_size_bytes": "virtual-memory pages",
}
# each router weight and the router that reads it (``fleet.ROUTER_WEIGHTS`` turned around)
WEIGHT_ROUTER = {field: router for router, fields in ROUTER_WEIGHTS.items() for field in fields}


@dataclass(frozen=True, slots=True)
class Moot:
    """A field this config does not read, whoever set it.

    Attributes:
        field: the dotted field (``cache.reservation``).
        value: its value.
        default: its default (a setting equal to it changes nothing either way).
        deciders: the dotted fields whose values make it moot.
        why: what makes it moot, for the message.
    """

    field: str
    value: Any
    default: Any
    deciders: tuple[str, ...]
    why: str


# the length distribution each workload field shapes (``kvsim.workload.selection``)
LENGTH_KNOBS = {
    "lognormal": ("prompt_mean_tokens", "output_mean_tokens", "prompt_sigma", "output_sigma"),
    "fixed": ("fixed_prompt_tokens", "fixed_output_tokens"),
    "uniform": ("min_total_tokens", "max_total_tokens", "prefill_decode_ratio"),
}


def ignored_settings(
    config: ConfigParts, data: dict[str, Any], later: Collection[str] = ()
) -> list[str]:
    """One message per setting the user wrote that this config ignores.

    A setting counts when it is written in ``data`` (a preset's values are not) with a value
    other than its default, and the choice that makes it moot was not made in a later layer than
    the setting itself: a base table may hold the block size of its paged points while a sweep
    puts other points on slabs, or a config file the reservation a ``--set`` allocator uses.

    Args:
        config: the validated config.
        data: the table ``config`` was built from, overrides applied.
        later: dotted fields of ``data`` a later layer set (``--set`` overrides, a sweep
            point's values); a ``section.preset`` among them chose its section's fields.

    Returns:
        Messages such as ``cache.reservation = 'pow2' has no effect: ...``.
    """
    messages = []
    for moot in _moot_fields(config, data):
        written = _written_layer(moot.field, data, later)
        if written is None or moot.value == moot.default:
            continue
        if max(_chosen_layer(d, data, later) for d in moot.deciders) > written:
            continue  # a later layer moved the point away from where the setting applies
        messages.append(f"{moot.field} = {moot.value!r} has no effect: {moot.why}")
    return messages


def moot_reason(config: ConfigParts, data: dict[str, Any], dotted: str) -> str | None:
    """Why ``config`` does not read the field ``dotted`` (``"workload.rate_per_s"``), whatever
    its value; ``None`` when it reads it. ``data``: the table ``config`` was built from."""
    for moot in _moot_fields(config, data):  # (a table's fields with it: fleet.link.latency_s)
        if dotted == moot.field or dotted.startswith(moot.field + "."):
            return moot.why
    return None


def _moot_fields(config: ConfigParts, data: dict[str, Any]) -> Iterator[Moot]:
    cache, workload = config.cache, config.workload
    if cache.kv_cache_bytes is not None or cache.kv_cache_gib is not None:
        budget = next((f for f in BUDGET_FIELDS if _lookup(data, f) is not None), None)
        # the budget's name, not its value: a plan's or a sweep's points move it
        why = (
            f"{budget or 'an explicit KV budget'} sets the KV budget, which takes precedence "
            "over the one derived from gpu_memory_utilization and activation_headroom_bytes (as "
            "vLLM's kv_cache_memory_bytes does); drop one of them"
        )
        for name in ("gpu_memory_utilization", "activation_headroom_bytes"):
            yield _cache_field(config, name, BUDGET_FIELDS, why)
    allocators = _replica_allocators(config)
    named = (
        f"allocator {allocators[0]!r} has"
        if len(allocators) == 1
        else f"the replicas' allocators ({', '.join(repr(a) for a in allocators)}) have"
    )
    for name, what in ALLOCATOR_KNOBS.items():
        # (the engine leaves it out of the arguments of an allocator that does not take it)
        if not any(name in accepted_arguments(a) for a in allocators):
            users = ", ".join(a for a in POLICY_ARGUMENTS if name in accepted_arguments(a))
            why = f"{named} no {what} (the field applies to {users})"
            yield _cache_field(config, name, ("cache.allocator",), why)
    radix = all(caches_prefixes_always(a) for a in allocators)
    if radix and cache.enable_prefix_caching is False:
        why = (
            "allocator 'radix' is a prefix cache (SGLang's RadixCache) and caches prefixes "
            "whatever the setting (the run's summary says enable_prefix_caching = True)"
        )
        yield _cache_field(config, "enable_prefix_caching", ("cache.allocator",), why)
    if workload.arrival == "trace" and not workload.fallback_synthetic:
        why = (
            "arrival = 'trace' replays the trace's own arrival times (rate_per_s paces poisson "
            "and gamma arrivals, and the Poisson fallback of fallback_synthetic)"
        )
        deciders = ("workload.arrival", "workload.fallback_synthetic")
        yield _workload_field(config, "rate_per_s", deciders, why)
    if workload.arrival != "gamma":
        why = f"cv shapes gamma arrivals only, and arrival is {workload.arrival!r}"
        yield _workload_field(config, "cv", ("workload.arrival",), why)
    if workload.beam_width == 1 and workload.trace is None:  # (a trace's rows may beam)
        why = "beam_branch_tokens shapes beam search only, and beam_width is 1"
        yield _workload_field(config, "beam_branch_tokens", ("workload.beam_width",), why)
    if workload.num_turns == 1 and workload.trace is None:  # (a trace's sessions read it)
        why = "turn_gap_s spaces a conversation's turns, and num_turns is 1 (no trace sessions)"
        yield _workload_field(config, "turn_gap_s", ("workload.num_turns", "workload.trace"), why)
    if all(c.engine_args.engine == "vllm-v1" for c in config.replica_configs):
        why = (
            "vllm-v1 has no sequence groups: a request of n > 1 is fanned out into requests "
            "that share its prompt through the prefix cache"
        )
        yield _cache_field(config, "share_sequence_groups", ("scheduler.engine",), why)
    source = workload.length_source
    for kind, names in LENGTH_KNOBS.items():
        if kind != source:
            why = f"it shapes lengths = {kind!r} only, and the lengths are {source!r}"
            for name in names:
                yield _workload_field(config, name, ("workload.lengths", "workload.trace"), why)
    # (an "off" the user wrote, such as a sweep's reference row of k = 0 or a 0 GiB tier beside
    # its settings, is deliberate: only settings for a feature never turned on are moot)
    k_written = _lookup(data, "speculative.num_speculative_tokens") is not None
    if not config.speculative.num_speculative_tokens and not k_written:
        why = "speculative decoding is off while num_speculative_tokens is 0"
        for name in (
            "acceptance_rate",
            "acceptance_rates",  # (only the empty list validates beside k = 0)
            "draft_acceptance_rate",
            "draft_num_params",
            "draft_num_kv_layers",
            "method",
        ):
            yield _section_field(
                config.speculative,
                "speculative",
                name,
                ("speculative.num_speculative_tokens",),
                why,
            )
    size_written = _lookup(data, "offload.kv_offloading_size") is not None
    if not config.offload.enabled and not size_written:
        why = "CPU offloading is off: kv_offloading_size is unset"
        for name in ("link_bandwidth_bytes_per_s", "offload_prompt_only"):
            yield _section_field(
                config.offload, "offload", name, ("offload.kv_offloading_size",), why
            )
    disk_written = _lookup(data, "offload.disk_offloading_size") is not None
    if not config.offload.disk_enabled and not disk_written:  # (0 written: a sweep's "off")
        why = "there is no disk tier: disk_offloading_size (GiB) is unset"
        for name in ("disk_read_bandwidth_bytes_per_s", "disk_write_bandwidth_bytes_per_s"):
            yield _section_field(
                config.offload, "offload", name, ("offload.disk_offloading_size",), why
            )
    yield from _router_fields(config, data)
    yield from _swap_fields(config)
    yield from _link_field(config, data)


def _replica_allocators(config: ConfigParts) -> list[str]:
    """The allocators the run's pools use: the config's, unless every replica of a fleet names
    its own in ``fleet.replica_overrides``, and each one they name (a replica's pool reads the
    knobs its allocator takes)."""
    return list(dict.fromkeys(c.cache.allocator for c in config.replica_configs))


def _router_fields(config: ConfigParts, data: dict[str, Any]) -> Iterator[Moot]:
    """The router and its weights where each pick has one candidate; else the weights of the
    routers not chosen (``kvsim.fleet.routers.make_router`` hands each its own)."""
    fleet = config.fleet
    if fleet is None:
        return
    if fleet.disaggregated:
        single = fleet.prefill_replicas == 1 and fleet.replicas == 2
        why = "a fleet of 1 prefill and 1 decode replica gives each pick one candidate"
    else:  # (replicas = 1 written is a sweep's one-engine row: deliberate, as k = 0 is)
        single = fleet.replicas == 1 and _lookup(data, "fleet.replicas") is None
        why = "a fleet of 1 replica (replicas is unset) sends every request to it"
    if single:
        why += ", whatever the router"
        deciders = ("fleet.replicas", "fleet.prefill_replicas")
        for name in ("router", *WEIGHT_ROUTER):
            yield _section_field(fleet, "fleet", name, deciders, why)
        return
    for name, router in WEIGHT_ROUTER.items():
        if router != fleet.router:
            why = f"router {fleet.router!r} reads no {name} (the field applies to {router!r})"
            yield _section_field(fleet, "fleet", name, ("fleet.router",), why)
    weights = ROUTER_WEIGHTS["prefix"]
    if fleet.router == "prefix" and not any(getattr(fleet, w) for w in weights):
        why = (
            f"its weights ({', '.join(weights)}) are all 0, so every replica scores 0 and picks "
            "go round robin"
        )
        yield _section_field(fleet, "fleet", "router", tuple(f"fleet.{w}" for w in weights), why)


def _swap_fields(config: ConfigParts) -> Iterator[Moot]:
    """vLLM v0's swap settings where no request can swap (``V0Scheduler.with_swap_space``):
    ``swap_space_gib`` where there is no CPU pool; ``preemption_mode = 'swap'`` over a pool of no
    block (``V0Scheduler._preempt`` recomputes every victim, counting a swap fallback); and
    ``swap_copy_overhead_s`` in both cases."""
    fleet, scheduler = config.fleet, config.scheduler
    if fleet is not None and any(_SWAP_SECTIONS & set(t) for t in fleet.replica_overrides):
        return  # (a replica of its own engine or pool may swap: not worth proving here)
    if (no_pool := _no_swap_pool(config)) is not None:
        why, deciders = no_pool
        yield _section_field(scheduler, "scheduler", "swap_space_gib", deciders, why)
    elif (no_block := _no_swap_block(config)) is not None:
        why, deciders = no_block
        if scheduler.preemption_mode == "swap":  # ("recompute" is read: v0 refuses it for groups)
            yield _section_field(scheduler, "scheduler", "preemption_mode", deciders, why)
    else:
        return
    yield _section_field(config.cost, "cost", "swap_copy_overhead_s", deciders, why)


def _no_swap_pool(config: ConfigParts) -> tuple[str, tuple[str, ...]] | None:
    """Why the run has no CPU swap pool, and the fields that decide it; ``None`` if it has one."""
    allocator = config.cache.allocator
    if config.scheduler.engine == "vllm-v1":
        why = (
            "scheduler.engine = 'vllm-v1' has no CPU swap space: it recomputes every preempted "
            "request (swap applies to vllm-v0 over a paged pool)"
        )
        return why, ("scheduler.engine",)
    if not hands_out_blocks(allocator):
        why = (
            f"allocator {allocator!r} is not paged: vllm-v0 swaps paged blocks only, so it "
            "recomputes every preempted request (swap applies to 'paged' and 'vattention')"
        )
        return why, ("scheduler.engine", "cache.allocator")
    return None


def _no_swap_block(config: ConfigParts) -> tuple[str, tuple[str, ...]] | None:
    """Why v0's CPU swap pool holds no block (``swap_blocks``, as ``SwapSpace.from_gib``
    counts them), and the fields that decide it; ``None`` if it holds one."""
    gib, per_token = config.scheduler.swap_space_gib, config.bytes_per_token
    tokens = _swap_block_tokens(config)
    if swap_blocks(gib, tokens, per_token):
        return None
    why = (
        f"scheduler.swap_space_gib = {gib:g} holds no CPU block (one is {tokens} tokens x "
        f"{per_token:,} bytes = {tokens * per_token:,} bytes), so every swap-out falls back "
        "to recompute (counted in num_swap_fallbacks; vLLM would abort the engine instead)"
    )
    return why, ("scheduler.swap_space_gib", "scheduler.engine", *_BLOCK_DECIDERS)


# the sections a replica's own table may swap with, and what sizes a paged pool's swap block
_SWAP_SECTIONS = frozenset({"model", "parallel", "cache", "scheduler", "cost"})
_BLOCK_DECIDERS = (
    "cache.allocator",
    "cache.block_size_tokens",
    "cache.page_size_bytes",
    "cache.kv_cache_dtype",
    "model",
    "parallel",
)


def _swap_block_tokens(config: ConfigParts) -> int:
    """Tokens of the block a swap moves: the paged block, or a vAttention page of one tensor
    (``VAttentionAllocator.tokens_per_page``, its ``block_size_tokens``)."""
    cache = config.cache
    if not maps_virtual_pages(cache.allocator):
        return cache.block_size_tokens
    page = cache.page_size_bytes
    return vattention_pages(0, config.bytes_per_token, page, config.num_kv_tensors)[0]


def _link_field(config: ConfigParts, data: dict[str, Any]) -> Iterator[Moot]:
    """The prefill-to-decode link of a co-located fleet: ``kvsim.fleet.fleet.transfer_s``, its
    one reader, runs only as a decode replica receives a prefill replica's KV."""
    fleet = config.fleet
    # (prefill_replicas = 0 written is a sweep's co-located row: deliberate, as k = 0 is)
    if fleet is None or fleet.disaggregated or _lookup(data, "fleet.prefill_replicas") is not None:
        return
    why = (
        "a co-located fleet (prefill_replicas is unset) serves each request on one replica, so "
        "no KV crosses the prefill-to-decode link"
    )
    value = _link_value(fleet.link)
    yield Moot("fleet.link", value, DEFAULT_LINK, ("fleet.prefill_replicas",), why)


def _link_value(link: LinkSpec) -> Any:
    """The link as a message shows it: its preset's name while its fields are the preset's
    (``DEFAULT_LINK`` unedited is the default), else its fields."""
    try:
        preset = LinkSpec.model_validate(link.name)
    except ValueError:  # ("custom", or a table's own name)
        preset = None
    return link.name if link == preset else link.model_dump()


def _section_field(
    section: Any, prefix: str, name: str, deciders: tuple[str, ...], why: str
) -> Moot:
    default = type(section).model_fields[name].default
    value = getattr(section, name)
    value = list(value) if isinstance(value, tuple) else value  # as written: [] not ()
    return Moot(f"{prefix}.{name}", value, default, deciders, why)


def _cache_field(config: ConfigParts, name: str, deciders: tuple[str, ...], why: str) -> Moot:
    return _section_field(config.cache, "cache", name, deciders, why)


def _workload_field(config: ConfigParts, name: str, deciders: tuple[str, ...], why: str) -> Moot:
    return _section_field(config.workload, "workload", name, deciders, why)


def _lookup(data: dict[str, Any], dotted: str) -> Any:
    """``data[a][b]`` for ``"a.b"``, or ``None`` where a part is missing or not a table."""
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def _set_later(dotted: str, later: Collection[str]) -> bool:
    return any(dotted == key or dotted.startswith(key + ".") for key in later)


def _written_layer(dotted: str, data: dict[str, Any], later: Collection[str]) -> int | None:
    """Where the user wrote ``dotted``: 1 in the table, 2 in a later layer, ``None`` nowhere."""
    if _lookup(data, dotted) is None:
        return None
    return 2 if _set_later(dotted, later) else 1


def _chosen_layer(dotted: str, data: dict[str, Any], later: Collection[str]) -> int:
    """Where ``dotted`` got its value: 2 in a later layer (or by a preset named there), 1 in the
    table (or by a preset named there), 0 by default."""
    section = dotted.split(".", 1)[0]
    if _set_later(dotted, later) or f"{section}.preset" in later:
        return 2
    table = data.get(section)
    by_preset = isinstance(table, str) or (isinstance(table, dict) and "preset" in table)
    return 1 if _lookup(data, dotted) is not None or by_preset else 0
