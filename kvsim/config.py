"""Validated, frozen configuration: model, GPU, KV cache, scheduler, workload and the whole run.

Configs load from TOML (``tomllib``), validate with pydantic (errors name the field path, what
was expected and what was got) and serialise canonically, so a hash of one is a sweep point's key.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from kvsim.units import GiB
from kvsim.workload import WorkloadSpec, load_workload


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@cache
def preset_table(kind: str) -> dict[str, dict[str, Any]]:
    """The ``kvsim/data/{kind}.toml`` presets (``"models"`` or ``"gpus"``) by name."""
    text = resources.files("kvsim.data").joinpath(f"{kind}.toml").read_text()
    return tomllib.loads(text)


def _resolve_preset(kind: str, value: Any) -> Any:
    """Turn a preset name (``"opt-13b"``) or ``{preset = "opt-13b", ...}`` into field values."""
    if isinstance(value, str):
        value = {"preset": value}
    if isinstance(value, dict) and "preset" in value:
        presets = preset_table(kind)
        name = str(value["preset"]).lower()
        if name not in presets:
            raise ValueError(f"unknown {kind[:-1]} preset {name!r}; choose from {sorted(presets)}")
        return {"name": name, **presets[name], **{k: v for k, v in value.items() if k != "preset"}}
    return value


class ModelSpec(_Frozen):
    """A decoder-only transformer's size, as far as KV memory and step cost need it.

    ``bytes_per_token = 2 (K and V) * num_layers * num_kv_heads * head_dim * dtype_bytes``; OPT-13B
    in FP16 gives 819,200 bytes (800 KiB), as in the PagedAttention paper (Kwon et al., SOSP 2023).
    """

    name: str = "custom"
    num_layers: int = Field(ge=1)
    num_attention_heads: int = Field(ge=1)
    num_kv_heads: int = Field(ge=1)
    head_dim: int = Field(ge=1)
    num_params: int = Field(ge=1, description="parameter count (weights)")
    dtype_bytes: int = Field(default=2, ge=1, description="bytes per KV and weight element")
    max_position_embeddings: int = Field(default=2048, ge=1, description="trained context, tokens")

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, value: Any) -> Any:
        return _resolve_preset("models", value)

    @model_validator(mode="after")
    def _heads(self) -> ModelSpec:
        if self.num_attention_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_kv_heads ({self.num_kv_heads})"
            )
        return self

    @property
    def bytes_per_token(self) -> int:
        """KV bytes one token holds across all layers."""
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.dtype_bytes

    @property
    def weight_bytes(self) -> int:
        """Bytes of weights (``num_params * dtype_bytes``)."""
        return self.num_params * self.dtype_bytes


class GpuSpec(_Frozen):
    """One GPU: memory (bytes), HBM bandwidth (bytes/s), FP16 FLOP/s, PCIe bandwidth (bytes/s)."""

    name: str = "custom"
    memory_bytes: int = Field(ge=1)
    hbm_bandwidth_bytes_per_s: float = Field(gt=0)
    fp16_flops_per_s: float = Field(gt=0)
    pcie_bandwidth_bytes_per_s: float = Field(default=25.6e9, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, value: Any) -> Any:
        return _resolve_preset("gpus", value)


class CacheSpec(_Frozen):
    """The KV pool and its allocator.

    The KV budget is ``kv_cache_bytes`` or ``kv_cache_gib`` when given, else derived as vLLM does:
    ``gpu_memory_utilization * gpu.memory_bytes - weights - activation_headroom_bytes``.
    ``reservation`` applies to contiguous allocators only: ``max`` (max_model_len), ``pow2``
    (prompt + true output rounded up to a power of two), ``oracle`` (prompt + true output),
    ``prompt_max_tokens`` (prompt + the request's max_tokens), ``full_context`` (the model's
    trained context), each capped at max_model_len except full_context.
    """

    allocator: str = "paged"
    block_size_tokens: int = Field(default=16, ge=1)
    reservation: Literal["max", "pow2", "oracle", "prompt_max_tokens", "full_context"] = "max"
    kv_cache_bytes: int | None = Field(default=None, ge=1)
    kv_cache_gib: float | None = Field(default=None, gt=0)
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)
    activation_headroom_bytes: int = Field(default=2 * GiB, ge=0)
    watermark: float = Field(
        default=0.01, ge=0, lt=1, description="free-block share kept at admission (paged)"
    )
    enable_prefix_caching: bool = Field(
        default=True, description="shared_prefix: cache full blocks across requests"
    )
    beam_survival: float = Field(
        default=0.8646,
        ge=0,
        le=1,
        description="kvsim.groups.BeamModel parameter (fitted on Figure 15 beam width 4)",
    )

    @field_validator("allocator")
    @classmethod
    def _known_allocator(cls, name: str) -> str:
        from kvsim.allocators import ALLOCATORS

        if name not in ALLOCATORS:
            raise ValueError(f"unknown allocator {name!r}; choose from {sorted(ALLOCATORS)}")
        return name


class SchedulerConfig(_Frozen):
    """vLLM-like continuous batching knobs (names as in vLLM's engine arguments)."""

    max_num_seqs: int = Field(default=256, ge=1)
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    max_model_len: int = Field(default=2048, ge=2)
    preemption_mode: Literal["recompute", "swap"] = "recompute"
    swap_space_gib: float = Field(
        default=4.0, ge=0, description="CPU swap space for preempted KV, GiB (vLLM's swap_space)"
    )
    max_preemptions_per_request: int = Field(default=1000, ge=1, description="livelock guard")

    @property
    def token_budget(self) -> int:
        """Tokens one step may compute (vLLM: ``max(max_model_len, 2048)`` when unset)."""
        return self.max_num_batched_tokens or max(self.max_model_len, 2048)

    @model_validator(mode="after")
    def _budget_holds_a_prompt(self) -> SchedulerConfig:
        if self.token_budget < self.max_model_len:
            raise ValueError(
                f"max_num_batched_tokens ({self.token_budget}) must be >= max_model_len "
                f"({self.max_model_len}) without chunked prefill"
            )
        return self


class CostSpec(_Frozen):
    """Efficiency factors and overheads of the step-time model (``kvsim.cost`` states each source).

    ``CostSpec()`` is a lean modern engine; ``CostSpec.model_validate("vllm-2023")`` is the preset
    fitted to the PagedAttention paper's Figure 13 (``kvsim/data/costs.toml`` says how).

    Attributes:
        hbm_efficiency: achieved share of peak HBM bandwidth for weight and KV reads.
        flops_efficiency: achieved share of peak FP16 tensor FLOP/s for prefill and decode GEMMs.
        step_overhead_s: fixed seconds per engine step (kernel launches, scheduling, sync).
        per_seq_overhead_s: seconds per step per scheduled sequence (CPU-side batching, sampling,
            detokenisation).
        paged_attention_factor: force the paged KV-read slowdown (``None``: from the calibration).
        calibration: a calibration table path (CSV/JSON), ``"analytic"`` for the analytic default,
            or ``None`` for the table shipped for this GPU when there is one, else analytic.
        swap_copy_overhead_s: fixed seconds per host<->device copy of one block of one layer's
            K or V (vLLM's ``swap_blocks`` issues one ``cudaMemcpyAsync`` per block per layer).
    """

    name: str = "custom"
    hbm_efficiency: float = Field(default=0.8, gt=0, le=1)
    flops_efficiency: float = Field(default=0.6, gt=0, le=1)
    step_overhead_s: float = Field(default=0.002, ge=0)
    per_seq_overhead_s: float = Field(default=0.0, ge=0)
    paged_attention_factor: float | None = Field(
        default=None, gt=0, description="KV-read slowdown of paged over contiguous layout"
    )
    calibration: str | None = None
    swap_copy_overhead_s: float = Field(default=5e-6, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, value: Any) -> Any:
        return _resolve_preset("costs", value)


class SimConfig(_Frozen):
    """One simulation run: everything needed to reproduce it bit for bit."""

    model: ModelSpec = Field(default_factory=lambda: ModelSpec.model_validate("opt-13b"))
    gpu: GpuSpec = Field(default_factory=lambda: GpuSpec.model_validate("a100-40gb"))
    cache: CacheSpec = CacheSpec()
    scheduler: SchedulerConfig = SchedulerConfig()
    workload: WorkloadSpec = WorkloadSpec()
    cost: CostSpec = CostSpec()
    seed: int = Field(default=0, ge=0)
    debug_invariants: bool = False
    record_memory: bool = True
    memory_resolution: Literal["event", "step"] = Field(
        default="event",
        description="one memory row per engine event (fast-forwarded span) or per step (slower)",
    )

    @field_validator("workload", mode="before")
    @classmethod
    def _workload_preset(cls, value: Any) -> Any:
        """``workload = "azure_conv"`` or ``{preset = "azure_conv", ...}`` loads ``workloads/``."""
        if isinstance(value, str):
            value = {"preset": value}
        if isinstance(value, dict) and "preset" in value:
            rest = {k: v for k, v in value.items() if k != "preset"}
            try:
                return load_workload(value["preset"], **rest)
            except FileNotFoundError as err:
                raise ValueError(str(err)) from None
        return value

    @property
    def kv_cache_bytes(self) -> int:
        """KV budget in bytes (given, or derived from ``gpu_memory_utilization``)."""
        if self.cache.kv_cache_bytes is not None:
            return self.cache.kv_cache_bytes
        if self.cache.kv_cache_gib is not None:
            return int(self.cache.kv_cache_gib * GiB)
        return int(
            self.cache.gpu_memory_utilization * self.gpu.memory_bytes
            - self.model.weight_bytes
            - self.cache.activation_headroom_bytes
        )

    @property
    def capacity_tokens(self) -> int:
        """KV pool size in token slots: ``kv_cache_bytes // bytes_per_token``."""
        return self.kv_cache_bytes // self.model.bytes_per_token

    @model_validator(mode="after")
    def _budget_is_positive(self) -> SimConfig:
        if self.kv_cache_bytes < self.model.bytes_per_token * self.scheduler.max_model_len:
            raise ValueError(
                f"KV budget of {self.kv_cache_bytes} bytes holds fewer than max_model_len = "
                f"{self.scheduler.max_model_len} tokens of {self.model.name} "
                f"({self.model.bytes_per_token} bytes/token); raise gpu_memory_utilization or "
                "set cache.kv_cache_gib"
            )
        return self

    def canonical_json(self) -> str:
        """Canonical serialisation: sorted keys, no whitespace, JSON types."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))

    def key(self) -> str:
        """Short stable hash of the canonical config (a sweep point's key)."""
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()[:16]


def format_validation_error(err: ValidationError) -> str:
    """One line per problem: ``cache.block_size_tokens: must be >= 1 ... got 0``."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "config"
        msg = e["msg"].removeprefix("Value error, ")
        got = e.get("input")
        shown = "" if isinstance(got, dict) or repr(got) in msg else f", got {got!r}"
        lines.append(f"{loc}: {msg}{shown}")
    return "\n".join(lines)


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> SimConfig:
    """Load a ``SimConfig`` from TOML with dotted overrides (``{"cache.block_size_tokens": 32}``).

    Raises:
        ValueError: the file is not valid TOML or a field is invalid (message names the field).
        FileNotFoundError: no such file.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path}: invalid TOML: {err}") from None
    return config_from_dict(data, overrides)


def config_from_dict(data: dict[str, Any], overrides: dict[str, Any] | None = None) -> SimConfig:
    """Validate a plain dict (as from TOML) into a ``SimConfig``; see ``load_config``."""
    data = json.loads(json.dumps(data))  # deep copy, plain types
    for dotted, value in (overrides or {}).items():
        set_dotted(data, dotted, value)
    try:
        return SimConfig.model_validate(data)
    except ValidationError as err:
        raise ValueError(format_validation_error(err)) from None


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``data["a"]["b"] = value`` for ``dotted == "a.b"``, creating tables as needed."""
    *parents, leaf = dotted.split(".")
    node = data
    for part in parents:
        child = node.setdefault(part, {})
        if isinstance(child, str):  # a preset name: keep it, then override one field
            child = node[part] = {"preset": child}
        node = child
    node[leaf] = value
