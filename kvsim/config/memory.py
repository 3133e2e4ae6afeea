"""Does the model fit the GPUs, and does the KV pool hold one request? Errors saying what is short.

vLLM sizes the KV cache per worker as ``gpu_memory_utilization * total - weights on the GPU -
peak activations - non-torch memory`` (``vllm/v1/worker/gpu_worker.py``,
``determine_available_memory``) and refuses to start when one ``max_model_len`` request does not fit
(``check_enough_kv_cache_memory``). kvsim folds activations and non-torch memory into
``cache.activation_headroom_bytes``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.config.hardware import ParallelConfig, kv_bytes_per_token_per_gpu, weight_bytes_per_gpu
from kvsim.units import GiB

if TYPE_CHECKING:
    from kvsim.config.sim import SimConfig

MAX_SUGGESTED_TP = 64


def _gib(num_bytes: float) -> str:
    return f"{num_bytes / GiB:,.1f} GiB"


def check_memory(config: SimConfig) -> None:
    """Raise ``ValueError`` when the weights, the KV budget or one request do not fit.

    Messages name which of weights, KV or activation headroom is short, by how much, and the
    smallest tensor-parallel size that would fit when a larger one helps.
    """
    cache, gpu = config.cache, config.gpu
    weights = config.weight_bytes_per_gpu
    where = (
        f"{config.model.name} on {gpu.name}, tensor_parallel_size "
        f"{config.parallel.tensor_parallel_size}, pipeline_parallel_size "
        f"{config.parallel.pipeline_parallel_size}"
    )
    explicit = cache.kv_cache_bytes is not None or cache.kv_cache_gib is not None
    if explicit:
        if config.kv_cache_bytes + weights > gpu.memory_bytes:
            raise ValueError(
                f"cache.kv_cache_gib: {_gib(config.kv_cache_bytes)} of KV per GPU plus "
                f"{_gib(weights)} of weights exceed the {_gib(gpu.memory_bytes)} of one "
                f"{gpu.name} ({where}); lower the KV budget or raise "
                "parallel.tensor_parallel_size"
            )
    else:
        usable = cache.gpu_memory_utilization * gpu.memory_bytes
        left = usable - weights - cache.activation_headroom_bytes
        if left < config.bytes_per_token * config.max_model_len:
            raise ValueError(_derived_budget_message(config, where, usable, left))
    if config.capacity_tokens < 2:
        field = (
            "cache.kv_cache_bytes"
            if cache.kv_cache_bytes is not None
            else "cache.kv_cache_gib"
            if explicit
            else "cache.gpu_memory_utilization"
        )
        raise ValueError(
            f"{field}: the KV budget of {config.kv_cache_bytes:,} bytes per GPU holds "
            f"{config.capacity_tokens} tokens of {config.bytes_per_token:,} bytes ({where}); "
            "raise it"
        )
    if config.capacity_tokens < config.max_model_len:
        raise ValueError(
            f"scheduler.max_model_len: one request of {config.max_model_len:,} tokens needs "
            f"{_gib(config.max_model_len * config.bytes_per_token)} of KV but the pool holds "
            f"{config.capacity_tokens:,} tokens ({_gib(config.kv_cache_bytes)}, {where}); lower "
            f"scheduler.max_model_len to at most {config.capacity_tokens:,} or raise the KV budget"
        )


def _derived_budget_message(config: SimConfig, where: str, usable: float, left: float) -> str:
    cache = config.cache
    weights = config.weight_bytes_per_gpu
    head = (
        f"{where}: {cache.gpu_memory_utilization} x {_gib(config.gpu.memory_bytes)} = "
        f"{_gib(usable)} usable per GPU; weights take {_gib(weights)} and activation headroom "
        f"{_gib(cache.activation_headroom_bytes)}, leaving {_gib(left)} for KV"
    )
    need_kv = config.bytes_per_token * config.max_model_len
    if weights > usable:
        short = f"the weights alone are short by {_gib(weights - usable)}"
    elif weights + cache.activation_headroom_bytes > usable:
        short = (
            "weights plus activation headroom are short by "
            f"{_gib(weights + cache.activation_headroom_bytes - usable)}"
        )
    else:
        fits = max(0, int(left // config.bytes_per_token))
        short = (
            f"KV is short by {_gib(need_kv - left)} for one max_model_len = "
            f"{config.max_model_len:,} request; lower scheduler.max_model_len to at most {fits:,}"
        )
    tp = smallest_fitting_tp(config)
    advice = (
        f"; parallel.tensor_parallel_size = {tp} fits"
        if tp is not None and tp > config.parallel.tensor_parallel_size
        else "; raise cache.gpu_memory_utilization, use a larger GPU, or set cache.kv_cache_gib"
    )
    return f"{head}: {short}{advice}"


def smallest_fitting_tp(config: SimConfig) -> int | None:
    """The smallest tensor-parallel size (a power of two the model splits by) whose derived KV
    budget holds one ``max_model_len`` request, or ``None``."""
    model, cache = config.model, config.cache
    tp = 1
    while tp <= MAX_SUGGESTED_TP:
        kv = model.num_kv_heads
        splits = model.num_attention_heads % tp == 0 and (kv % tp == 0 or tp % kv == 0)
        if splits:
            parallel = ParallelConfig(
                tensor_parallel_size=tp,
                pipeline_parallel_size=config.parallel.pipeline_parallel_size,
            )
            per_token = kv_bytes_per_token_per_gpu(model, parallel, cache.kv_cache_dtype)
            left = (
                cache.gpu_memory_utilization * config.gpu.memory_bytes
                - weight_bytes_per_gpu(model, parallel)
                - cache.activation_headroom_bytes
            )
            if left >= per_token * config.max_model_len:
                return tp
        tp *= 2
    return None
