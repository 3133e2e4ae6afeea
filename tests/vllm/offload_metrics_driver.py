"""vLLM's own KV offloading metric definitions (runs inside ``.venv-vllm``).

Run as ``.venv-vllm/bin/python tests/vllm/offload_metrics_driver.py``: prints a JSON object of
every ``vllm:kv_offload_*`` metric vLLM 0.34.0 defines for its native CPU offloading and its
tiered (disk) offloading, ``{name: {"type": "counter" | "gauge" | "histogram", "buckets":
[...] | null, "labels": [...]}}``, the labels past vLLM's base ones (``model_name``,
``engine``). It imports vLLM only, never kvsim: ``test_vllm_offload_metrics.py`` compares the
families kvsim exports. Sources: the connector's definitions
(``offloading/metrics.py``: ``get_connector_metric_definitions`` and the deprecated ones, under
``transfer_type``), the CPU spec's (``CPUOffloadingSpec.build_metric_definitions``), the config
info's labels (``CPUOffloadingInfo.config_info_keys``) and the tiering spec's (``tiering/spec.py``,
``TieringOffloadingSpec.build_metric_definitions``, its byte counters under ``tier``).
"""

from __future__ import annotations

import json

from vllm.distributed.kv_transfer.kv_connector.v1.offloading import metrics
from vllm.v1.kv_offload.base import (
    OffloadingCounterMetadata,
    OffloadingGaugeMetadata,
    OffloadingHistogramMetadata,
)
from vllm.v1.kv_offload.cpu.common import CPUOffloadingInfo
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec
from vllm.v1.kv_offload.tiering.spec import TieringOffloadingSpec


def describe(metadata: object, extra: list[str]) -> dict[str, object]:
    if isinstance(metadata, OffloadingCounterMetadata):
        kind = "counter"
    elif isinstance(metadata, OffloadingGaugeMetadata):
        kind = "gauge"
    else:
        assert isinstance(metadata, OffloadingHistogramMetadata), metadata
        kind = "histogram"
    buckets = getattr(metadata, "buckets", None)
    return {
        "type": kind,
        "buckets": None if buckets is None else [float(b) for b in buckets],
        "labels": list(getattr(metadata, "labelnames", ())) + extra,
    }


def main() -> None:
    out: dict[str, object] = {}
    definitions = {
        **metrics.get_connector_metric_definitions(),
        **CPUOffloadingSpec.build_metric_definitions({}),
        **TieringOffloadingSpec.build_metric_definitions({}),
    }
    for name, metadata in definitions.items():
        out[name] = describe(metadata, [])
    for name, metadata in metrics._DEPRECATED_CONNECTOR_METRIC_DEFINITIONS.items():
        out[name] = describe(metadata, ["transfer_type"])
    out[metrics.KV_OFFLOAD_CONFIG_INFO] = {
        "type": "gauge",
        "buckets": None,
        "labels": list(CPUOffloadingInfo.config_info_keys()),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
