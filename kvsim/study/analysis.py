"""The ``[analysis]`` table of an experiment: what its figures and paper checks read.

``kvsim plot`` draws ``vs_metrics`` with ``targets`` as bound lines; the paper reproductions read
their brackets and fit settings; notebooks read ``budget`` and the others. Each key is checked
when the experiment loads (``Analysis``), so that a typo or a wrong type is refused with the key
and value named, before any point runs, not found by a crash of ``kvsim plot`` afterwards.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kvsim.config.sim import format_validation_error
from kvsim.study.targets import target_metrics

Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Bracket = Annotated[list[Positive], Field(min_length=2, max_length=2)]  # [lo, hi], lo < hi

# numeric summary columns beyond the ones a target may bound (``planning.target_metrics``)
_MORE_METRICS = (
    "token_states_pct_of_used",
    "reservation_pct_of_used",
    "internal_fragmentation_pct_of_used",
    "external_fragmentation_pct_of_used",
    "num_requests_running_step_mean",
    "num_requests",
    "num_steps",
    "duration_s",
    "prompt_tokens_total",
    "generation_tokens_total",
    "num_rejected_kv_pool",
    "num_rejected_max_model_len",
    "swap_in_bytes",
    "num_gpu_blocks",
    "capacity_tokens",
    "usable_capacity_tokens",
    "bytes_per_token",
    "kv_cache_bytes",
    # speculative decoding (kvsim.core.scheduler.spec)
    "spec_decode_num_drafts",
    "spec_decode_num_draft_tokens",
    "spec_decode_num_accepted_tokens",
    "spec_decode_draft_acceptance_rate",
    "spec_decode_mean_acceptance_length",
    # KV offloading to a CPU tier (kvsim.core.scheduler.offload)
    "external_prefix_cache_hit_rate",
    "external_prefix_cache_hits",
    "kv_offload_bytes_gpu_to_cpu",
    "kv_offload_bytes_cpu_to_gpu",
    "kv_offload_load_wait_s",
)


def summary_metrics() -> list[str]:
    """Numeric summary metrics a figure may draw: every target metric and ``_MORE_METRICS``."""

    return list(dict.fromkeys([*target_metrics(), *_MORE_METRICS]))


def _known(names: list[str]) -> list[str]:
    known = set(summary_metrics())
    unknown = [n for n in names if n not in known]
    if unknown:
        shown = ", ".join(repr(n) for n in unknown)
        raise ValueError(
            "expected summary metrics (such as time_to_first_token_seconds_p99, "
            "token_utilization_perc, num_preemptions; `kvsim plan --help` lists more), "
            f"got unknown {shown}"
        )
    return names


class Analysis(BaseModel):
    """``[analysis]``: every key optional, unknown keys refused.

    Attributes:
        vs_metrics: summary metrics ``kvsim plot`` draws against each swept number.
        targets: metric -> upper bound (the metric's unit), drawn as lines; read by notebooks.
        budget: the dotted budget field a notebook plans over (``cache.kv_cache_gib``).
        estimated_num_requests_running_max: sequences at once estimated by arithmetic, one per
            labelled point, that a notebook compares the simulation against.
        latency_factor, window_s (seconds), rate_bracket (req/s), resolution: the paper's
            largest-rate searches (Figures 12, 14, 16, 17).
        fit_label, fit_preset, fit_field, fit_bracket: Figure 13's fitted overhead.
        branch_tokens_bracket: Figure 15's fitted branching scale (tokens).
        history_tokens, reply_tokens: Figure 17's chatbot lengths (tokens).
        paper_best: Figure 18b's published best block sizes, by dataset.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    vs_metrics: Annotated[list[str], Field(min_length=1)] | None = None
    targets: dict[str, Annotated[float, Field(allow_inf_nan=False)]] = {}
    budget: str | None = None
    estimated_num_requests_running_max: list[int] | None = None
    latency_factor: Positive | None = None
    window_s: Positive | None = None
    rate_bracket: Bracket | None = None
    resolution: Positive | None = None
    fit_label: str | None = None
    fit_preset: str | None = None
    fit_field: str | None = None
    fit_bracket: Bracket | None = None
    branch_tokens_bracket: Bracket | None = None
    history_tokens: Annotated[int, Field(ge=1)] | None = None
    reply_tokens: Annotated[int, Field(ge=1)] | None = None
    paper_best: dict[str, list[int]] | None = None

    @field_validator("vs_metrics")
    @classmethod
    def _vs_metrics_known(cls, value: list[str] | None) -> list[str] | None:
        return None if value is None else _known(value)

    @field_validator("targets")
    @classmethod
    def _targets_known(cls, value: dict[str, float]) -> dict[str, float]:
        _known(list(value))
        return value

    @field_validator("rate_bracket", "fit_bracket", "branch_tokens_bracket")
    @classmethod
    def _ascending(cls, value: list[float] | None) -> list[float] | None:
        if value is not None and not value[0] < value[1]:
            raise ValueError(f"expected [lo, hi] with lo < hi, got {value}")
        return value


def check_analysis(table: Any) -> dict[str, Any]:
    """``table`` (an ``[analysis]`` table from TOML) once ``Analysis`` accepts it.

    Raises:
        ValueError: one ``analysis.KEY: problem, got VALUE`` per bad key, joined by ``; ``.
    """
    if not isinstance(table, dict):
        raise ValueError(f"analysis: must be a table, got {table!r}")
    try:
        Analysis.model_validate(table)
    except ValidationError as err:
        lines = format_validation_error(err).splitlines()
        raise ValueError("; ".join(f"analysis.{line}" for line in lines)) from None
    return dict(table)
