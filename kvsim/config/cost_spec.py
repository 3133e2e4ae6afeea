"""``CostSpec``: the step-time model's efficiency factors and overheads (``kvsim.core.cost`` cites
each)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from kvsim.base.limits import MAX_OVERHEAD_S
from kvsim.config.hardware import Frozen, resolve_preset


class CostSpec(Frozen):
    """Efficiency factors and overheads of the step-time model (``kvsim.core.cost`` states each
    source).

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
        link_efficiency: achieved share of the NVLink bandwidth by all-reduces and stage sends.
        allreduce_latency_s: fixed seconds per all-reduce (launch and synchronisation; an
            assumption of the order NCCL's small-message latency on NVLink).
    """

    name: str = "custom"
    hbm_efficiency: float = Field(default=0.8, ge=1e-3, le=1)
    flops_efficiency: float = Field(default=0.6, ge=1e-3, le=1)
    step_overhead_s: float = Field(default=0.002, ge=0, le=MAX_OVERHEAD_S)
    per_seq_overhead_s: float = Field(default=0.0, ge=0, le=MAX_OVERHEAD_S)
    paged_attention_factor: float | None = Field(
        default=None,
        ge=0.01,
        le=100,
        description="KV-read slowdown of paged over contiguous layout",
    )
    calibration: str | None = None
    swap_copy_overhead_s: float = Field(default=5e-6, ge=0, le=MAX_OVERHEAD_S)
    link_efficiency: float = Field(default=0.8, ge=1e-3, le=1)
    allreduce_latency_s: float = Field(default=10e-6, ge=0, le=MAX_OVERHEAD_S)

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, value: Any) -> Any:
        return resolve_preset("costs", value)
