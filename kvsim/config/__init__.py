"""Validated, frozen configuration: model, GPU, parallelism, KV cache, scheduler, workload, run.

``SimConfig`` is one run; ``load_config``/``config_from_dict`` build it from TOML or a dict with
dotted overrides; ``SimConfig.engine_args`` holds the serving knobs with the engine profile's
defaults resolved (``kvsim.config.serving``).
"""

from __future__ import annotations

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
    load_config,
    set_dotted,
)

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
    "apply_overrides",
    "config_from_dict",
    "format_validation_error",
    "kv_bytes_per_token_per_gpu",
    "load_config",
    "preset_table",
    "set_dotted",
]
