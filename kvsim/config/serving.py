"""The serving engine's knobs: the KV cache, the scheduler, and the two engine profiles' defaults.

Names follow vLLM's engine arguments. Knobs left unset (``None``) take the engine profile's
default, resolved once into an ``EngineArgs`` record that the scheduler reads:

- ``max_model_len``: the model's context under both.
- ``enable_chunked_prefill``: v1 True; v0 False (the profile's only mode).
- ``max_num_batched_tokens``: v1 16,384 on a GPU of >= 160 GiB (B200, GB200), 8,192 on one of
  >= 70 GiB other than an A100, else 2,048 (without chunked prefill at least ``max_model_len``);
  v0 ``max(max_model_len, 2048)`` (vLLM 0.34.0 ``EngineArgs.get_batch_defaults``, the OpenAI
  server's column).
- ``max_num_seqs``: v1 1,024 on a GPU of >= 70 GiB other than an A100 or of >= 160 GiB, else
  256; v0 256.
- ``enable_prefix_caching``: v1 True; v0 False.
- ``scheduler_reserve_full_isl``: v1 True (a waiting request is admitted only when its whole
  sequence fits, less its prefix hits; vLLM v0.20.0 ``SchedulerConfig``, checked by
  ``KVCacheManager.can_fit_full_sequence``); v0 has no such knob (it admits whole prompts).
- ``watermark``: the share of the blocks a waiting request's admission leaves free: v1 0 (vLLM
  0.34.0 ``SchedulerConfig.watermark``, applied while some request runs); v0 0.01.
- preemption: v1 recompute (no swap); v0 recompute a single sequence, swap a group.
- null block: v1 reserves block 0 (request blocks have ids from 1); v0 none.

The v1 batch defaults are vLLM's for ``vllm serve`` (``EngineArgs._set_default_args``, usage context
``OPENAI_API_SERVER``); the v0 ones are ``vllm/engine/arg_utils.py`` of v0.6.6.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from kvsim.base.limits import MAX_CONTEXT_TOKENS, MAX_GPU_MEMORY_BYTES, MAX_NUM_REQUESTS
from kvsim.base.say_once import warn_once
from kvsim.base.units import GiB, KiB, MiB
from kvsim.config.allocators import PAGED_ALLOCATORS, POLICY_ARGUMENTS, maps_virtual_pages
from kvsim.config.hardware import Frozen, GpuSpec, KvCacheDtype, ModelSpec

MIN_MAX_MODEL_LEN = 2  # a prompt token and an output token

MAX_INT32 = 2**31 - 1

EngineName = Literal["vllm-v1", "vllm-v0"]
ENGINES: tuple[EngineName, ...] = ("vllm-v1", "vllm-v0")
V0_WATERMARK = 0.01  # vLLM v0 BlockSpaceManager(watermark=0.01)
LARGE_GPU_BYTES = 70 * GiB  # vLLM: ">= 70 GiB and not an A100" gets the larger batch defaults
LARGEST_GPU_BYTES = 160 * GiB  # vLLM: ">= 160 GiB" (B200/B300, GB200) the largest ones


logger = logging.getLogger(__name__)

_LATER_DEFAULTS: dict[str, Any] = {"page_size_bytes": 2 * MiB}
# the pages vAttention maps (Prabhu et al., ASPLOS'25: 64, 128 and 256 KiB through its modified
# NVIDIA UVM driver, 2 MiB through the CUDA virtual memory API)
VATTENTION_PAGE_SIZES = frozenset({64 * KiB, 128 * KiB, 256 * KiB, 2 * MiB})


class CacheSpec(Frozen):
    """The KV pool and its allocator.

    The KV budget per GPU is ``kv_cache_bytes``, ``kv_cache_gib`` (GiB) or ``kv_cache_gb`` (decimal
    GB, read as bytes) when given, else derived as
    vLLM does: ``gpu_memory_utilization * gpu.memory_bytes - weights on the GPU -
    activation_headroom_bytes``. ``reservation`` applies to contiguous allocators only: ``max``
    (max_model_len), ``pow2`` (prompt + true output rounded up to a power of two), ``oracle``
    (exactly the KV the request will write), ``prompt_max_tokens`` (prompt + the request's
    max_tokens), ``full_context`` (the model's trained context), each capped at max_model_len
    except full_context.

    Attributes:
        kv_cache_dtype: ``"auto"`` (the model's dtype) or an fp8 variant (1 byte per element).
        watermark: share of the blocks a waiting request's admission keeps free (``None``: 0.01
            under ``vllm-v0``, 0 under ``vllm-v1``, vLLM 0.34.0's ``--watermark``: there only
            while some request runs, and only on a block pool).
        enable_prefix_caching: automatic prefix caching on paged pools (``None``: the profile's
            default, on for ``vllm-v1`` and off for ``vllm-v0``).
        share_sequence_groups: sequences of a group (``n`` samples, beams) share their prompt
            blocks with copy-on-write (vLLM v0, the paper's §4.4); ``False`` gives every sequence
            its own blocks (the unshared baseline Figure 15 divides by).
        page_size_bytes: the physical page size of allocator ``"vattention"`` (a power of two
            from 64 KiB to 2 MiB: vAttention's driver pages and CUDA's 2 MiB granularity).
    """

    allocator: str = "paged"
    block_size_tokens: int = Field(default=16, ge=1, le=MAX_CONTEXT_TOKENS)
    reservation: Literal["max", "pow2", "oracle", "prompt_max_tokens", "full_context"] = "max"
    kv_cache_bytes: int | None = Field(default=None, ge=1, le=2**60)
    kv_cache_gib: float | None = Field(default=None, gt=0, le=2**30)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    activation_headroom_bytes: int = Field(default=2 * GiB, ge=0, le=MAX_GPU_MEMORY_BYTES)
    kv_cache_dtype: KvCacheDtype = "auto"
    watermark: float | None = Field(default=None, ge=0, lt=1)
    enable_prefix_caching: bool | None = None
    share_sequence_groups: bool = True
    page_size_bytes: int = Field(default=2 * MiB, ge=64 * KiB, le=2 * MiB)

    @field_validator("page_size_bytes")
    @classmethod
    def _power_of_two_page(cls, size: int) -> int:
        if size & (size - 1):
            raise ValueError(
                f"page_size_bytes: vAttention maps pages of a power of two bytes (64 KiB to "
                f"2 MiB), got {size:,}"
            )
        return size

    @model_serializer(mode="wrap")
    def _drop_default_knobs(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave knobs added after a config's first hash out at their defaults (the pool's
        knobs of later policies), so existing configs keep their canonical hash."""
        data: dict[str, Any] = handler(self)
        for key, default in _LATER_DEFAULTS.items():
            if data.get(key) == default:
                data.pop(key, None)
        return data

    @model_validator(mode="before")
    @classmethod
    def _decimal_gigabytes(cls, data: Any) -> Any:
        """``kv_cache_gb`` (decimal GB, 10^9 bytes: 50 GB of Llama-3.1-8B KV = 23,841 blocks of
        16 tokens) is read as ``kv_cache_bytes``; it is not stored, so a config keeps one budget
        field."""
        if not isinstance(data, dict) or "kv_cache_gb" not in data:
            return data
        data = dict(data)
        gb = data.pop("kv_cache_gb")
        others = [k for k in ("kv_cache_bytes", "kv_cache_gib") if data.get(k) is not None]
        if others:
            raise ValueError(f"set one of kv_cache_gb ({gb}) and {others[0]}, not both")
        # (the range also refuses NaN and infinity)
        if isinstance(gb, bool) or not isinstance(gb, (int, float)) or not 0 < gb <= 2**30:
            raise ValueError(f"kv_cache_gb: expected a number of GB in (0, 2^30], got {gb!r}")
        data["kv_cache_bytes"] = round(gb * 1e9)
        return data

    @model_validator(mode="after")
    def _one_budget(self) -> CacheSpec:
        if self.kv_cache_bytes is not None and self.kv_cache_gib is not None:
            raise ValueError(
                f"set one of kv_cache_gib ({self.kv_cache_gib}) and kv_cache_bytes "
                f"({self.kv_cache_bytes}), not both"
            )
        size = self.page_size_bytes
        # (another allocator's page size is ignored, and said so by the config's check)
        if maps_virtual_pages(self.allocator) and size not in VATTENTION_PAGE_SIZES:
            warn_once(
                logger,
                f"cache.page_size_bytes = {size:,}: vAttention maps 64, 128 or 256 KiB pages "
                "(its driver) or 2 MiB ones (CUDA's granularity); this size is a what-if no "
                "vAttention build offers",
            )
        return self

    @field_validator("allocator")
    @classmethod
    def _known_allocator(cls, name: str) -> str:
        if name not in POLICY_ARGUMENTS:
            raise ValueError(f"unknown allocator {name!r}; choose from {sorted(POLICY_ARGUMENTS)}")
        return name


def swap_blocks(swap_space_gib: float, block_size_tokens: int, bytes_per_token: int) -> int:
    """Blocks of ``block_size_tokens`` tokens (``bytes_per_token`` bytes each) that v0's CPU
    swap space of ``swap_space_gib`` GiB holds: ``floor(GiB bytes / (B * bytes_per_token))``
    (vLLM v0's ``CacheEngine``: ``swap_space_bytes // cache_block_size``)."""
    return int(swap_space_gib * GiB) // (block_size_tokens * bytes_per_token)


class SchedulerConfig(Frozen):
    """Continuous-batching knobs (names as vLLM's engine arguments; ``None``: profile default).

    Attributes:
        engine: ``"vllm-v1"`` (today's vLLM, the default) or ``"vllm-v0"`` (the paper's engine).
        long_prefill_token_threshold: v1 caps one request's prefill chunk at this many tokens
            per step (0: no cap).
        scheduler_reserve_full_isl: v1 admits a waiting request only when the blocks of its
            whole sequence (prompt, plus the outputs of a preempted one), less its prefix hits,
            are free, not just those of its first chunk (``None``: True, vLLM v0.20.0's
            default; ``False`` checks the first chunk only, as vLLM before PR #37307).
        preemption_mode: ``None`` is vLLM's rule (v1: recompute; v0: recompute a single
            sequence, swap a multi-sequence group); ``"swap"`` is v0 only.
        swap_space_gib: CPU swap space per GPU for v0's swapped KV, GiB (vLLM's ``swap_space``).
        max_preemptions_per_request: livelock guard (kvsim's, not vLLM's).
        batching: ``"iteration"`` (continuous batching: vLLM, Orca) or ``"request"``
            (request-level batching, the PagedAttention paper's FasterTransformer baseline,
            §6.1: a batch of the earliest waiting requests, as many as fit, is admitted only
            once the previous batch has finished); ``"request"`` runs under ``vllm-v0``.
        async_scheduling: v1 plans step ``N + 1`` while step ``N`` runs on the GPU (vLLM's
            ``--async-scheduling``, on by default since vLLM 0.14: ``EngineCore``'s batch
            queue of two), so a request that arrives while step ``N`` runs is scheduled in step
            ``N + 2`` at the earliest (at once when the engine is idle). ``None``: off (kvsim's
            default, as its results were made; ``kvsim validate`` sets it from the run).
    """

    engine: EngineName = "vllm-v1"
    max_num_seqs: int | None = Field(default=None, ge=1, le=MAX_NUM_REQUESTS)
    max_num_batched_tokens: int | None = Field(default=None, ge=1, le=MAX_INT32)
    max_model_len: int | None = Field(default=None, ge=MIN_MAX_MODEL_LEN, le=MAX_CONTEXT_TOKENS)
    enable_chunked_prefill: bool | None = None
    long_prefill_token_threshold: int = Field(default=0, ge=0, le=MAX_CONTEXT_TOKENS)
    scheduler_reserve_full_isl: bool | None = None
    preemption_mode: Literal["recompute", "swap"] | None = None
    swap_space_gib: float = Field(
        default=4.0,
        ge=0,
        le=2**30,
        description="CPU swap space for preempted KV, GiB (vLLM's swap_space)",
    )
    max_preemptions_per_request: int = Field(
        default=1000, ge=1, le=MAX_INT32, description="livelock guard"
    )
    batching: Literal["iteration", "request"] = "iteration"
    async_scheduling: bool | None = None

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave ``async_scheduling`` out when unset, so configs keep their canonical hash."""
        data: dict[str, Any] = handler(self)
        if data.get("async_scheduling") is None:
            data.pop("async_scheduling", None)
        return data


@dataclass(frozen=True, slots=True)
class EngineArgs:
    """The knobs a run uses, every default resolved (see the module docstring's table).

    Attributes:
        engine: the profile.
        max_num_seqs: sequences running at once (a group of ``w`` counts ``w``).
        max_num_batched_tokens: tokens one step computes at most.
        max_model_len: prompt + output tokens of one request at most.
        enable_chunked_prefill: v1 splits prompts over steps to fit the token budget.
        long_prefill_token_threshold: v1 chunk cap per request and step (0: none).
        scheduler_reserve_full_isl: v1 admits a waiting request only when its whole sequence
            fits (False under v0, whose whole-prompt admission needs no such gate).
        enable_prefix_caching: automatic prefix caching on paged pools.
        watermark: share of blocks a waiting request's admission keeps free.
        preemption_mode: the user's choice, ``None`` for vLLM's rule.
        swap_space_gib: CPU swap space per GPU (v0).
        reserve_null_block: block 0 is vLLM v1's null block (usable blocks = blocks - 1).
        max_preemptions_per_request: livelock guard.
        batching: ``"iteration"`` or ``"request"`` (``SchedulerConfig.batching``).
        async_scheduling: arrivals wait one more step (``SchedulerConfig.async_scheduling``).
        num_speculative_tokens: drafts verified per decode step (0: no speculative decoding;
            ``kvsim.config.speculative``).
        num_lookahead_tokens: KV slots every allocation reserves past the scheduled tokens
            (vLLM ``allocate_slots(num_lookahead_tokens=...)``).
        num_hash_lookahead_tokens: tokens past a block that its prefix-cache key covers (vLLM
            ``VllmConfig.num_hash_lookahead_tokens``: 1 for an EAGLE or MTP drafter with prefix
            caching; ``kvsim.workload.tokens.StreamKeys``).
    """

    engine: EngineName
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    enable_chunked_prefill: bool
    long_prefill_token_threshold: int
    enable_prefix_caching: bool
    watermark: float
    preemption_mode: Literal["recompute", "swap"] | None
    swap_space_gib: float
    reserve_null_block: bool
    max_preemptions_per_request: int
    batching: Literal["iteration", "request"] = "iteration"
    scheduler_reserve_full_isl: bool = False
    async_scheduling: bool = False
    num_speculative_tokens: int = 0
    num_lookahead_tokens: int = 0
    num_hash_lookahead_tokens: int = 0

    @property
    def max_in_flight_tokens(self) -> int:
        """Tokens scheduled but not yet settled, which a sliding-window group's blocks are
        sized for: a step's budget per batch in flight, two under async scheduling (vLLM
        ``VllmConfig.max_in_flight_tokens``; one pipeline stage, as hybrid groups run)."""
        return self.max_num_batched_tokens * (2 if self.async_scheduling else 1)


def resolve_engine_args(
    scheduler: SchedulerConfig, cache: CacheSpec, model: ModelSpec, gpu: GpuSpec
) -> EngineArgs:
    """Fill the profile's defaults and check the knobs against each other (vLLM's own checks).

    Raises:
        ValueError: a knob the profile does not have (swap, or a watermark of a pool without
            blocks, under v1, chunked
            prefill under v0), or knobs that contradict each other; the message names the field.
    """
    v1 = scheduler.engine == "vllm-v1"
    max_model_len = scheduler.max_model_len or model.max_position_embeddings
    chunked = v1 if scheduler.enable_chunked_prefill is None else scheduler.enable_chunked_prefill
    _check_profile_knobs(scheduler, cache, chunked)
    if v1:
        # vLLM 0.34.0 EngineArgs.get_batch_defaults (the OpenAI server's column)
        largest = gpu.memory_bytes >= LARGEST_GPU_BYTES
        large = largest or (gpu.memory_bytes >= LARGE_GPU_BYTES and "a100" not in gpu.name.lower())
        seqs = scheduler.max_num_seqs or (1024 if large else 256)
        batched = scheduler.max_num_batched_tokens or 0
        if not batched:  # vLLM's defaulting: the table, >= max_model_len unchunked, capped
            batched = 16384 if largest else 8192 if large else 2048
            batched = batched if chunked else max(max_model_len, batched)
            batched = min(seqs * max_model_len, batched)
    else:
        batched = scheduler.max_num_batched_tokens or max(max_model_len, 2048)
        seqs = scheduler.max_num_seqs or 256
    if not chunked and batched < max_model_len:
        raise ValueError(
            f"scheduler.max_num_batched_tokens ({batched}) must be >= max_model_len "
            f"({max_model_len}) without chunked prefill (a whole prompt is one step's tokens)"
        )
    if batched < seqs:
        raise ValueError(
            f"scheduler.max_num_batched_tokens ({batched}) must be >= max_num_seqs ({seqs}), "
            "as vLLM requires (every running sequence decodes one token per step)"
        )
    _check_batch_knobs(scheduler, batched, seqs, max_model_len, chunked)
    caching = v1 if cache.enable_prefix_caching is None else cache.enable_prefix_caching
    watermark = cache.watermark if cache.watermark is not None else (0.0 if v1 else V0_WATERMARK)
    return EngineArgs(
        engine=scheduler.engine,
        max_num_seqs=seqs,
        max_num_batched_tokens=batched,
        max_model_len=max_model_len,
        enable_chunked_prefill=chunked,
        long_prefill_token_threshold=scheduler.long_prefill_token_threshold,
        enable_prefix_caching=caching,
        watermark=watermark,
        preemption_mode=scheduler.preemption_mode,
        swap_space_gib=scheduler.swap_space_gib,
        reserve_null_block=v1,
        max_preemptions_per_request=scheduler.max_preemptions_per_request,
        batching=scheduler.batching,
        scheduler_reserve_full_isl=v1 and scheduler.scheduler_reserve_full_isl is not False,
        async_scheduling=bool(scheduler.async_scheduling),
    )


def _check_batch_knobs(
    scheduler: SchedulerConfig, batched: int, seqs: int, max_model_len: int, chunked: bool
) -> None:
    """vLLM 0.34.0's ``SchedulerConfig`` checks (``vllm/config/scheduler.py``): a
    ``long_prefill_token_threshold`` above ``max_model_len`` is refused; a token budget above
    ``max_num_seqs * max_model_len`` is warned, as vLLM warns. A threshold without chunked
    prefill is warned as having no effect: ``Scheduler.schedule`` applies it only with chunked
    prefill (``vllm/v1/core/sched/scheduler.py``).

    Raises:
        ValueError: the threshold is above ``max_model_len``."""
    threshold = scheduler.long_prefill_token_threshold
    if threshold > max_model_len:
        raise ValueError(
            f"scheduler.long_prefill_token_threshold ({threshold}) must be at most "
            f"max_model_len ({max_model_len}), as vLLM requires"
        )
    if threshold and not chunked:
        warn_once(
            logger,
            f"scheduler.long_prefill_token_threshold = {threshold} has no effect: vLLM caps "
            "prefill chunks at it only with chunked prefill, and "
            "scheduler.enable_chunked_prefill is false",
        )
    if scheduler.max_num_batched_tokens and batched > seqs * max_model_len:
        warn_once(
            logger,
            f"scheduler.max_num_batched_tokens ({batched:,}) exceeds max_num_seqs x "
            f"max_model_len ({seqs * max_model_len:,}), which vLLM warns may lead to unexpected "
            "behaviour: no step can fill the budget",
        )


def _check_profile_knobs(scheduler: SchedulerConfig, cache: CacheSpec, chunked: bool) -> None:
    if scheduler.engine == "vllm-v1":
        if scheduler.batching == "request":
            raise ValueError(
                "scheduler.batching: 'request' (request-level batching, the paper's "
                "FasterTransformer baseline) runs under scheduler.engine = 'vllm-v0'"
            )
        if scheduler.preemption_mode == "swap":
            raise ValueError(
                "scheduler.preemption_mode: 'swap' is a vLLM v0 feature (v1 always recomputes); "
                "set scheduler.engine = 'vllm-v0' to swap"
            )
        if cache.watermark and cache.allocator not in PAGED_ALLOCATORS:
            raise ValueError(
                f"cache.watermark: vLLM v1's watermark ({cache.watermark}) is a share of a block "
                f"pool's blocks; allocator {cache.allocator!r} has none (use 'paged', or drop "
                "the watermark)"
            )
        return
    if chunked:
        raise ValueError(
            "scheduler.enable_chunked_prefill: the vllm-v0 profile follows v0's _schedule_default "
            "(whole prompts, no chunked prefill); use scheduler.engine = 'vllm-v1' to chunk"
        )
    if scheduler.long_prefill_token_threshold:
        raise ValueError(
            "scheduler.long_prefill_token_threshold: a vLLM v1 knob (chunked prefill); "
            "the vllm-v0 profile has no chunks"
        )
    if scheduler.scheduler_reserve_full_isl is not None:
        raise ValueError(
            "scheduler.scheduler_reserve_full_isl: a vLLM v1 knob (the admission gate of "
            "chunked prefill); the vllm-v0 profile admits whole prompts"
        )
    if scheduler.async_scheduling:
        raise ValueError(
            "scheduler.async_scheduling: a vLLM v1 knob (the engine core's batch queue); the "
            "vllm-v0 profile schedules each step after the last one's outputs"
        )
