"""The KV offloading families of the Prometheus snapshot (``kvsim.results.prometheus``), as
vLLM 0.34.0 exports them for its native CPU offloading (``--kv-offloading-size``).

Sources: the connector's transfer metrics
(``vllm/distributed/kv_transfer/kv_connector/v1/offloading/metrics.py``:
``vllm:kv_offload_load_bytes``, ``_load_time``, ``_load_size``, ``_store_bytes``,
``_store_time``, ``_store_size``, ``_allocation_failure``, ``vllm:kv_offload_config_info``, and
the deprecated ``vllm:kv_offload_total_bytes``, ``_total_time`` and ``vllm:kv_offload_size``
under a ``transfer_type`` label, which vLLM still writes for the CPU tier), the CPU manager's
(``vllm/v1/kv_offload/cpu/common.py``, ``cpu/manager.py`` ``get_stats``:
``vllm:kv_offload_cpu_cache_usage_perc``, ``_write_usage_perc``, ``_read_usage_perc``,
``vllm:kv_offload_cpu_allocation_size``) and the tiering manager's
(``vllm/v1/kv_offload/tiering/base.py``: ``vllm:kv_offload_tiering_read_bytes``,
``_write_bytes``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from kvsim.base.units import cdiv
from kvsim.config.offload import tier_block_bytes
from kvsim.results.prometheus_base import LABELS, add_histogram, observations

if TYPE_CHECKING:
    from kvsim.results import Results

# vLLM 0.34.0 offloading/metrics.py TRANSFER_SIZE_BUCKETS, bytes a transfer
TRANSFER_SIZE_BUCKETS = (1e6, 5e6, 10e6, 20e6, 40e6, 60e6, 80e6, 100e6, 150e6, 200e6)
# vLLM 0.34.0 cpu/spec.py CPU_ALLOCATION_SIZE's buckets, chunks a prepare_store asked for
ALLOCATION_SIZE_BUCKETS = (1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0)
# (direction, vLLM's deprecated transfer_type, the summary's byte and busy-second keys)
DIRECTIONS = (
    ("load", "CPU_to_GPU", "kv_offload_bytes_cpu_to_gpu", "kv_offload_time_cpu_to_gpu_s"),
    ("store", "GPU_to_CPU", "kv_offload_bytes_gpu_to_cpu", "kv_offload_time_gpu_to_cpu_s"),
)
USAGE_DOCS = {
    "cpu_cache_usage_perc": "Share of the CPU KV cache pinned by transfers in flight (0-1).",
    "cpu_cache_write_usage_perc": "Share of the CPU KV cache pinned by stores in flight (0-1).",
    "cpu_cache_read_usage_perc": "Share of the CPU KV cache pinned by loads in flight (0-1).",
}


def offload_families(results: Results, labels: list[str]) -> Iterator[Metric]:
    """One engine's offloading families (``labels``: its ``LABELS`` values), for a run with a
    CPU tier.

    - Counters: ``vllm:kv_offload_load_bytes`` / ``_store_bytes`` (bytes CPU->GPU / GPU->CPU)
      and ``_load_time`` / ``_store_time`` (seconds the link spent copying: kvsim's copy
      durations, where vLLM times each copy on its CUDA stream); the same under the deprecated
      ``vllm:kv_offload_total_bytes`` and ``_total_time`` with ``transfer_type``
      ``CPU_to_GPU`` / ``GPU_to_CPU``; ``vllm:kv_offload_allocation_failure`` (stores the tier
      could not make room for: one a request a step it is offered again, as vLLM counts them).
    - Gauges, at the run's end: ``vllm:kv_offload_cpu_cache_usage_perc`` (tier blocks storing
      or loading, over the tier's blocks), ``_write_usage_perc`` (storing) and
      ``_read_usage_perc`` (loading, a disk write's read included); omitted for a fleet read
      back from disk.
    - ``vllm:kv_offload_config_info`` (1, without a disk tier): ``cpu_num_chunks`` (the tier's
      blocks), ``cpu_blocks_per_chunk`` (1, vLLM's default), ``cpu_kv_cache_size_bytes``
      (blocks x page-aligned bytes of a block's every copy) and ``cpu_kv_cache_size_tokens``
      (blocks x ``max_model_len`` // blocks a request of ``max_model_len`` takes).
    - Histograms, for a run just made (``Results.offload_sizes``; its folder keeps no count a
      copy): ``vllm:kv_offload_load_size`` / ``_store_size`` (bytes a copy, one a request a
      step) and the deprecated ``vllm:kv_offload_size`` by ``transfer_type``;
      ``vllm:kv_offload_cpu_allocation_size`` (blocks a store asked the tier for).
    - With a disk tier: ``vllm:kv_offload_tiering_read_bytes`` (disk -> CPU) and ``_write_bytes``
      (CPU -> disk) under a ``tier`` label, ``"1:fs"`` as vLLM labels its first secondary tier,
      a file-system one.
    """
    summary = results.summary
    totals = {
        "bytes": CounterMetricFamily(
            "vllm:kv_offload_total_bytes",
            "Number of bytes offloaded by KV connector",
            labels=(*LABELS, "transfer_type"),
        ),
        "time": CounterMetricFamily(
            "vllm:kv_offload_total_time",
            "Total time measured by all KV offloading operations",
            labels=(*LABELS, "transfer_type"),
        ),
    }
    for direction, transfer_type, bytes_key, time_key in DIRECTIONS:
        moved, way = (
            ("loaded", "offload storage to GPU")
            if direction == "load"
            else ("stored", "GPU to offload storage")
        )
        for unit, key, doc in (
            ("bytes", bytes_key, f"Total bytes {moved} from {way}."),
            ("time", time_key, f"Total {direction} time from {way}, in seconds."),
        ):
            counter = CounterMetricFamily(f"vllm:kv_offload_{direction}_{unit}", doc, labels=LABELS)
            counter.add_metric(labels, float(summary[key]))
            yield counter
            totals[unit].add_metric([*labels, transfer_type], float(summary[key]))
    yield from totals.values()
    if "kv_offload_allocation_failures" in summary:  # (a folder written before it had one)
        failures = CounterMetricFamily(
            "vllm:kv_offload_allocation_failure",
            "Number of KV offload store allocation attempts that failed.",
            labels=LABELS,
        )
        failures.add_metric(labels, float(summary["kv_offload_allocation_failures"]))
        yield failures
    # (a fleet read back from disk sums its replicas' counts; a folder written before them)
    if results.replicas is None and "cpu_tier_storing_blocks_at_end" in summary:
        yield from _usage_gauges(summary, labels)
    if "disk_tier_blocks" not in summary:
        yield _config_info(results, labels)
    if results.offload_sizes is not None:
        yield from _size_histograms(results.offload_sizes, labels)
    if "disk_tier_blocks" in summary:
        yield from _tiering_bytes(summary, labels)


def _usage_gauges(summary: dict[str, Any], labels: list[str]) -> Iterator[Metric]:
    """The CPU tier's pinned shares at the run's end (``offload_families``)."""
    blocks = int(summary["cpu_tier_blocks"])
    storing = int(summary["cpu_tier_storing_blocks_at_end"])
    loading = int(summary["cpu_tier_loading_blocks_at_end"])
    for name, pinned in (
        ("cpu_cache_usage_perc", storing + loading),
        ("cpu_cache_write_usage_perc", storing),
        ("cpu_cache_read_usage_perc", loading),
    ):
        gauge = GaugeMetricFamily(f"vllm:kv_offload_{name}", USAGE_DOCS[name], labels=LABELS)
        gauge.add_metric(labels, pinned / blocks if blocks else 0.0)
        yield gauge


def _config_info(results: Results, labels: list[str]) -> Metric:
    """``vllm:kv_offload_config_info``: 1, labelled with ``CPUOffloadingInfo``'s fields
    (``vllm/v1/kv_offload/cpu/common.py``) after vLLM's base labels."""
    config, summary = results.config, results.summary
    blocks = int(summary["cpu_tier_blocks"])
    max_model_len = int(summary.get("max_model_len", config.max_model_len))
    block_size = int(summary.get("kv_cache_block_size_tokens", config.cache.block_size_tokens))
    info: dict[str, Any] = {
        "cpu_num_chunks": blocks,
        "cpu_blocks_per_chunk": 1,
        "cpu_kv_cache_size_bytes": blocks * tier_block_bytes(config),
        "cpu_kv_cache_size_tokens": blocks * max_model_len // cdiv(max_model_len, block_size),
    }
    family = GaugeMetricFamily(
        "vllm:kv_offload_config_info",
        "Static configuration of the KV offload managers of this engine instance.",
        labels=(*LABELS, *info),
    )
    family.add_metric([*labels, *(str(v) for v in info.values())], 1.0)
    return family


def _size_histograms(sizes: dict[str, dict[int, int]], labels: list[str]) -> Iterator[Metric]:
    """The copies' sizes and the stores' block counts (``Results.offload_sizes``)."""
    deprecated = HistogramMetricFamily(
        "vllm:kv_offload_size",
        "Histogram of KV offload transfer size, in bytes.",
        labels=(*LABELS, "transfer_type"),
    )
    for direction, transfer_type, _, _ in DIRECTIONS:
        values, weights = observations(sizes[direction])
        family = HistogramMetricFamily(
            f"vllm:kv_offload_{direction}_size",
            f"Histogram of KV offload {direction} operation size, in bytes.",
            labels=LABELS,
        )
        add_histogram(family, labels, TRANSFER_SIZE_BUCKETS, values, weights)
        yield family
        add_histogram(deprecated, [*labels, transfer_type], TRANSFER_SIZE_BUCKETS, values, weights)
    yield deprecated
    values, weights = observations(sizes["allocation"])
    allocation = HistogramMetricFamily(
        "vllm:kv_offload_cpu_allocation_size",
        "Histogram of the number of CPU chunks requested by each KV offload prepare_store call.",
        labels=LABELS,
    )
    add_histogram(allocation, labels, ALLOCATION_SIZE_BUCKETS, values, weights)
    yield allocation


def _tiering_bytes(summary: dict[str, Any], labels: list[str]) -> Iterator[Metric]:
    """vLLM 0.34.0's tiered-offloading byte counters (``TieringOffloadingMetrics``), the disk
    as the first secondary tier, ``"1:fs"``."""
    for name, key, doc in (
        ("read_bytes", "kv_offload_bytes_disk_to_cpu", "Bytes read from the disk tier."),
        ("write_bytes", "kv_offload_bytes_cpu_to_disk", "Bytes written to the disk tier."),
    ):
        family = CounterMetricFamily(
            f"vllm:kv_offload_tiering_{name}", doc, labels=(*LABELS, "tier")
        )
        family.add_metric([*labels, "1:fs"], float(summary[key]))
        yield family
