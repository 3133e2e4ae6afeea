"""Axis labels with units for config fields and summary metrics (figures, tables).

``axis_label("cache.kv_cache_gib")`` -> ``"KV cache (GiB)"``;
``axis_label("time_to_first_token_seconds_p99")`` -> ``"time_to_first_token_seconds p99 (s)"``.
Metric names stay vLLM's so that a figure reads like a Prometheus dashboard.
"""

from __future__ import annotations

import re

FIELD_LABELS = {
    "cache.kv_cache_gib": "KV cache (GiB)",
    "cache.kv_cache_gb": "KV cache (GB)",
    "cache.kv_cache_tokens": "KV cache (token slots)",
    "cache.block_size_tokens": "block_size (tokens)",
    "cache.gpu_memory_utilization": "gpu_memory_utilization (fraction)",
    "workload.rate_per_s": "request rate (req/s)",
    "workload.n": "samples per prompt (n)",
    "workload.beam_width": "beam width",
    "parallel.tensor_parallel_size": "tensor_parallel_size (GPUs)",
    "parallel.pipeline_parallel_size": "pipeline_parallel_size (GPUs)",
    "scheduler.max_num_seqs": "max_num_seqs (sequences)",
    "scheduler.max_num_batched_tokens": "max_num_batched_tokens (tokens)",
    "scheduler.max_model_len": "max_model_len (tokens)",
    "fleet.replicas": "replicas",
    "fleet.prefill_replicas": "prefill replicas",
    "offload.kv_offloading_size": "kv_offloading_size (GiB)",
    "offload.link_bandwidth_bytes_per_s": "link bandwidth, one direction (bytes/s)",
    "speculative.num_speculative_tokens": "num_speculative_tokens (tokens)",
    "speculative.acceptance_rate": "acceptance_rate (0-1)",
}

METRIC_LABELS = {
    "token_utilization_perc": "token states / allocated KV (%)",
    "internal_fragmentation_pct_of_used": "internal fragmentation (% of used KV)",
    "external_fragmentation_pct_of_used": "external fragmentation (% of used KV)",
    "kv_cache_usage_perc": "kv_cache_usage_perc (0-1)",
    "kv_cache_usage_perc_max": "kv_cache_usage_perc max (0-1)",
    "normalized_latency_seconds_mean": "mean normalized latency (s/token)",
    "prefix_cache_hit_rate": "prefix_cache_hit_rate (hits / queries, tokens)",
    "usd_per_hour": "fleet price (USD per hour)",
    "usd_per_million_output_tokens": "USD per million output tokens",
    "goodput_requests_per_s": "goodput (requests meeting targets / s)",
    "goodput_requests_per_usd": "goodput (requests meeting targets / USD)",
    "slo_attainment": "requests meeting every target (share)",
}

# vLLM's latency metrics by the short names its benchmark prints (benchmark_serving: TTFT, TPOT,
# E2EL) and kvsim's queue time
LATENCY_SHORT_NAMES = {
    "time_to_first_token_seconds": "TTFT",
    "request_time_per_output_token_seconds": "TPOT",
    "e2e_request_latency_seconds": "E2E",
    "request_queue_time_seconds": "queue",
}

# metric-name fragment -> unit, checked in order
_UNITS = (
    ("token_utilization_perc", "%"),  # a percentage despite vLLM's _perc (0-1) suffix
    ("_pct_of_used", "% of used KV"),
    ("_seconds", "s"),
    ("_pct", "% of KV"),
    ("_perc", "0-1"),
    ("_hit_rate", "0-1"),
    ("_frac", "0-1"),
    ("per_request", "per request"),
    ("_tokens_per_s", "tokens/s"),
    ("_requests_per_s", "req/s"),
    ("_bytes", "bytes"),
    ("num_", "count"),
)


def metric_unit(metric: str) -> str:
    """The unit of a summary metric from its name (``""`` when unknown)."""
    for fragment, unit in _UNITS:
        if fragment in metric:
            return unit
    return ""


def field_unit(field: str) -> str:
    """The unit of a dotted config field (``FIELD_LABELS``' parenthesis; ``""`` when unknown):
    ``field_unit("cache.kv_cache_gib")`` -> ``"GiB"``."""
    found = re.search(r"\(([^()]*)\)$", FIELD_LABELS.get(field, ""))
    return found.group(1) if found else ""


def axis_label(name: str) -> str:
    """A config field or summary metric as an axis label with its unit."""
    if name in FIELD_LABELS:
        return FIELD_LABELS[name]
    if name in METRIC_LABELS:
        return METRIC_LABELS[name]
    base = name.rpartition(".")[2]
    for suffix in ("_p50", "_p90", "_p95", "_p99", "_mean", "_max"):
        if base.endswith(suffix):
            base = f"{base.removesuffix(suffix)} {suffix[1:]}"
            break
    unit = metric_unit(name)
    return f"{base} ({unit})" if unit else base


def wrap_label(text: str, width: int) -> str:
    """``text`` in lines of at most ``width`` characters where it can be: broken at spaces and
    after underscores (a vLLM metric name such as ``request_time_per_output_token_seconds`` is
    one word longer than a panel's axis), never inside a run of letters."""
    pieces = re.findall(r"[^ _]*_|[^ _]+ ?|  *", text)
    lines = [""]
    for piece in pieces:
        if lines[-1] and len(lines[-1]) + len(piece.rstrip()) > width:
            lines[-1] = lines[-1].rstrip()
            lines.append("")
        lines[-1] += piece
    return "\n".join(line.rstrip() for line in lines)


def short_name(dotted: str) -> str:
    """``"cache.block_size_tokens"`` -> ``"block_size_tokens"`` (axis and legend labels)."""
    return dotted.rsplit(".", 1)[-1]
