"""Validated, frozen configuration: model, GPU, parallelism, KV cache, scheduler, workload, run.

``SimConfig`` is one run; ``load_config``/``config_from_dict`` build it from TOML or a dict with
dotted overrides; ``SimConfig.engine_args`` holds the serving knobs with the engine profile's
defaults resolved (``kvsim.config.serving``). The names below load on first use (PEP 562), so
importing one submodule (``allocators``) does not import pydantic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "CostSpec": "kvsim.config.cost_spec",
    "GpuSpec": "kvsim.config.hardware",
    "KvCacheDtype": "kvsim.config.hardware",
    "ModelSpec": "kvsim.config.hardware",
    "ParallelConfig": "kvsim.config.hardware",
    "kv_bytes_per_token_per_gpu": "kvsim.config.hardware",
    "preset_table": "kvsim.config.hardware",
    "ENGINES": "kvsim.config.serving",
    "CacheSpec": "kvsim.config.serving",
    "EngineArgs": "kvsim.config.serving",
    "EngineName": "kvsim.config.serving",
    "SchedulerConfig": "kvsim.config.serving",
    "SpeculativeConfig": "kvsim.config.speculative",
    "SimConfig": "kvsim.config.sim",
    "apply_overrides": "kvsim.config.sim",
    "config_from_dict": "kvsim.config.sim",
    "format_validation_error": "kvsim.config.sim",
    "load_config": "kvsim.config.config_file",
    "set_dotted": "kvsim.config.sim",
}

if TYPE_CHECKING:
    from kvsim.config.config_file import load_config
    from kvsim.config.cost_spec import CostSpec
    from kvsim.config.hardware import (
        GpuSpec,
        KvCacheDtype,
        ModelSpec,
        ParallelConfig,
        kv_bytes_per_token_per_gpu,
        preset_table,
    )
    from kvsim.config.serving import ENGINES, CacheSpec, EngineArgs, EngineName, SchedulerConfig
    from kvsim.config.sim import (
        SimConfig,
        apply_overrides,
        config_from_dict,
        format_validation_error,
        set_dotted,
    )
    from kvsim.config.speculative import SpeculativeConfig


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvsim.config' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ENGINES",
    "CacheSpec",
    "CostSpec",
    "EngineArgs",
    "EngineName",
    "GpuSpec",
    "KvCacheDtype",
    "ModelSpec",
    "ParallelConfig",
    "SchedulerConfig",
    "SimConfig",
    "SpeculativeConfig",
    "apply_overrides",
    "config_from_dict",
    "format_validation_error",
    "kv_bytes_per_token_per_gpu",
    "load_config",
    "preset_table",
    "set_dotted",
]
