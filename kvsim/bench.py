"""``make bench``: simulator speed in simulated requests and decode tokens per wall-clock second.

Runs, through the paged allocator (16-token blocks):

* ``azure_conv_10k``: the first 10,000 requests of the Azure LLM inference 2023 conversation trace,
  replayed with their real arrivals; Llama-3.1-8B on an A100-80GB (vLLM-style KV budget at
  gpu_memory_utilization 0.9).
* ``azure_conv_100k``: 100,000 requests resampled from that trace's lengths, Poisson arrivals at
  the trace's mean rate (19,366 requests in 3,502 s = 5.53 req/s), same model and GPU.
* ``vidur_v1``, ``vidur_v0``: Vidur's common benchmark workload under each engine profile: 10,000
  requests, Poisson 2 req/s, total length uniform in 256-2,048 tokens split 3:1 prefill:decode,
  Llama-2-70B with tensor parallel 2 on A100-80GB and a KV pool of 3,328 blocks of 16 tokens per
  GPU, max_num_seqs 128, max_num_batched_tokens 4,096.

Wall time covers the simulation only (workload generation excluded). Decode tokens are all
generated tokens. Results go to ``results/bench/bench.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import time
from pathlib import Path
from typing import Any

from kvsim.config import config_from_dict
from kvsim.engine import prepare_requests, simulate
from kvsim.workload import DataNotFoundError

logger = logging.getLogger(__name__)

AZURE_RATE_PER_S = 19_366 / 3_502  # trace README: 19,366 requests over 3,502 s
LLAMA2_70B_TP2_BYTES_PER_TOKEN = 2 * 80 * (8 // 2) * 128 * 2  # one GPU's share at TP 2
VIDUR_WORKLOAD: dict[str, Any] = {
    "lengths": "uniform",
    "min_total_tokens": 256,
    "max_total_tokens": 2048,
    "prefill_decode_ratio": 3.0,
    "arrival": "poisson",
    "rate_per_s": 2.0,
    "num_requests": 10_000,
}

BENCHMARKS: dict[str, dict[str, Any]] = {
    "azure_conv_10k": {
        "model": "llama-3.1-8b",
        "gpu": "a100-80gb",
        "scheduler": {"max_model_len": 16384},
        "workload": {"trace": "azure_conv", "arrival": "trace", "num_requests": 10_000},
    },
    "azure_conv_100k": {
        "model": "llama-3.1-8b",
        "gpu": "a100-80gb",
        "scheduler": {"max_model_len": 16384},
        "workload": {
            "trace": "azure_conv",
            "sample": "resample",
            "arrival": "poisson",
            "rate_per_s": AZURE_RATE_PER_S,
            "num_requests": 100_000,
        },
    },
    # Vidur's hardware for this workload: Llama-2-70B, tensor parallel 2 on A100-80GB, 3,328 blocks
    "vidur_v1": {
        "model": "llama-2-70b",
        "gpu": "a100-80gb",
        "parallel": {"tensor_parallel_size": 2},
        "cache": {"kv_cache_bytes": 3_328 * 16 * LLAMA2_70B_TP2_BYTES_PER_TOKEN},
        "scheduler": {"max_model_len": 4096, "max_num_seqs": 128, "max_num_batched_tokens": 4096},
        "workload": VIDUR_WORKLOAD,
    },
}
BENCHMARKS["vidur_v0"] = {
    **BENCHMARKS["vidur_v1"],
    "scheduler": {**BENCHMARKS["vidur_v1"]["scheduler"], "engine": "vllm-v0"},
}


def run_benchmark(name: str, spec: dict[str, Any], record_memory: bool = True) -> dict[str, Any]:
    """Simulate one benchmark and time it; returns the bench.json entry."""
    config = config_from_dict(
        {
            **spec,
            "cache": {"allocator": "paged", **spec.get("cache", {})},
            "record_memory": record_memory,
        }
    )
    requests, _ = prepare_requests(config)
    decode_tokens = sum(r.output_tokens for r in requests)
    start = time.perf_counter()
    results = simulate(config, requests)
    wall_s = time.perf_counter() - start
    return {
        "requests": len(requests),
        "decode_tokens": decode_tokens,
        "wall_s": wall_s,
        "requests_per_s": len(requests) / wall_s,
        "decode_tokens_per_s": decode_tokens / wall_s,
        "simulated_s": results.summary["duration_s"],
        "num_events": len(results.memory),
        "num_steps": results.summary["num_steps"],
        "num_requests_running_mean": results.summary.get("num_requests_running_mean"),
        "num_preemptions": results.summary["num_preemptions"],
    }


def main(argv: list[str] | None = None) -> None:
    """Run every benchmark and write ``OUT/bench.json``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/bench", type=Path)
    parser.add_argument("--only", nargs="*", choices=sorted(BENCHMARKS))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    report: dict[str, Any] = {"machine": platform.platform(), "python": platform.python_version()}
    for name in args.only or BENCHMARKS:
        try:
            entry = run_benchmark(name, BENCHMARKS[name])
        except DataNotFoundError as err:
            logger.warning("%s skipped: %s", name, err)
            continue
        report[name] = entry
        logger.info(
            "%-16s %7d requests in %6.2f s wall: %9.0f requests/s, %11.0f decode tokens/s "
            "(%d events for %d steps)",
            name,
            entry["requests"],
            entry["wall_s"],
            entry["requests_per_s"],
            entry["decode_tokens_per_s"],
            entry["num_events"],
            entry["num_steps"],
        )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bench.json").write_text(json.dumps(report, indent=2))
    logger.info("wrote %s", args.out / "bench.json")


if __name__ == "__main__":
    main()
