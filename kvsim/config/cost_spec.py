"""``CostSpec``: the step-time model's efficiency factors and overheads (``kvsim.core.cost`` cites
each), and their resolution against the fitted table for a GPU.

A field left ``None`` takes the value of the table fitted on measured vLLM runs
(``kvsim/data/cost_fit.toml``, written by ``kvsim calibrate --from-runs``): the GPU's own section
when the table has one, else the table's values for the GPU it was fitted on (a transfer, and
the resolved cost says so). Presets (``kvsim/data/costs.toml``) pin every value instead:
``vllm-2023`` (the PagedAttention paper's engine, used by the paper reproductions) and ``lean``
(kvsim's guesses before the fit).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

from pydantic import Field, model_validator

from kvsim.base.limits import MAX_OVERHEAD_S
from kvsim.config.hardware import Frozen, GpuSpec, resolve_preset

Roofline = Literal["step", "operator"]
FITTED_FIELDS = (
    "hbm_efficiency",
    "flops_efficiency",
    "step_overhead_s",
    "per_seq_overhead_s",
    "link_efficiency",
    "allreduce_latency_s",
    "allreduce_latency_per_peer_s",
)
COST_FIT_FILE = "cost_fit.toml"


class CostSpec(Frozen):
    """Efficiency factors and overheads of the step-time model (``kvsim.core.cost`` states each
    source).

    ``CostSpec()`` is the model fitted on measured vLLM runs (every ``None`` below resolves
    through ``resolve_cost``); ``CostSpec.model_validate("vllm-2023")`` is the preset fitted to
    the PagedAttention paper's Figure 13 (``kvsim/data/costs.toml`` says how).

    Attributes:
        roofline: ``"operator"``: each operator (linear layers, LM head, attention) takes the
            longer of its reads and its FLOPs, and the step the sum; ``"step"``: the step takes
            the longer of all its reads and all its FLOPs, every parameter charged to every
            token (the 2023 model, kept by the ``vllm-2023`` and ``lean`` presets).
        hbm_efficiency: achieved share of peak HBM bandwidth for weight and KV reads.
        flops_efficiency: achieved share of peak FP16 tensor FLOP/s for prefill and decode GEMMs.
        step_overhead_s: fixed seconds per engine step (kernel launches, scheduling, sync).
        layer_overhead_s: fixed GPU seconds per model layer per step (the small kernels between
            the GEMMs: norms, activation, rotary, KV write, the attention launch), charged for
            every layer (``num_layers``; tensor-parallel ranks run theirs at once). 0 by default:
            the fit on vLLM runs holds such time in ``step_overhead_s``;
            ``kvsim calibrate --fit-parts`` fits it on steps timed on a GPU.
        per_seq_overhead_s: seconds per step per scheduled sequence (CPU-side batching, sampling,
            detokenisation).
        paged_attention_factor: force the paged KV-read slowdown (``None``: the fitted table's,
            1, when the fitted table is used and no ``calibration`` is given; else from the
            calibration table).
        calibration: a calibration table path (CSV/JSON), ``"analytic"`` for the analytic default,
            or ``None`` for the table shipped for this GPU when there is one (the H200's), else
            analytic; used where no factor comes from the fitted table (the presets, or a
            ``calibration`` given).
        swap_copy_overhead_s: fixed seconds per host<->device copy of one block of one layer's
            K or V (vLLM's ``swap_blocks`` issues one ``cudaMemcpyAsync`` per block per layer);
            5 us, assumed, and measured at 5.0-5.2 us a 32 KiB pinned copy on an H200
            (``docs/calibration.md``).
        link_efficiency: achieved share of the link bandwidth by all-reduces and stage sends.
        allreduce_latency_s: fixed seconds per all-reduce (launch and synchronisation).
        allreduce_latency_per_peer_s: seconds per all-reduce per other GPU of the group
            (``tp - 1`` of them): a ring all-reduce takes ``2 (tp - 1)`` steps, each a hop's
            latency (nccl-tests ``doc/PERFORMANCE.md``).
    """

    name: str = "custom"
    roofline: Roofline = "operator"
    hbm_efficiency: float | None = Field(default=None, ge=1e-3, le=1)
    flops_efficiency: float | None = Field(default=None, ge=1e-3, le=1)
    step_overhead_s: float | None = Field(default=None, ge=0, le=MAX_OVERHEAD_S)
    layer_overhead_s: float = Field(default=0.0, ge=0, le=MAX_OVERHEAD_S)
    per_seq_overhead_s: float | None = Field(default=None, ge=0, le=MAX_OVERHEAD_S)
    paged_attention_factor: float | None = Field(
        default=None,
        ge=0.01,
        le=100,
        description="KV-read slowdown of paged over contiguous layout",
    )
    calibration: str | None = None
    swap_copy_overhead_s: float = Field(default=5e-6, ge=0, le=MAX_OVERHEAD_S)
    link_efficiency: float | None = Field(default=None, ge=1e-3, le=1)
    allreduce_latency_s: float | None = Field(default=None, ge=0, le=MAX_OVERHEAD_S)
    allreduce_latency_per_peer_s: float | None = Field(default=None, ge=0, le=MAX_OVERHEAD_S)

    @model_validator(mode="before")
    @classmethod
    def _preset(cls, value: Any) -> Any:
        return resolve_preset("costs", value)


@dataclass(frozen=True, slots=True)
class ResolvedCost:
    """Every factor of ``CostSpec`` as a number, and where the unset ones came from.

    Attributes:
        source: ``"CostSpec"`` when every factor was given, else the fitted table's provenance
            and whether its values were fitted on this GPU or transferred from another.
        paged_attention_factor: the fitted table's paged KV-read factor when the table was used
            and ``CostSpec`` names neither a factor nor a calibration (``None``: the
            calibration's).
        fitted_block_size_tokens: the block size of the runs that factor was fitted on (the
            fitted table's ``provenance.block_size_tokens``; ``None`` with no such factor).
    """

    roofline: Roofline
    hbm_efficiency: float
    flops_efficiency: float
    step_overhead_s: float
    per_seq_overhead_s: float
    link_efficiency: float
    allreduce_latency_s: float
    allreduce_latency_per_peer_s: float
    source: str
    paged_attention_factor: float | None = None
    layer_overhead_s: float = 0.0
    fitted_block_size_tokens: int | None = None


@cache
def cost_fit_table() -> dict[str, Any]:
    """The fitted table shipped with kvsim (``kvsim/data/cost_fit.toml``), parsed."""
    text = resources.files("kvsim.data").joinpath(COST_FIT_FILE).read_text()
    return tomllib.loads(text)


def fitted_values(gpu_name: str, table: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
    """The fitted table's values for ``gpu_name`` and a line saying where they come from.

    The table's ``[cost]`` holds the values shared by every GPU, ``[gpus.NAME]`` a GPU's own
    efficiencies; a GPU without a section takes those of ``fitted_on`` (the GPU of the runs).
    """
    table = cost_fit_table() if table is None else table
    meta = table["provenance"]
    gpus: dict[str, dict[str, Any]] = table.get("gpus", {})
    fitted_on = str(meta["fitted_on"])
    own = gpu_name in gpus
    values = {**table["cost"], **gpus[gpu_name if own else fitted_on]}
    how = "fitted on this GPU" if own else f"efficiencies transferred from {fitted_on}"
    source = (
        f"{COST_FIT_FILE}: FITTED by `{meta['command']}` on {meta['split']} runs "
        f"(vLLM {meta['vllm_version']}, {meta['date']}); {how}"
    )
    return values, source


def resolve_cost(cost: CostSpec, gpu: GpuSpec) -> ResolvedCost:
    """``cost`` with each ``None`` factor taken from the fitted table for ``gpu``
    (``layer_overhead_s``: 0 unless given)."""
    given = {name: getattr(cost, name) for name in FITTED_FIELDS}
    source = "CostSpec"
    factor = None
    fitted_at = None
    if any(value is None for value in given.values()):
        values, source = fitted_values(gpu.name)
        named = [name for name, value in given.items() if value is not None]
        if named:  # the fitted table's provenance holds for the rest only
            source = f"{source}; given: {', '.join(named)}"
        for name, value in given.items():
            if value is None:
                given[name] = float(values[name])
        if cost.paged_attention_factor is None and cost.calibration is None:
            found = values.get("paged_attention_factor")
            if found is not None:
                factor = float(found)
                fitted_at = int(cost_fit_table()["provenance"]["block_size_tokens"])
    return ResolvedCost(
        roofline=cost.roofline,
        source=source,
        paged_attention_factor=factor,
        fitted_block_size_tokens=fitted_at,
        layer_overhead_s=cost.layer_overhead_s,
        **given,
    )
