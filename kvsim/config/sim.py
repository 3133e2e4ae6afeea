"""``SimConfig``: one run's validated, frozen configuration, and loading it from TOML.

Configs load from TOML (``tomllib``), validate with pydantic (errors name the field path, what
was expected and what was got) and serialise canonically, so a hash of one is a sweep point's key.
Serving defaults that depend on the model or GPU are resolved into ``SimConfig.engine_args``.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import re
from collections.abc import Collection, Sequence
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from kvsim.base.say_once import held_back, warn_once
from kvsim.base.textfile import cached_sha256_file
from kvsim.base.units import GiB
from kvsim.config.allocators import (
    PAGED_ALLOCATORS,
    SLAB_ALLOCATORS,
    caches_prefixes,
    caches_prefixes_always,
    hands_out_blocks,
    maps_virtual_pages,
    serves_hybrid_groups,
    serves_sequence_groups,
    vattention_pages,
)
from kvsim.config.cost_spec import CostSpec
from kvsim.config.fleet import DEFAULT_LINK, FleetSpec, PricingSpec, SloSpec, gpu_price_per_hour
from kvsim.config.hardware import (
    Frozen,
    GpuSpec,
    ModelSpec,
    ParallelConfig,
    check_parallel_fits_model,
    kv_bytes_per_token_per_gpu,
    kv_tensors_per_gpu,
    model_kv_groups,
    weight_bytes_per_gpu,
)
from kvsim.config.ignored import ignored_settings
from kvsim.config.layers import KVCacheGroups
from kvsim.config.memory import check_buddy_reach, check_memory, check_pool_shape
from kvsim.config.offload import OffloadConfig, check_offload
from kvsim.config.serving import CacheSpec, EngineArgs, SchedulerConfig, resolve_engine_args
from kvsim.config.speculative import SpeculativeConfig, eagle_head_params
from kvsim.workload import WorkloadSpec, load_workload

# SimConfig's default sections that name a preset: a field set alone edits that preset
DEFAULT_PRESETS = {"model": "opt-13b", "gpu": "a100-40gb", "fleet.link": DEFAULT_LINK}
logger = logging.getLogger(__name__)


class SimConfig(Frozen):
    """One simulation run: everything needed to reproduce it bit for bit.

    Sections: ``model``, ``gpu``, ``parallel`` (tensor/pipeline parallel sizes), ``cache``,
    ``scheduler`` (with the engine profile), ``workload``, ``cost``; plus the ``seed`` of every
    random draw.
    """

    model: ModelSpec = Field(
        default_factory=lambda: ModelSpec.model_validate(DEFAULT_PRESETS["model"])
    )
    gpu: GpuSpec = Field(default_factory=lambda: GpuSpec.model_validate(DEFAULT_PRESETS["gpu"]))
    parallel: ParallelConfig = ParallelConfig()
    cache: CacheSpec = CacheSpec()
    scheduler: SchedulerConfig = SchedulerConfig()
    workload: WorkloadSpec = WorkloadSpec()
    cost: CostSpec = CostSpec()
    fleet: FleetSpec | None = None
    slo: SloSpec = SloSpec()
    pricing: PricingSpec = PricingSpec()
    speculative: SpeculativeConfig = SpeculativeConfig()
    offload: OffloadConfig = OffloadConfig()
    seed: int = Field(default=0, ge=0, le=2**64 - 1)
    debug_invariants: bool = False
    record_memory: bool = True
    memory_resolution: Literal["event", "step"] = Field(
        default="event",
        description="one memory row per engine event (fast-forwarded span) or per step (slower)",
    )
    summary_window: Literal["run", "arrivals"] = Field(
        default="run",
        description=(
            "window of the memory and batch metrics: the whole run, or 'arrivals': from 10 % "
            "into the arrival span to the last arrival (ramp-up and drain left out, as the "
            "PagedAttention paper's Figures 2 and 13 measure a loaded server); a window with no "
            "engine step (one request, or all arriving at once) leaves the KV-memory metrics "
            "out, with a warning naming them"
        ),
    )

    @field_validator("workload", mode="before")
    @classmethod
    def _workload_preset(cls, value: Any) -> Any:
        """``workload = "azure_conv"`` or ``{preset = "azure_conv", ...}`` loads ``workloads/``."""
        if isinstance(value, str):
            value = {"preset": value}
        if isinstance(value, dict) and "preset" in value:
            rest = {k: v for k, v in value.items() if k != "preset"}
            if not isinstance(value["preset"], str):
                raise ValueError(
                    f"preset: expected a workload preset name, got {value['preset']!r}"
                )
            try:
                return load_workload(value["preset"], **rest)
            except FileNotFoundError as err:
                raise ValueError(str(err)) from None
        return value

    @model_serializer(mode="wrap")
    def _drop_unset_sections(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        """Leave ``fleet``, ``slo``, ``pricing``, ``speculative`` and ``offload`` out when
        unset, so a config without them keeps its canonical hash (and its sweep points); and
        in the canonical form (``canonical_json``) ``speculative`` while it is off
        (``num_speculative_tokens`` 0): its other fields change nothing, so a sweep's "no
        drafts" row is one run whatever acceptance rate or drafter the other rows name."""
        data: dict[str, Any] = handler(self)
        if data.get("fleet") is None:
            data.pop("fleet", None)
        canonical = bool(info.context and info.context.get("canonical"))
        if self.speculative == SpeculativeConfig() or (canonical and not self.speculative.enabled):
            data.pop("speculative", None)
        if self.offload == OffloadConfig():
            data.pop("offload", None)
        for key in ("slo", "pricing"):
            if not any(v is not None for v in data.get(key, {}).values()):
                data.pop(key, None)
        return data

    @property
    def replica_configs(self) -> tuple[SimConfig, ...]:
        """Each replica's config (``fleet_replica_configs``); ``(self,)`` without a fleet, not
        cached: a config holding itself would recurse without end in ``==``.

        Raises:
            ValueError: a replica's table makes an invalid config (naming the replica).
        """
        return (self,) if self.fleet is None else self.fleet_replica_configs

    @cached_property
    def fleet_replica_configs(self) -> tuple[SimConfig, ...]:
        """Each replica's config of a fleet (``fleet.replica_overrides`` over this config's
        sections, no ``fleet``).

        Raises:
            ValueError: a replica's table makes an invalid config (naming the replica).
        """
        fleet = self.fleet
        assert fleet is not None, "a fleet's replicas"
        base = self.model_dump(mode="json")
        base.pop("fleet", None)
        out: list[SimConfig] = []
        plain = None
        for i in range(fleet.replicas):
            table = fleet.replica_overrides[i] if i < len(fleet.replica_overrides) else None
            if not table:
                plain = plain or SimConfig.model_validate(base)
                out.append(plain)
                continue
            data = copy.deepcopy(base)
            for section, value in table.items():
                if isinstance(value, dict) and isinstance(data.get(section), dict):
                    if "preset" in value:  # a preset replaces the section
                        data[section] = value
                    else:
                        data[section] = {**data[section], **value}
                else:
                    data[section] = value
            try:
                out.append(SimConfig.model_validate(data))
            except ValidationError as err:
                raise ValueError(
                    f"fleet.replica_overrides[{i}]: {format_validation_error(err)}"
                ) from None
        return tuple(out)

    @property
    def num_gpus(self) -> int:
        """GPUs the run holds: every replica's ``world_size``."""
        return sum(c.parallel.world_size for c in self.replica_configs)

    def usd_per_hour(self) -> float:
        """What the run's GPUs cost per hour (every replica's GPUs at its GPU's price).

        Raises:
            ValueError: a GPU without a price (``kvsim.config.fleet.gpu_price_per_hour``).
        """
        return sum(
            c.parallel.world_size * gpu_price_per_hour(c.gpu.name, c.pricing)
            for c in self.replica_configs
        )

    @cached_property
    def engine_args(self) -> EngineArgs:
        """The serving knobs with every profile default resolved (``config.serving``)."""
        args = resolve_engine_args(self.scheduler, self.cache, self.model, self.gpu)
        spec = self.speculative
        if not spec.enabled:
            return args
        caching = args.enable_prefix_caching
        return replace(
            args,
            num_speculative_tokens=spec.num_speculative_tokens,
            num_lookahead_tokens=spec.num_lookahead_tokens,
            num_hash_lookahead_tokens=spec.hash_lookahead_tokens if caching else 0,
        )

    @property
    def caches_prefixes(self) -> bool:
        """The run's pool caches prefixes (``kvsim.config.allocators.caches_prefixes``)."""
        return caches_prefixes(self.cache.allocator, self.engine_args.enable_prefix_caching)

    @property
    def max_model_len(self) -> int:
        """Prompt + output tokens one request may hold (default: the model's context)."""
        return self.engine_args.max_model_len

    @property
    def bytes_per_token(self) -> int:
        """KV bytes one token takes on one GPU (KV dtype, TP and PP split applied); under
        hybrid KV cache groups, one slot's: one token of one group (``kv_groups``)."""
        groups = self.kv_groups
        if groups is not None:
            return groups.slot_bytes
        return kv_bytes_per_token_per_gpu(
            self.model, self.parallel, self.cache.kv_cache_dtype, self.draft_kv_layers
        )

    @property
    def draft_kv_layers(self) -> int:
        """Speculative-drafter layers keeping KV beside the target's on one GPU
        (``SpeculativeConfig.num_draft_kv_layers``; 0 without speculation)."""
        return self.speculative.num_draft_kv_layers

    @property
    def num_kv_tensors(self) -> int:
        """KV cache tensors one GPU keeps (``kvsim.config.hardware.kv_tensors_per_gpu``)."""
        return kv_tensors_per_gpu(self.model, self.parallel, self.draft_kv_layers)

    @cached_property
    def kv_groups(self) -> KVCacheGroups | None:
        """vLLM v1's hybrid KV cache groups of the run's pool (``kvsim.config.layers``), or
        ``None``: every layer is full attention, ``hybrid_kv_cache`` is off, or the policy or
        profile has no groups (its sliding layers then count as full attention, with a
        warning)."""
        attention = self.model.attention
        if attention is None or not attention.hybrid_kv_cache:
            return None
        if not attention.num_sliding_layers and not attention.num_state_layers:
            return None  # (an attention table of a dense model: every layer full, no groups)
        window = attention.sliding_window_tokens
        if attention.num_sliding_layers and window is not None and window >= self.max_model_len:
            warn_once(
                logger,
                f"model.attention.sliding_window_tokens: a window of {window:,} tokens is at "
                f"least scheduler.max_model_len ({self.max_model_len:,}): no request outgrows "
                "it, so the sliding layers keep every token's KV as full attention does",
            )
        if self.engine_args.engine != "vllm-v1" or not serves_hybrid_groups(self.cache.allocator):
            warn_once(
                logger,
                f"{self.model.name}: hybrid KV cache groups are modelled for the paged policy "
                f"under vllm-v1 only; {self.cache.allocator!r} under {self.engine_args.engine} "
                "keeps every attention layer's KV for every token",
            )
            return None
        if self.parallel.pipeline_parallel_size > 1:
            raise ValueError(
                "parallel.pipeline_parallel_size: hybrid KV cache groups are modelled on one "
                f"pipeline stage, got {self.parallel.pipeline_parallel_size}"
            )
        return model_kv_groups(
            self.model,
            self.parallel,
            self.cache.kv_cache_dtype,
            self.cache.block_size_tokens,
            self.draft_kv_layers,
            self.speculative.num_speculative_tokens,
        )

    @property
    def weight_bytes_per_gpu(self) -> int:
        """Weights one GPU holds, bytes: the model's share and, under speculative decoding, the
        drafter's (``kvsim.config.hardware.weight_bytes_per_gpu``)."""
        return weight_bytes_per_gpu(self.model, self.parallel, self.draft_params)

    @property
    def draft_params(self) -> int:
        """Parameters of the speculative drafter the GPUs hold and read a draft pass (0 without
        speculation): ``draft_num_params``, else an EAGLE head of the model's shape for
        ``"eagle"`` (``eagle_head_params``) and 0 for ``"ngram"``."""
        spec = self.speculative
        if not spec.num_speculative_tokens:
            return 0
        if spec.draft_num_params is not None:
            return spec.draft_num_params
        return eagle_head_params(self.model) if spec.method == "eagle" else 0

    @property
    def kv_cache_bytes(self) -> int:
        """KV budget per GPU in bytes (given, or derived from ``gpu_memory_utilization``)."""
        if self.cache.kv_cache_bytes is not None:
            return self.cache.kv_cache_bytes
        if self.cache.kv_cache_gib is not None:
            return int(self.cache.kv_cache_gib * GiB)
        return int(
            self.cache.gpu_memory_utilization * self.gpu.memory_bytes
            - self.weight_bytes_per_gpu
            - self.cache.activation_headroom_bytes
        )

    @property
    def capacity_tokens(self) -> int:
        """KV pool size in token slots: ``kv_cache_bytes // bytes_per_token``."""
        return max(0, self.kv_cache_bytes) // self.bytes_per_token

    @model_validator(mode="after")
    def _consistent(self) -> SimConfig:
        check_parallel_fits_model(self.model, self.parallel)
        args = self.engine_args
        _check_state_layers(self, args)
        _check_v0_prefix_caching_window(self, args)
        check_buddy_reach(self)
        check_memory(self)
        check_pool_shape(self)
        _check_workload_fits_profile(self, args)
        _warn_uncapped_prompt_max_tokens(self)
        _check_blocks(self)
        _check_fleet(self)
        check_offload(self)
        if args.max_model_len > self.model.max_position_embeddings:
            warn_once(
                logger,
                f"scheduler.max_model_len = {args.max_model_len:,} exceeds {self.model.name}'s "
                f"trained context of {self.model.max_position_embeddings:,} tokens; vLLM refuses "
                "this unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 (parametric workload lengths are "
                "drawn up to max_model_len)",
            )
        return self

    def canonical_json(self) -> str:
        """Canonical serialisation: sorted keys, no whitespace, JSON types."""
        data = self.model_dump(mode="json", context={"canonical": True})
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    def key(self) -> str:
        """Short stable hash of the canonical config and of the files it reads (a sweep point's
        key): the same config on another trace file, or on the shipped length table when the
        file is missing, is another point, and so is one whose length table, calibration table,
        price table or tokenizer file was edited (``file_identity``)."""
        text = self.canonical_json() + data_identity(self.workload.trace) + file_identity(self)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def data_identity(trace: str | None) -> str:
    """``""`` without a trace; the trace file's name and SHA-256 when it is found; ``"|missing"``
    when it is not (the run then fails, or falls back to a shipped table)."""
    if trace is None:
        return ""
    from kvsim.workload import DataNotFoundError, resolve_trace

    try:
        path, _ = resolve_trace(trace)
    except (DataNotFoundError, ValueError):
        return "|missing"
    return f"|{path.name}:{cached_sha256_file(path)[:16]}"


def file_identity(config: SimConfig) -> str:
    """The name and SHA-256 of each file besides the trace that ``config`` reads by path (a
    length table file, a calibration table, a price table, a tokenizer), ``""`` where it reads
    none (so a config without one keeps its key). Shipped tables are kvsim's own data."""
    from kvsim.workload.length_table import shipped_table_path
    from kvsim.workload.sharegpt import tokenizer_file

    paths: list[tuple[str, Path]] = []
    table = config.workload.length_table
    if table is not None and shipped_table_path(table) is None and Path(table).is_file():
        paths.append(("length_table", Path(table)))
    calibration = config.cost.calibration
    if calibration not in (None, "analytic") and Path(calibration).is_file():
        paths.append(("calibration", Path(calibration)))
    if config.pricing.table is not None and Path(config.pricing.table).is_file():
        paths.append(("pricing", Path(config.pricing.table)))
    if config.workload.tokenizer is not None:
        with contextlib.suppress(ValueError):  # (no such file: the run says so)
            paths.append(("tokenizer", tokenizer_file(config.workload.tokenizer)))
    return "".join(f"|{what}={path.name}:{cached_sha256_file(path)[:16]}" for what, path in paths)


def _check_blocks(config: SimConfig) -> None:
    """A paged pool holds at least one usable block (two under v1: block 0 is the null block);
    a vAttention pool at least one row of pages."""
    if maps_virtual_pages(config.cache.allocator):
        tensors = config.num_kv_tensors
        page, per_token = config.cache.page_size_bytes, config.bytes_per_token
        try:
            _, rows = vattention_pages(config.kv_cache_bytes, per_token, page, tensors)
        except ValueError as err:
            raise ValueError(f"cache.{err}") from None
        if rows < 1:
            raise ValueError(
                f"cache.page_size_bytes: the {config.kv_cache_bytes:,}-byte KV pool holds no row "
                f"of {tensors} pages of {page:,} bytes ({config.model.name}); lower the page size "
                "or raise the KV budget"
            )
        return
    if config.cache.allocator not in PAGED_ALLOCATORS:
        return
    blocks = config.capacity_tokens // config.cache.block_size_tokens
    if blocks < 1 + config.engine_args.reserve_null_block:
        raise ValueError(
            f"cache.block_size_tokens: {config.cache.block_size_tokens:,}-token blocks give the "
            f"{config.capacity_tokens:,}-slot KV pool {blocks} block(s), fewer than "
            f"{1 + config.engine_args.reserve_null_block} (vLLM v1 reserves block 0); lower it"
        )


def _model_differences(one: SimConfig, other: SimConfig, most: int = 4) -> str:
    """The model fields and KV dtype where ``other`` differs from ``one``, each as ``field (A
    -> B)``: a replica's name may stay its preset's while its table changes a field."""
    a, b = (
        dotted_fields(
            {"model": c.model.model_dump(), "cache": {"kv_cache_dtype": c.cache.kv_cache_dtype}}
        )
        for c in (one, other)
    )
    keys = [k for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)]
    shown = [f"{k} ({a.get(k, '-')} -> {b.get(k, '-')})" for k in keys]
    more = f" and {len(shown) - most} more" if len(shown) > most else ""
    return ", ".join(shown[:most]) + more


def _check_fleet(config: SimConfig) -> None:
    """Every replica runs one engine profile (the workload is shaped once, by its rules); a
    disaggregated fleet runs vLLM v1 on paged pools (its KV connector is a v1 feature) of one
    model and KV dtype (a decode replica continues the KV its prefill replica computed); and
    every replica's config is valid (``SimConfig.replica_configs``)."""
    fleet = config.fleet
    if fleet is None:
        return
    first = config.replica_configs[0]
    engine = config.engine_args.engine  # (the config's own, which shapes the workload)
    caching = any(r.caches_prefixes for r in config.replica_configs)
    if fleet.router in ("prefix", "kv_cost") and fleet.replicas > 1 and not caching:
        warn_once(
            logger,
            f"fleet.router = {fleet.router!r} scores the prefix each replica caches, but no "
            "replica caches prefixes (cache.enable_prefix_caching is off): every score is 0, "
            "so it routes by load alone",
        )
    for i, replica in enumerate(config.replica_configs):
        if replica.engine_args.engine != engine:
            raise ValueError(
                f"fleet.replica_overrides[{i}]: scheduler.engine = "
                f"{replica.engine_args.engine!r}, the config's is {engine!r}; a fleet's "
                "replicas run one engine profile (vLLM v1 serves a request of n > 1 as "
                "samples, v0 as one sequence group, and the workload is shaped once for all): "
                "set scheduler.engine in the config, not a replica's table"
            )
        if fleet.disaggregated and (
            replica.model != first.model
            or replica.cache.kv_cache_dtype != first.cache.kv_cache_dtype
        ):
            raise ValueError(
                f"fleet.replica_overrides[{i}]: a disaggregated fleet's decode replicas continue "
                f"the KV its prefill replicas computed, so every replica serves one model in one "
                f"KV dtype; replica {i}'s differs from replica 0's in "
                + _model_differences(first, replica)
            )
        if fleet.disaggregated and replica.engine_args.engine != "vllm-v1":
            raise ValueError(
                f"fleet.prefill_replicas: disaggregated prefill moves KV through vLLM v1's KV "
                f"connector; replica {i} runs {replica.engine_args.engine!r} (set "
                "scheduler.engine = 'vllm-v1')"
            )
        if fleet.disaggregated and replica.cache.allocator != "paged":
            raise ValueError(
                f"fleet.prefill_replicas: disaggregated prefill moves paged blocks; replica {i}"
                f" uses {replica.cache.allocator!r} (set cache.allocator = 'paged')"
            )


def _warn_uncapped_prompt_max_tokens(config: SimConfig) -> None:
    """A slab sized prompt + ``max_tokens`` with no client cap (``workload.max_tokens`` unset)
    is ``max_model_len`` tokens (a request's ``max_tokens`` is then ``max_model_len`` less its
    prompt, as vLLM defaults it): legal, the same slabs as ``reservation = 'max'``; say so."""
    cache = config.cache
    if cache.allocator not in SLAB_ALLOCATORS or cache.reservation != "prompt_max_tokens":
        return
    if config.workload.max_tokens is not None:
        return
    warn_once(
        logger,
        "cache.reservation = 'prompt_max_tokens' with workload.max_tokens unset: each request's "
        f"max_tokens is max_model_len ({config.max_model_len:,}) less its prompt, so every slab "
        "is max_model_len tokens, as with 'max'; set workload.max_tokens to the clients' cap",
    )


def _check_state_layers(config: SimConfig, args: EngineArgs) -> None:
    """A model with state (Mamba, linear-attention) layers runs only where its per-request
    state is modelled: vLLM v1's hybrid KV cache groups on the paged policy (elsewhere its
    state would be left out and the pool overstated). With prefix caching on, say that kvsim
    keeps no prefix states (vLLM's ``mamba_cache_mode`` "none"), so no request hits, whereas
    vLLM 0.34 turns on "align" with prefix caching (``vllm/model_executor/models/config.py``,
    ``MambaModelConfig``: states kept at block boundaries).

    Raises:
        ValueError: the engine or allocator has no hybrid KV cache groups.
    """
    attention = config.model.attention
    if attention is None or not attention.num_state_layers:
        return
    layers = f"{config.model.name}'s {attention.num_state_layers} state layers"
    if args.engine != "vllm-v1" or not serves_hybrid_groups(config.cache.allocator):
        field = "scheduler.engine" if args.engine != "vllm-v1" else "cache.allocator"
        value = args.engine if args.engine != "vllm-v1" else config.cache.allocator
        raise ValueError(
            f"{field}: {layers} keep a state per request, which kvsim models in vLLM v1's "
            f"hybrid KV cache groups only (allocator 'paged', engine 'vllm-v1'), got {value!r}"
        )
    if args.enable_prefix_caching:
        warn_once(
            logger,
            f"cache.enable_prefix_caching: {layers} keep no prefix state in kvsim (vLLM's "
            "mamba_cache_mode 'none'), so no request hits the prefix cache; vLLM 0.34 with "
            "prefix caching on keeps states at block boundaries (mamba_cache_mode 'align'), "
            "which kvsim does not model",
        )


def _check_v0_prefix_caching_window(config: SimConfig, args: EngineArgs) -> None:
    """vLLM v0 refuses prefix caching on a model whose layers all slide (Mistral-7B-v0.1:
    ``CacheConfig._verify_prefix_caching``, "Prefix caching is not supported with sliding
    window"); v1 caches their prefixes (its sliding-window KV cache group).

    Raises:
        ValueError: naming ``cache.enable_prefix_caching``, the model and its window."""
    attention = config.model.attention
    if args.engine != "vllm-v0" or not args.enable_prefix_caching or attention is None:
        return
    if not attention.num_sliding_layers or attention.num_sliding_layers < config.model.num_layers:
        return
    raise ValueError(
        f"cache.enable_prefix_caching: vLLM v0 does not cache prefixes of a sliding-window "
        f"model ({config.model.name}'s {attention.sliding_window_tokens:,}-token window on "
        "every layer; v0's CacheConfig refuses it), got true; use scheduler.engine = 'vllm-v1' "
        "or turn prefix caching off"
    )


def _check_workload_fits_profile(config: SimConfig, args: EngineArgs) -> None:
    """Reject combinations the profile or allocator cannot run (each names the field)."""
    wl, cache = config.workload, config.cache
    paged = hands_out_blocks(cache.allocator)  # (what swap moves)
    if wl.shared_prefix_tokens >= args.max_model_len:
        raise ValueError(
            f"workload.shared_prefix_tokens = {wl.shared_prefix_tokens:,}: a shared prefix must "
            f"be shorter than scheduler.max_model_len ({args.max_model_len:,}), which every "
            "request's prompt and output fit in"
        )
    if args.engine == "vllm-v1" and wl.beam_width > 1:
        raise ValueError(
            "workload.beam_width: beam search runs outside vLLM v1's engine (LLM.beam_search "
            "submits one request per step); use scheduler.engine = 'vllm-v0' for the paper's "
            "in-engine beam search"
        )
    groups = args.engine == "vllm-v0" and (wl.n > 1 or wl.beam_width > 1)
    width = max(wl.n, wl.beam_width)
    if groups and width > args.max_num_seqs:
        field = "n" if wl.n > 1 else "beam_width"
        raise ValueError(group_over_max_num_seqs(f"workload.{field} = {width}", args))
    if groups and paged and args.preemption_mode == "recompute":
        raise ValueError(
            "scheduler.preemption_mode: vLLM v0 cannot recompute a multi-sequence group "
            "(_preempt_by_recompute takes one sequence); leave it unset (recompute single "
            "sequences, swap groups) or set 'swap'"
        )
    if args.engine == "vllm-v0" and args.preemption_mode == "swap" and not paged:
        raise ValueError(
            f"scheduler.preemption_mode: swap moves paged blocks; {cache.allocator!r} is not "
            "paged (use allocator = 'paged', or leave preemption_mode unset to recompute)"
        )
    if cache.enable_prefix_caching and not (paged or caches_prefixes_always(cache.allocator)):
        raise ValueError(
            f"cache.enable_prefix_caching: prefix caching needs a paged pool, not "
            f"{cache.allocator!r}"
        )
    if config.speculative.enabled:
        _check_speculative(config, args)
    if not serves_sequence_groups(cache.allocator) and (wl.n > 1 or wl.beam_width > 1):
        raise ValueError(
            f"cache.allocator: {cache.allocator!r} serves single sequences; use 'paged' for "
            "n > 1 or beams"
        )
    if maps_virtual_pages(cache.allocator) and cache.enable_prefix_caching:
        raise ValueError(
            "cache.enable_prefix_caching: allocator 'vattention' maps each request its own "
            "pages (no prefix cache); use 'paged' or 'radix' to cache prefixes"
        )


def _check_speculative(config: SimConfig, args: EngineArgs) -> None:
    """Speculative decoding runs under vLLM v1's scheduler, on a block pool (a slab sized by a
    reservation cannot take the lookahead slots; the radix tree's holding follows its tokens),
    one sequence per request, with a budget that holds a verification."""
    k = config.speculative.num_speculative_tokens
    if args.engine != "vllm-v1":
        raise ValueError(
            "speculative.num_speculative_tokens: speculative decoding runs under vLLM v1's "
            "scheduler (num_tokens_with_spec); set scheduler.engine = 'vllm-v1'"
        )
    if not hands_out_blocks(config.cache.allocator):  # (lookahead slots come from a block pool)
        raise ValueError(
            f"speculative.num_speculative_tokens: {k} drafts need lookahead slots from a block "
            f"pool ('paged' or 'vattention'), not {config.cache.allocator!r}"
        )
    threshold = args.long_prefill_token_threshold
    if 0 < threshold <= k:
        raise ValueError(
            f"scheduler.long_prefill_token_threshold ({threshold}) must be 0 or exceed "
            f"speculative.num_speculative_tokens ({k}): vLLM pads a one-token admission to a "
            f"whole verification of 1 + {k} tokens, which the threshold would cut"
        )
    if args.max_num_batched_tokens <= k:
        raise ValueError(
            f"scheduler.max_num_batched_tokens ({args.max_num_batched_tokens}) must exceed "
            f"speculative.num_speculative_tokens ({k}): one verification takes 1 + {k} tokens"
        )
    _warn_large_drafter(config)


def _warn_large_drafter(config: SimConfig) -> None:
    """A drafter at least as large as the model it drafts for (more weights, or more layers
    keeping KV) is legal but no speculative decoder's: likely a slip of a digit."""
    spec, model = config.speculative, config.model
    if spec.draft_num_params is not None and spec.draft_num_params >= model.num_params:
        warn_once(
            logger,
            f"speculative.draft_num_params = {spec.draft_num_params:,} is at least "
            f"{model.name}'s {model.num_params:,}: a drafter this size reads as many weights a "
            "draft pass as a verification does, and speculation cannot pay",
        )
    if spec.draft_num_kv_layers is not None and spec.draft_num_kv_layers >= model.num_kv_layers:
        warn_once(
            logger,
            f"speculative.draft_num_kv_layers = {spec.draft_num_kv_layers} is at least "
            f"{model.name}'s {model.num_kv_layers} layers (EAGLE keeps 1): each token slot "
            "then holds the drafter's KV beside as much of the target's",
        )


def group_over_max_num_seqs(what: str, args: EngineArgs) -> str:
    """Why a sequence group wider than ``max_num_seqs`` never runs under vLLM v0: its scheduler
    admits a group's sequences together, each counted against ``max_num_seqs``
    (``SchedulingBudget.can_schedule``), so the group waits forever at the queue's head,
    whatever the KV pool holds."""
    default = " (vLLM v0's default)" if args.max_num_seqs == 256 else ""
    return (
        f"{what}: vLLM v0 runs a request's sequences together and counts each against "
        f"scheduler.max_num_seqs = {args.max_num_seqs}{default}, so this group never starts "
        "whatever the KV budget; raise scheduler.max_num_seqs or lower n / beam_width"
    )


# a field's name in a check's message, or an item of it ("acceptance_rates[0]")
_FIELD_NAME = re.compile(r"[A-Za-z_]\w*(\[\d+\])*")
# the sections a preset's name may stand for (``kvsim presets``)
PRESET_SECTIONS = frozenset({"model", "gpu", "cost", "workload"})


# pydantic's error types for a value of the wrong kind where a number, text, flag or list belongs
_SCALAR_OR_LIST_ERRORS = frozenset(
    {
        "int_type",
        "int_parsing",
        "float_type",
        "float_parsing",
        "string_type",
        "bool_type",
        "bool_parsing",
        "list_type",
        "tuple_type",
        "literal_error",
    }
)


def format_validation_error(err: ValidationError) -> str:
    """One line per problem: ``cache.block_size_tokens: must be >= 1 ... got 0``."""
    lines = []
    for e in err.errors():
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"]).lstrip(".")
        msg = e["msg"].removeprefix("Value error, ")
        field, sep, rest = msg.partition(": ")
        if loc and sep and _FIELD_NAME.fullmatch(field):  # "workload" + "num_requests: ..."
            if loc.rpartition(".")[2] != field:  # (a field's own check names it already)
                loc = f"{loc}.{field}"
            msg = rest
        elif loc and sep and (field == loc or field.startswith(f"{loc}.")):
            loc, msg = field, rest  # a check that names its field in full ("model.attention")
        # a section given a scalar: "a table", not pydantic's class name ("instance of GpuSpec")
        table = "a table or a preset name" if loc in PRESET_SECTIONS else "a table"
        msg = re.sub(r"a valid dictionary or instance of \w+", table, msg)
        got = e.get("input")
        # kvsim's messages show the value ("got ..."), or name a string one, quoted ("no
        # workload preset 'x'"; a number's digits may appear in a message by chance)
        named = isinstance(got, str) and repr(got) in msg
        custom = e["type"] == "value_error" and ("got " in msg or named)
        shown = "" if isinstance(got, dict) or custom else f", got {_short(got)}"
        if isinstance(got, dict) and not custom and e["type"] in _SCALAR_OR_LIST_ERRORS:
            shown = f", got a table {_short(got)}"  # (where a value or a list belongs)
        if shown and ", got " in msg:  # ("a valid integer, got a number with a fractional part")
            shown = f": {_short(got)}"
        if e["type"] == "extra_forbidden":
            shown += did_you_mean(tuple(str(p) for p in e["loc"]))
        lines.append(f"{loc}: {msg}{shown}" if loc else msg)  # model checks name their field
    return "\n".join(lines)


def config_sections(of: Any) -> dict[str, Any]:
    """The section fields of a pydantic config class (``SimConfig``, a section's class): field
    name -> its section's class (the first pydantic model of its annotation's union)."""
    import typing

    from pydantic import BaseModel

    out: dict[str, Any] = {}
    for name, info in getattr(of, "model_fields", {}).items():
        for t in (info.annotation, *typing.get_args(info.annotation)):
            if isinstance(t, type) and issubclass(t, BaseModel):
                out[name] = t
                break
    return out


def field_annotation(field: str) -> Any:
    """The type annotation of the dotted ``SimConfig`` field ``field``
    (``"speculative.num_speculative_tokens"`` -> ``int | None``); ``None`` if there is none."""
    *path, name = field.split(".")
    model = section_at(path)
    info = None if model is None else model.model_fields.get(name)
    return None if info is None else info.annotation


def section_at(path: Sequence[str]) -> Any:
    """The ``SimConfig`` section model at ``path`` (``["model", "attention"]``), ``None`` where
    a part names no section."""
    model: Any = SimConfig
    for part in path:
        model = config_sections(model).get(part)
        if model is None:
            return None
    return model


# vLLM engine arguments kvsim names otherwise (its units in the name)
VLLM_NAMES = {"block_size": "block_size_tokens", "swap_space": "swap_space_gib"}
# vLLM engine arguments kvsim reads in another form: what to set instead
VLLM_INSTEAD = {
    "num_gpu_blocks_override": "cache.kv_cache_bytes = blocks x block_size_tokens x the bytes "
    "of a KV slot (the run header's pool line: 'KV slots of N KiB'; vLLM's null block is one "
    "of the blocks)",
    "kv_cache_memory_bytes": "cache.kv_cache_bytes (the pool in bytes per GPU)",
}


def did_you_mean(loc: tuple[str, ...]) -> str:
    """``"; did you mean 'num_requests'?"`` for a misspelt key of ``SimConfig`` at ``loc``: the
    field of that name (or of vLLM's, ``VLLM_NAMES``) in another section, else the one field
    of its section the key begins (``spec`` -> ``speculative``, ``rate`` -> ``rate_per_s``),
    the closest one (``difflib``'s ratio >= 0.6), or a field of a section one level down that
    has the key (``attention`` -> ``model.attention``); each as its whole dotted name, ``""``
    when none."""
    import difflib

    def paths(of: Any, prefix: str) -> dict[str, list[str]]:  # field -> its dotted paths
        out: dict[str, list[str]] = {}
        for name in getattr(of, "model_fields", {}):
            out.setdefault(name, []).append(f"{prefix}{name}")
        for name, sub in config_sections(of).items():
            for field, found in paths(sub, f"{prefix}{name}.").items():
                out.setdefault(field, []).extend(found)
        return out

    if loc[-1] in VLLM_INSTEAD:
        return f"; kvsim takes {VLLM_INSTEAD[loc[-1]]}"
    model = section_at(loc[:-1])
    if model is None:
        return ""
    key, names = loc[-1], list(model.model_fields)
    prefix = "".join(f"{part}." for part in loc[:-1])  # (the hint is the whole dotted field)
    # a vLLM engine argument's own name, or a field of another section ("block_size" at the
    # top: "cache.block_size_tokens"), before a near spelling in this one
    named = VLLM_NAMES.get(key, key)
    if named in names:
        return f"; did you mean {prefix + named!r}?"
    elsewhere = paths(SimConfig, "").get(named, [])
    if len(elsewhere) == 1:  # (a key of several sections, such as name, says nothing)
        return f"; did you mean {elsewhere[0]!r}?"
    # the one field the key begins ("rate" -> rate_per_s, not the nearer spelling "trace")
    close = [name for name in names if name.startswith(key)] if len(key) >= 3 else []
    if len(close) != 1:
        close = difflib.get_close_matches(key, names, n=1)
    if close:
        return f"; did you mean {prefix + close[0]!r}?"
    close = [
        f"{prefix}{name}.{key}"
        for name, sub in config_sections(model).items()
        if key in getattr(sub, "model_fields", {})
    ][:1]
    return f"; did you mean {close[0]!r}?" if close else ""


def _short(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 80 else shown[:77] + "..."


def _check_plain(value: Any, where: str) -> None:
    """Only JSON types (and finite or infinite floats, which pydantic judges) are config values.

    Raises:
        ValueError: naming the dotted path of a TOML date/time or another object.
    """
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where or 'config'}: keys must be strings, got {key!r}")
            _check_plain(item, f"{where}.{key}" if where else key)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_plain(item, f"{where}[{i}]")
    elif value is not None and not isinstance(value, (str, int, float, bool)):
        raise ValueError(
            f"{where}: expected a number, string, boolean, list or table, got {value!r} "
            f"({type(value).__name__})"
        )


def config_from_dict(
    data: dict[str, Any],
    overrides: dict[str, Any] | None = None,
    *,
    varied: Collection[str] = (),
    warn: bool = True,
) -> SimConfig:
    """Validate a plain dict (as from TOML) into a ``SimConfig``; see ``load_config``.

    A setting the config ignores (``gpu_memory_utilization`` beside an explicit KV budget, a
    ``reservation`` on a paged pool) is logged as a warning (``kvsim.config.ignored``), unless an
    override (or a field in ``varied``) made it moot.

    Args:
        data: the config table.
        overrides: dotted fields replacing the table's values.
        varied: dotted fields already set in ``data`` over a base table (a sweep point's
            values), which count as overrides for the warnings.
        warn: log the ignored settings and the checks' warnings (``False``: a config built
            only to compare or check it says nothing; ``kvsim.base.say_once.held_back``).

    Raises:
        ValueError: a field is invalid, or a value is no JSON type (a TOML date); the message
            names the dotted field.
    """
    if not isinstance(data, dict):
        raise ValueError(f"config: expected a table of sections, got {_short(data)}")
    _check_plain(data, "")
    _check_plain(overrides or {}, "")
    data = json.loads(json.dumps(data))  # deep copy, plain types
    overrides = overrides or {}
    apply_overrides(data, overrides)
    try:
        with contextlib.nullcontext() if warn else held_back():  # (its checks' warnings too)
            config = SimConfig.model_validate(data)
    except ValidationError as err:
        raise ValueError(format_validation_error(err)) from None
    for message in ignored_settings(config, data, [*overrides, *varied]) if warn else ():
        warn_once(logger, message)
    return config


def apply_overrides(data: dict[str, Any], overrides: dict[str, Any]) -> None:
    """Set one layer of dotted ``overrides`` (``--set``, a sweep point's values) in ``data``.

    Within the layer the order given does not matter: a whole table (``workload=NAME``,
    ``model=NAME``, a JSON table) is set before the fields under it, so a field always wins over
    the table it is in. A field of a default section absent from ``data`` (``model.*``, ``gpu.*``,
    ``fleet.link.*``: ``DEFAULT_PRESETS``) edits that section's default preset;
    ``model.hf_config`` replaces the default model. The values are copied: ``overrides`` is left
    as given.

    Raises:
        ValueError: as ``set_dotted``.
    """
    by_depth = sorted(overrides.items(), key=lambda item: str(item[0]).count("."))  # stable
    for dotted, value in by_depth:
        for section, preset in DEFAULT_PRESETS.items():
            if str(dotted).startswith(section + ".") and _absent(data, section):
                # a field of a default section; a Hugging Face config replaces the model
                replaced = f"{section}.hf_config" in overrides
                set_dotted(data, section, {} if replaced else {"preset": preset})
        # a copy: a field set later under this table must not edit the caller's
        set_dotted(data, dotted, copy.deepcopy(value))


def _absent(data: dict[str, Any], dotted: str) -> bool:
    """Whether ``data`` sets nothing at ``dotted`` (a value that is no table on the way is
    ``set_dotted``'s to refuse)."""
    table: Any = data
    for part in dotted.split("."):
        if not isinstance(table, dict):
            return False
        if part not in table:
            return True
        table = table[part]
    return False


def dotted_fields(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"cache": {"allocator": "paged"}}`` -> ``{"cache.allocator": "paged"}`` (``set_dotted``'s
    inverse, over every leaf)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(dotted_fields(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``data["a"]["b"] = value`` for ``dotted == "a.b"``, creating tables as needed.

    Raises:
        ValueError: an empty part (``"a..b"``, ``".a"``), or a parent that holds a value other
            than a table or a preset name (``seed.x`` when ``seed = 1``).
    """
    if not isinstance(dotted, str):
        raise ValueError(
            f"expected a dotted field name such as cache.block_size_tokens, got {dotted!r}"
        )
    *parents, leaf = dotted.split(".")
    if not all(part.strip() for part in (*parents, leaf)):
        raise ValueError(
            f"{dotted!r}: expected a dotted field name such as cache.block_size_tokens "
            "(no empty parts)"
        )
    node = data
    for i, part in enumerate(parents):
        child = node.setdefault(part, {})
        if isinstance(child, str):  # a preset name: keep it, then override one field
            child = node[part] = {"preset": child}
        if not isinstance(child, dict):
            where = ".".join(parents[: i + 1])
            raise ValueError(
                f"{dotted}: {where} is {child!r}, not a table, so it has no field "
                f"{'.'.join([*parents[i + 1 :], leaf])!r}"
            )
        node = child
    node[leaf] = value
