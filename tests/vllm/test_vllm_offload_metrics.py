"""``make test-vllm``: the KV offloading series kvsim exports against vLLM's own definitions.

A run with a CPU tier and one with a disk tier below it export their ``vllm:kv_offload_*``
families (``kvsim.results.prometheus_offload``); vLLM 0.34.0's definitions of those names come
from its own modules (``offload_metrics_driver.py``, in ``.venv-vllm``). Each family kvsim
writes must be one vLLM defines, of the same type, with the same bucket bounds and the same
labels past the base ones (``model_name``, ``engine``). Skipped unless ``.venv-vllm`` exists.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvsim.config import config_from_dict
from kvsim.engine import simulate
from kvsim.results.prometheus import prometheus_snapshot
from kvsim.workload.request import Request
from tests.vllm.compare import vllm_python

pytestmark = pytest.mark.vllm

DRIVER = Path(__file__).with_name("offload_metrics_driver.py")
BASE_LABELS = {"model_name", "engine"}
# the CPU tier's families kvsim writes (the test fails if one goes missing, not only if one
# differs from vLLM's)
CPU_FAMILIES = {
    "vllm:kv_offload_load_bytes",
    "vllm:kv_offload_load_time",
    "vllm:kv_offload_load_size",
    "vllm:kv_offload_store_bytes",
    "vllm:kv_offload_store_time",
    "vllm:kv_offload_store_size",
    "vllm:kv_offload_allocation_failure",
    "vllm:kv_offload_cpu_cache_usage_perc",
    "vllm:kv_offload_cpu_cache_write_usage_perc",
    "vllm:kv_offload_cpu_cache_read_usage_perc",
    "vllm:kv_offload_cpu_allocation_size",
    "vllm:kv_offload_total_bytes",
    "vllm:kv_offload_total_time",
    "vllm:kv_offload_size",
}


def _families(offload: dict[str, Any]) -> dict[str, Any]:
    config = config_from_dict(
        {
            "model": "opt-13b",
            "gpu": "a100-40gb",
            "cache": {"kv_cache_bytes": 13 * 16 * 819_200, "enable_prefix_caching": True},
            "scheduler": {"max_model_len": 192},
            "offload": offload,
        }
    )
    requests = [
        Request(0, 0.0, 160, 2, 2, token_segments=(("a", 160),)),
        Request(1, 5.0, 176, 2, 2, token_segments=(("b", 176),)),
        Request(2, 10.0, 180, 2, 2, token_segments=(("a", 160), ("c", 20))),
    ]
    text = prometheus_snapshot(simulate(config, requests))
    return {
        f.name: f
        for f in text_string_to_metric_families(text)
        if f.name.startswith("vllm:kv_offload_")
    }


def _shape(family: Any) -> dict[str, Any]:
    """A parsed family's type, bucket bounds and labels past the base ones."""
    labels: set[str] = set()
    bounds: list[float] = []
    for sample in family.samples:
        labels |= set(sample.labels) - BASE_LABELS - {"le"}
        if sample.name.endswith("_bucket") and sample.labels["le"] != "+Inf":
            bound = float(sample.labels["le"])
            if bound not in bounds:
                bounds.append(bound)
    return {"type": family.type, "buckets": bounds or None, "labels": sorted(labels)}


def test_offload_families_are_vllms() -> None:
    python = vllm_python()
    if python is None:
        pytest.skip(".venv-vllm is not built (scripts/vllm_venv.sh, or make test-vllm)")
    done = subprocess.run([str(python), str(DRIVER)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout)
    link = {"link_bandwidth_bytes_per_s": 1e9}
    cpu = _families({"kv_offloading_size": 0.5, **link})
    disk = _families({"kv_offloading_size": 0.5, "disk_offloading_size": 1, **link})
    assert CPU_FAMILIES | {"vllm:kv_offload_config_info"} <= set(cpu)
    assert CPU_FAMILIES | {"vllm:kv_offload_tiering_read_bytes"} <= set(disk)
    for name, family in {**cpu, **disk}.items():
        assert name in theirs, f"{name}: vLLM 0.34.0 defines no such metric"
        ours, want = _shape(family), theirs[name]
        assert ours["type"] == want["type"], name
        assert ours["buckets"] == want["buckets"], name
        assert ours["labels"] == sorted(want["labels"]), name
