"""``OffloadConfig``: KV offloading to CPU memory as vLLM's ``--kv-offloading-size`` sets it.

vLLM (``vllm/config/cache.py``, ``CacheConfig.kv_offloading_size`` / ``kv_offloading_backend``)
takes the CPU buffer in GiB, summed over the tensor-parallel ranks; the ``"native"`` backend
installs the ``OffloadingConnector``
(``vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py``) with
``cpu_bytes_to_use = kv_offloading_size * 2**30`` (``vllm/config/vllm.py``), and the CPU spec
(``vllm/v1/kv_offload/cpu.py``) splits it into blocks of the GPU's block size, one share per
worker. The connector keys the CPU blocks by the GPU prefix cache's block hashes, so it runs
only under vLLM v1 with a paged pool and prefix caching (``check_offload``).

The link's bandwidth is the GPU preset's host link (PCIe, or NVLink-C2C on a superchip:
``GpuSpec.host_link_bandwidth_bytes_per_s``) unless ``link_bandwidth_bytes_per_s`` is given.

A disk tier below the CPU tier (``disk_offloading_size``) follows vLLM 0.34.0's tiered offloading
(``vllm/v1/kv_offload/tiering/spec.py``, ``TieringOffloadingSpec``, with a file-system secondary
tier, ``tiering/fs/manager.py``): the CPU tier stays the only one the GPU reads and writes, every
block stored in it is written on to the disk, and a disk hit is promoted into the CPU tier before
it loads (``kvsim.core.kv.disk_tier``).
"""

from __future__ import annotations

import logging
from typing import Any, Final, Literal, Protocol

from pydantic import (
    Field,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from kvsim.base.limits import MAX_HW_PER_S
from kvsim.base.say_once import warn_once
from kvsim.base.units import GiB, cdiv
from kvsim.config.allocators import keys_blocks_by_hash
from kvsim.config.hardware import Frozen, GpuSpec, ModelSpec, ParallelConfig
from kvsim.config.layers import KVCacheGroups
from kvsim.config.serving import CacheSpec, EngineArgs

MAX_OFFLOAD_GIB = 1 << 20  # 1 PiB of host memory: a typo guard, not a limit of vLLM's
PAGE_BYTES: Final = 4096  # a tier block's alignment (vLLM: mmap.PAGESIZE on x86-64 Linux)


logger = logging.getLogger(__name__)

# under a twelfth of PCIe 3.0 x16's ~12 GB/s a direction: slower than any GPU-CPU link
SLOWEST_PLAUSIBLE_LINK_BYTES_PER_S: Final = 1e9
# one PCIe 4.0 x4 NVMe drive: 8 GB/s nominal, 80 % of it (the convention of gpus.toml's PCIe
# figures); an interface bound, not a drive's datasheet: flash often writes slower than it reads
NVME_GEN4_X4_BYTES_PER_S: Final = 6.4e9
# under a hard disk's ~0.2 GB/s sequential rate: slower than any drive a KV tier would sit on
SLOWEST_PLAUSIBLE_DISK_BYTES_PER_S: Final = 1e8


class OffloadConfig(Frozen):
    """CPU offloading of KV blocks (vLLM's native ``OffloadingConnector``; off while
    ``kv_offloading_size`` is unset).

    Attributes:
        kv_offloading_size: the CPU buffer, GiB (2**30 bytes), summed over the
            ``world_size`` GPUs of the replica (vLLM: over the TP ranks); each GPU's share
            holds whole blocks of its KV. ``None`` (vLLM's default) or 0: no offloading (0
            lets a sweep put "off" beside its sizes).
        kv_offloading_backend: ``"native"`` (vLLM's own CPU tier). ``"lmcache"`` is vLLM's
            other choice; kvsim does not model LMCache's chunked store and refuses it.
        link_bandwidth_bytes_per_s: one direction of the GPU-CPU link, bytes/s; ``None``
            reads the GPU preset (PCIe 4: 25.6e9, PCIe 5: 51.2e9, 80 % of nominal;
            NVLink-C2C on GH200/GB200: 450e9; ``kvsim/data/gpus.toml``).
        disk_offloading_size: a disk tier below the CPU tier, GiB, summed over the GPUs as
            ``kv_offloading_size`` is (vLLM 0.34.0's tiered offloading with a file-system tier
            writes one directory per rank). ``None`` or 0: no disk tier. vLLM's file-system
            tier never deletes a file; a size bounds it with least-recently-used eviction (as
            LMCache's local disk does): give a size above what the run writes to model vLLM's.
        disk_read_bandwidth_bytes_per_s, disk_write_bandwidth_bytes_per_s: one GPU's share of
            the disk, bytes/s each way; default 6.4e9, one PCIe 4.0 x4 NVMe drive at 80 % of
            its nominal 8 GB/s (an interface bound: take your drive's datasheet figures).
        offload_prompt_only: store only the blocks of a request's prompt, none its decode
            fills (vLLM 0.34.0's default: ``kv_connector_extra_config`` key
            ``offload_prompt_only``, ``vllm/v1/kv_offload/base.py``, applied in
            ``OffloadingConnectorScheduler._calc_num_offloadable_tokens``); ``False`` stores
            every full block of computed tokens. A later turn's prompt holds the earlier turn's
            output, so its blocks are stored when that turn prefills.
    """

    kv_offloading_size: float | None = Field(default=None, ge=0, le=MAX_OFFLOAD_GIB)
    kv_offloading_backend: Literal["native", "lmcache"] = "native"
    link_bandwidth_bytes_per_s: float | None = Field(default=None, ge=1, le=MAX_HW_PER_S)
    disk_offloading_size: float | None = Field(default=None, ge=0, le=MAX_OFFLOAD_GIB)
    disk_read_bandwidth_bytes_per_s: float = Field(
        default=NVME_GEN4_X4_BYTES_PER_S, ge=1, le=MAX_HW_PER_S
    )
    disk_write_bandwidth_bytes_per_s: float = Field(
        default=NVME_GEN4_X4_BYTES_PER_S, ge=1, le=MAX_HW_PER_S
    )
    offload_prompt_only: bool = True

    @model_serializer(mode="wrap")
    def _drop_disk_defaults(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        """Leave out the disk fields left at their defaults, so configs without a disk tier
        keep their canonical hash; and in the canonical form (``SimConfig.canonical_json``)
        the disk's bandwidths without a disk: they change nothing, so a sweep's "off" point
        is one run whatever drive the other points name. (Other dumps keep them: a dump is
        read back as the same config.)"""
        data: dict[str, Any] = handler(self)
        canonical = bool(info.context and info.context.get("canonical"))
        if canonical and not self.enabled:  # (changes nothing without a tier)
            data.pop("offload_prompt_only", None)
        for name in DISK_FIELDS:
            if getattr(self, name) == OffloadConfig.model_fields[name].default or (
                canonical and name != "disk_offloading_size" and not self.disk_enabled
            ):
                data.pop(name, None)
        return data

    @model_validator(mode="after")
    def _link_and_backend(self) -> OffloadConfig:
        link = self.link_bandwidth_bytes_per_s
        if link is not None and link < SLOWEST_PLAUSIBLE_LINK_BYTES_PER_S:
            warn_once(
                logger,
                f"offload.link_bandwidth_bytes_per_s: {link:,.0f} bytes/s is slower than any "
                "GPU-CPU link (PCIe 3.0 x16 moves about 12e9 bytes/s a direction); copies "
                "queue past the run's end, and the tier's counters count what was submitted",
            )
        slow = min(self.disk_read_bandwidth_bytes_per_s, self.disk_write_bandwidth_bytes_per_s)
        if self.disk_enabled and slow < SLOWEST_PLAUSIBLE_DISK_BYTES_PER_S:
            warn_once(
                logger,
                f"offload.disk_read_bandwidth_bytes_per_s / disk_write_bandwidth_bytes_per_s: "
                f"{slow:,.0f} bytes/s is slower than any drive (a hard disk reads about 2e8 "
                "bytes/s); copies queue past the run's end, and the disk's counters count what "
                "was submitted",
            )
        size, disk = self.kv_offloading_size, self.disk_offloading_size
        if size and disk and disk <= size:
            warn_once(
                logger,
                f"offload.disk_offloading_size: {disk:g} GiB of disk below {size:g} GiB of CPU "
                "tier holds no more blocks than the CPU tier: it can serve only what the CPU "
                "tier's eviction order dropped and its own kept",
            )
        if self.kv_offloading_backend == "lmcache":
            raise ValueError(
                "kv_offloading_backend: kvsim models vLLM's native CPU offloading only, got "
                "'lmcache' (LMCache's chunked store and its own eviction are not modelled); "
                "use 'native'"
            )
        return self

    @property
    def enabled(self) -> bool:
        """Offloading is on (``kv_offloading_size`` set and above 0)."""
        return bool(self.kv_offloading_size)

    @property
    def disk_enabled(self) -> bool:
        """A disk tier is on (``disk_offloading_size`` set and above 0)."""
        return bool(self.disk_offloading_size)


DISK_FIELDS: Final = (
    "disk_offloading_size",
    "disk_read_bandwidth_bytes_per_s",
    "disk_write_bandwidth_bytes_per_s",
)


class OffloadParts(Protocol):
    """What this module reads of a ``SimConfig``."""

    @property
    def offload(self) -> OffloadConfig: ...
    @property
    def gpu(self) -> GpuSpec: ...
    @property
    def parallel(self) -> ParallelConfig: ...
    @property
    def cache(self) -> CacheSpec: ...
    @property
    def engine_args(self) -> EngineArgs: ...
    @property
    def bytes_per_token(self) -> int: ...
    @property
    def model(self) -> ModelSpec: ...
    @property
    def kv_groups(self) -> KVCacheGroups | None: ...


def cpu_tier_blocks(config: OffloadParts) -> int:
    """Blocks the CPU buffer holds for each GPU, as vLLM 0.34.0's ``CPUOffloadingSpec`` counts
    them (``vllm/v1/kv_offload/cpu/spec.py``): ``kv_offloading_size * 2**30`` bytes over a
    block of every worker's copy, ``world_size`` copies of one GPU's block (``block_size_tokens
    * bytes_per_token``) rounded up to a whole 4 KiB page (``mmap.PAGESIZE``, the shared
    region's alignment). An MLA model under tensor parallelism alone keeps one copy, its latent
    being the same on every rank (``replicated_layout``,
    ``vllm/distributed/kv_transfer/kv_connector/v1/offloading/config.py``)."""
    return _tier_blocks(config, config.offload.kv_offloading_size)


def disk_tier_blocks(config: OffloadParts) -> int:
    """Blocks one GPU's share of the disk tier holds, as ``cpu_tier_blocks`` counts them (0
    without a disk tier)."""
    return _tier_blocks(config, config.offload.disk_offloading_size)


def _tier_blocks(config: OffloadParts, size_gib: float | None) -> int:
    """Whole blocks of the GPU's block size that ``size_gib`` GiB holds for each GPU
    (``cpu_tier_blocks``; 0 for ``None`` or 0)."""
    if not size_gib:
        return 0
    return int(size_gib * GiB) // tier_block_bytes(config)


def tier_block_bytes(config: OffloadParts) -> int:
    """Bytes one tier block takes in the buffer: every worker's copy of one GPU's block
    (``block_size_tokens * bytes_per_token``; one copy for an MLA model under tensor
    parallelism alone) rounded up to a whole 4 KiB page (vLLM 0.34.0 ``CPUOffloadingSpec``'s
    aligned ``kv_bytes_per_chunk`` of one block)."""
    parallel = config.parallel
    block_bytes = config.cache.block_size_tokens * config.bytes_per_token
    replicated = (
        config.model.is_mla
        and parallel.tensor_parallel_size > 1
        and parallel.world_size == parallel.tensor_parallel_size
    )
    copies = 1 if replicated else parallel.world_size
    return cdiv(block_bytes * copies, PAGE_BYTES) * PAGE_BYTES


def link_bandwidth_bytes_per_s(config: OffloadParts) -> float:
    """One direction of the GPU-CPU link the tier's transfers cross, bytes/s."""
    given = config.offload.link_bandwidth_bytes_per_s
    return given if given is not None else config.gpu.host_link_bandwidth_bytes_per_s


def check_offload(config: OffloadParts) -> None:
    """Offloading runs where vLLM's OffloadingConnector runs: the v1 scheduler (a KV connector
    is a v1 feature), a block pool whose full blocks carry prefix-cache hashes (the CPU tier's
    keys), prefix caching on; and the buffer holds one block at least. A CPU tier smaller than
    one step's chunk (``max_num_batched_tokens`` in blocks) is warned about: a store that needs
    more room than it can free is skipped and offered again whole, so it may stay empty.

    Raises:
        ValueError: naming the field that rules it out.
    """
    if config.offload.disk_enabled and not config.offload.enabled:
        raise ValueError(
            f"offload.disk_offloading_size: {config.offload.disk_offloading_size} GiB of disk "
            "needs a CPU tier above it (vLLM's tiered offloading promotes every disk hit into "
            "CPU memory before the GPU loads it); set offload.kv_offloading_size"
        )
    if not config.offload.enabled:
        return
    args = config.engine_args
    if args.engine != "vllm-v1":
        raise ValueError(
            f"offload.kv_offloading_size: KV offloading moves blocks through vLLM v1's KV "
            f"connector; the run uses {args.engine!r} (set scheduler.engine = 'vllm-v1'; vLLM "
            "v0's swap is scheduler.preemption_mode = 'swap')"
        )
    if not keys_blocks_by_hash(config.cache.allocator):
        raise ValueError(
            f"offload.kv_offloading_size: the CPU tier keys blocks by their prefix-cache hash; "
            f"allocator {config.cache.allocator!r} has no hashed blocks (use 'paged')"
        )
    if not args.enable_prefix_caching:
        raise ValueError(
            "offload.kv_offloading_size: the CPU tier keys blocks by their prefix-cache hash; "
            "set cache.enable_prefix_caching = true"
        )
    if config.kv_groups is not None:  # (kvsim.config.layers)
        attention = config.model.attention
        way = (
            "its state layers cannot run as full attention, so it cannot be offloaded"
            if attention is not None and attention.num_state_layers
            else "set model.attention.hybrid_kv_cache = false to offload it as full attention"
        )
        raise ValueError(
            "offload.kv_offloading_size: offloading is modelled over one full-attention block "
            f"table; {config.model.name} runs vLLM's hybrid KV cache groups ({way})"
        )
    for name in ("kv_offloading_size", "disk_offloading_size"):
        size = getattr(config.offload, name)
        if size and _tier_blocks(config, size) < 1:
            raise ValueError(
                f"offload.{name}: {size} GiB for {config.parallel.world_size} GPU(s) holds no "
                f"block of {config.cache.block_size_tokens * config.bytes_per_token:,} bytes "
                "each; raise it"
            )
    chunk = cdiv(args.max_num_batched_tokens, config.cache.block_size_tokens)
    if cpu_tier_blocks(config) < chunk:
        block_bytes = config.cache.block_size_tokens * config.bytes_per_token
        least_gib = chunk * block_bytes * config.parallel.world_size / GiB
        on_each = (
            f" on each of {config.parallel.world_size} GPUs"
            if config.parallel.world_size > 1
            else ""
        )
        # (the text names no tier size: a sweep or plan over sizes says it once)
        warn_once(
            logger,
            f"offload.kv_offloading_size: a CPU tier under {least_gib:,.4g} GiB holds fewer "
            f"blocks than one step's chunk of max_num_batched_tokens ({chunk:,} blocks of "
            f"{config.cache.block_size_tokens} tokens, {block_bytes:,} bytes each{on_each}): a "
            "request's store that needs more room than the tier can free is skipped and offered "
            "again whole (vLLM's prepare_store), so long prompts may never be stored",
        )
