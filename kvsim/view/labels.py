"""Axis labels with units for config fields and summary metrics (figures, tables).

``axis_label("cache.kv_cache_gib")`` -> ``"KV cache (GiB)"``;
``axis_label("time_to_first_token_seconds_p99")`` -> ``"time_to_first_token_seconds p99 (s)"``.
Metric names stay vLLM's so that a figure reads like a Prometheus dashboard.
"""

from __future__ import annotations

import math
import re

import numpy as np

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
    "offload.link_bandwidth_bytes_per_s": "link bandwidth, one direction (GB/s)",
    "offload.disk_offloading_size": "disk_offloading_size (GiB)",
    "offload.disk_read_bandwidth_bytes_per_s": "disk read bandwidth (GB/s)",
    "offload.disk_write_bandwidth_bytes_per_s": "disk write bandwidth (GB/s)",
    "offload.offload_prompt_only": "offload_prompt_only",
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
    "spec_decode_mean_acceptance_length": "mean acceptance length (tokens a verification)",
    "prefix_cache_hits": "prefix_cache_hits (tokens)",
    "prefix_cache_queries": "prefix_cache_queries (tokens)",
    "prefix_cache_preempted_hits": "prefix_cache_preempted_hits (tokens)",
    "prefix_cache_preempted_queries": "prefix_cache_preempted_queries (tokens)",
    "kv_cache_max_concurrency": "kv_cache_max_concurrency (requests of max_model_len)",
    "max_model_len": "max_model_len (tokens)",
    "duration_s": "duration (s)",
    "cost_usd": "cost of the run (USD)",
    "bytes_per_token": "KV per token (bytes)",
    "tensor_parallel_size": "tensor_parallel_size (GPUs)",
    "pipeline_parallel_size": "pipeline_parallel_size (GPUs)",
    "layout_factor": "layout factor (paged / contiguous attention time)",
    "kv_offload_allocation_failures": "stores the CPU tier found no room for (count)",
    "cpu_tier_storing_blocks_at_end": "CPU tier blocks storing at the end (blocks)",
    "cpu_tier_loading_blocks_at_end": "CPU tier blocks loading at the end (blocks)",
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
    ("_tokens", "tokens"),  # (a length or a count of tokens: fixed_prompt_tokens)
    ("num_", "count"),
)


def metric_unit(metric: str) -> str:
    """The unit of a summary metric from its name (``""`` when unknown)."""
    for fragment, unit in _UNITS:
        if fragment in metric:
            return unit
    return ""


# config fields shown to people in another unit than they are given in: name suffix -> (what
# one shown unit is in the field's own, the shown unit). Bandwidths in decimal GB/s, as drive
# and link datasheets give them; machine-readable outputs keep the field's own values.
DISPLAY_UNITS = (("_bytes_per_s", 1e9, "GB/s"),)


# units written after a field's value in a label where its name does not say it (a size reads
# wrong bare: kv_offloading_size=64 GiB, not kv_cache_gib=4 GiB); a count's (tokens, sequences)
# is left to the axis label
VALUE_UNITS = ("GiB", "GB/s")


def display_unit(field: str) -> tuple[float, str] | None:
    """``(divisor, unit)`` when ``field`` is shown in another unit than its own (``DISPLAY_UNITS``):
    ``display_unit("offload.link_bandwidth_bytes_per_s")`` -> ``(1e9, "GB/s")``."""
    for suffix, divisor, unit in DISPLAY_UNITS:
        if field.endswith(suffix):
            return divisor, unit
    return None


def field_unit(field: str) -> str:
    """The unit a dotted config field is shown in (``FIELD_LABELS``' parenthesis, else
    ``DISPLAY_UNITS``'; ``""`` when unknown): ``field_unit("cache.kv_cache_gib")`` -> ``"GiB"``."""
    found = re.search(r"\(([^()]*)\)$", FIELD_LABELS.get(field, ""))
    if found:
        return found.group(1)
    shown = display_unit(field)
    return shown[1] if shown else ""


def field_value(field: str, value: object) -> str:
    """A config field's value for people, in the unit ``field_unit`` names (no unit attached):
    ``field_value("offload.disk_read_bandwidth_bytes_per_s", 6.4e9)`` -> ``"6.4"``; a whole
    float without its ``.0``; at most four significant figures past a thousand's digits."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        return str(value)
    shown = display_unit(field)
    if isinstance(value, (int, np.integer)) and not shown:
        return str(value)
    number = float(value) / shown[0] if shown else float(value)
    if not math.isfinite(number):
        return str(number)
    if number.is_integer() and abs(number) < 1e15:
        return str(int(number))
    return f"{number:.4g}" if abs(number) < 1000 else f"{number:,.0f}"


def field_name(field: str) -> str:
    """A config field's short name for a legend or a label: ``short_name``, less the unit its
    name carries where it is shown in another (``"disk_read_bandwidth_bytes_per_s"`` ->
    ``"disk_read_bandwidth"``, its values then in GB/s)."""
    name = short_name(field)
    for suffix, _, _ in DISPLAY_UNITS:
        if name.endswith(suffix) and name != suffix:
            return name.removesuffix(suffix)
    return name


def field_text(field: str, value: object, name: str | None = None, sep: str = "=") -> str:
    """``name=value unit`` for a legend, a panel or a point's label: ``field_text("offload.
    disk_read_bandwidth_bytes_per_s", 6.4e9)`` -> ``"disk_read_bandwidth=6.4 GB/s"``, a size or a
    rate with its unit (``VALUE_UNITS``)
    (``name``: another name to show, e.g. ``merged_name``'s; ``sep`` between it and the value)."""
    text = f"{name or field_name(field)}{sep}{field_value(field, value)}"
    unit = field_unit(field)
    said = field.endswith("_gib")  # (a bandwidth's bytes_per_s is dropped from its name)
    return f"{text} {unit}" if unit in VALUE_UNITS and not said else text


def merged_name(names: list[str]) -> str:
    """One name for fields shown with the same values (zipped fields such as a drive's read and
    write bandwidth): their common words once, the differing ones joined by ``/``:
    ``["disk_read_bandwidth", "disk_write_bandwidth"]`` -> ``"disk_read/write_bandwidth"``."""
    if len(names) < 2:
        return names[0] if names else ""
    words = [n.split("_") for n in names]
    head = 0
    while all(len(w) > head + 1 and w[head] == words[0][head] for w in words):
        head += 1
    tail = 0
    while all(len(w) > head + tail + 1 and w[-1 - tail] == words[0][-1 - tail] for w in words):
        tail += 1
    middles = ["_".join(w[head : len(w) - tail]) for w in words]
    return "_".join([*words[0][:head], "/".join(middles), *words[0][len(words[0]) - tail :]])


def axis_label(name: str) -> str:
    """A config field or summary metric as an axis label with its unit."""
    if name in FIELD_LABELS:
        return FIELD_LABELS[name]
    if name in METRIC_LABELS:
        return METRIC_LABELS[name]
    if display_unit(name):  # a field shown in another unit than its name says
        return f"{field_name(name)} ({field_unit(name)})"
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
