"""The run's parts built from its config: the KV pool, the profile's scheduler (with v0's swap
space), the step-cost model and the CPU offloading connector."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvsim.config import SimConfig
from kvsim.config.offload import cpu_tier_blocks, disk_tier_blocks, link_bandwidth_bytes_per_s
from kvsim.core.cost import StepCostModel
from kvsim.core.kv import Allocator, allocator_from_knobs
from kvsim.core.kv.disk_tier import DiskTier
from kvsim.core.kv.hybrid import HybridPagedAllocator
from kvsim.core.kv.offload import CpuTier
from kvsim.core.kv.paged import PagedAllocator
from kvsim.core.kv.swap import SwapSpace
from kvsim.core.scheduler import SchedulerCore, SpecDecoder, make_scheduler
from kvsim.core.scheduler.offload import OffloadConnector
from kvsim.workload.request import Request


def allocator_from_config(config: SimConfig) -> Allocator:
    """Build the configured allocator on the config's KV pool (one GPU's share); a hybrid
    model's groups (``SimConfig.kv_groups``) get vLLM v1's hybrid manager."""
    args = config.engine_args
    if config.kv_groups is not None:
        return HybridPagedAllocator(
            capacity_tokens=config.capacity_tokens,
            bytes_per_token=config.bytes_per_token,
            kv_groups=config.kv_groups,
            enable_prefix_caching=args.enable_prefix_caching,
            max_in_flight_tokens=args.max_in_flight_tokens,
            max_model_len=args.max_model_len,
        )
    knobs = {
        "capacity_tokens": config.capacity_tokens,
        "bytes_per_token": config.bytes_per_token,
        "kv_cache_bytes": config.kv_cache_bytes,
        "block_size_tokens": config.cache.block_size_tokens,
        "watermark": args.watermark,
        "reservation": config.cache.reservation,
        "enable_prefix_caching": args.enable_prefix_caching,
        "share_sequence_groups": config.cache.share_sequence_groups,
        "reserve_null_block": args.reserve_null_block,
        "max_model_len": args.max_model_len,
        "full_context_tokens": config.model.max_position_embeddings,
        "page_size_bytes": config.cache.page_size_bytes,
        "num_kv_tensors": config.num_kv_tensors,
    }
    return allocator_from_knobs(config.cache.allocator, **knobs)  # each reads its own


def spec_decoder_from_config(config: SimConfig) -> SpecDecoder | None:
    """Speculative decoding's acceptance draws (seeded by the config), or ``None`` when the run
    does not speculate."""
    spec = config.speculative
    if not spec.enabled:
        return None
    return SpecDecoder(
        spec.num_speculative_tokens, spec.num_lookahead_tokens, spec.position_rates, config.seed
    )


def offload_from_config(config: SimConfig, allocator: Allocator) -> OffloadConnector | None:
    """vLLM v1's CPU offloading connector over the paged pool, with a disk tier below the CPU
    tier when one is set (``None`` when offloading is off;
    ``kvsim.config.offload.check_offload`` allowed the rest)."""
    offload = config.offload
    if not offload.enabled:
        return None
    assert isinstance(allocator, PagedAllocator), "check_offload admits paged pools only"
    disk = DiskTier(num_blocks=disk_tier_blocks(config)) if offload.disk_enabled else None
    return OffloadConnector(
        allocator,
        CpuTier(num_blocks=cpu_tier_blocks(config)),
        block_bytes=allocator.block_size_tokens * config.bytes_per_token,
        bandwidth_bytes_per_s=link_bandwidth_bytes_per_s(config),
        disk=disk,
        disk_read_bytes_per_s=offload.disk_read_bandwidth_bytes_per_s,
        disk_write_bytes_per_s=offload.disk_write_bandwidth_bytes_per_s,
        prompt_only=offload.offload_prompt_only,
    )


def cost_model_from_config(
    config: SimConfig, paged: bool, block_size_tokens: int | None = None
) -> StepCostModel:
    """The step-cost model of the run's model, GPUs, parallelism and KV layout (``paged``:
    attention reads through a block table of ``block_size_tokens``-token blocks, by default
    the config's)."""
    return StepCostModel(
        config.model,
        config.gpu,
        config.cost,
        paged=paged,
        block_size_tokens=block_size_tokens or config.cache.block_size_tokens,
        parallel=config.parallel,
        kv_cache_dtype=config.cache.kv_cache_dtype,
        draft_passes=config.speculative.num_speculative_tokens,
        draft_num_params=config.draft_params,
    )


@dataclass(frozen=True, slots=True)
class RunParts:
    """A run's KV pool, swap space (v0, paged) or ``None``, scheduler, step-cost model and CPU
    offloading connector (or ``None``)."""

    allocator: Allocator
    swap: SwapSpace | None
    scheduler: SchedulerCore
    cost: StepCostModel
    offload: OffloadConnector | None = None


def build_parts(config: SimConfig, requests: Sequence[Request], *, pooled: bool) -> RunParts:
    """The parts of a run of ``requests`` (the pool may note what they share).

    Args:
        pooled: steady decoders may take anonymous blocks in bulk (off when the run reads
            block ids: memory-map frames).
    """
    allocator = allocator_from_config(config)
    allocator.see_workload(requests)
    spec = spec_decoder_from_config(config)
    scheduler = make_scheduler(allocator, config.engine_args, pooled=pooled, spec=spec)
    cost = cost_model_from_config(config, allocator.reads_block_table, allocator.block_size_tokens)
    offload = scheduler.offload = offload_from_config(config, allocator)
    return RunParts(allocator, scheduler.swap, scheduler, cost, offload)
