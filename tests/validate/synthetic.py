"""Small measured runs written by the tests, in both formats (``docs/validate.md``).

``write_h100(root)``: two experiments of a tiny Llama (``20260101-000000-tiny-tp1-general``,
train; ``20260101-000001-tiny-tp1-codegen``, validate), 12 requests each in two stages (6 at
10 req/s for 0.6 s, then 6 at 20 req/s for 0.3 s), prompts from a cycle of 2 groups x 2 prompts
with a 16-token system prompt, outputs of 5 tokens; request 9 has ``has_error``.
``write_rtx4090(root)``: three requests whose first two share their first two 16-token blocks.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TRAIN = "20260101-000000-tiny-tp1-general"
VALIDATE = "20260101-000001-tiny-tp1-codegen"
TINY_CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 100,
    "max_position_embeddings": 512,
    "torch_dtype": "bfloat16",
}
PROMPT_LENGTHS = (40, 41, 42, 43)  # cycle slots 0..3
ERROR_INDEX = 9


def h100_requests() -> list[dict[str, Any]]:
    """12 requests, 0.1 s apart then 0.05 s apart; slot ``i % 4``; request 9 has an error."""
    out = []
    for i in range(12):
        arrival_us = i * 100_000 if i < 6 else 600_000 + (i - 6) * 50_000
        error = i == ERROR_INDEX
        out.append(
            {
                "index": i,
                "arrival_time_us": arrival_us,
                "input_tokens": 0 if error else PROMPT_LENGTHS[i % 4],
                "output_tokens": 0 if error else 5,
                "prefix_group": "",
                "has_error": error,
            }
        )
    return out


def h100_truth() -> list[dict[str, Any]]:
    """TTFT 0.02 + i/1000 s and E2E 0.1 + i/100 s (arbitrary but distinct)."""
    out: list[dict[str, Any]] = []
    for i in range(12):
        if i == ERROR_INDEX:
            out.append({"index": i, "has_error": True, "e2e_s": 300.1})
        else:
            out.append(
                {"index": i, "has_error": False, "ttft_s": 0.02 + i / 1000, "e2e_s": 0.1 + i / 100}
            )
    return out


def write_h100(root: Path, **changes: Any) -> Path:
    """The two experiments under ``root/h100``; ``changes`` replace parts of the train one's
    files: ``requests``, ``truth``, ``profile``, ``resolved`` (text), ``split`` (text)."""
    base = root / "h100"
    (base / "replay").mkdir(parents=True, exist_ok=True)
    model_dir = base / "model_configs" / "Tiny"
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(TINY_CONFIG))
    split = changes.get("split", f"{TRAIN} train\n{VALIDATE} validate\n")
    (base / "split.txt").write_text(split)
    for name in (TRAIN, VALIDATE):
        mine = name == TRAIN
        replay = {
            "experiment": name,
            "model_id": "org/Tiny",
            "config": {
                "tensor_parallelism": 1,
                "max_num_seqs": 8,
                "max_num_batched_tokens": 256,
                "kv_blocks_total_gpu": 64,
                "block_size": 16,
            },
            "requests": changes.get("requests", h100_requests()) if mine else h100_requests(),
        }
        (base / "replay" / f"{name}.json").write_text(json.dumps(replay))
        truth = changes.get("truth", h100_truth()) if mine else h100_truth()
        (base / "replay" / f"{name}_ground_truth.json").write_text(json.dumps(truth))
        exp = base / "default_args" / name
        (exp / "results").mkdir(parents=True, exist_ok=True)
        (exp / "exp-config.yaml").write_text(
            "model: org/Tiny\nmax_model_len: 512\nmax_num_seqs: 8\n"
        )
        profile = {
            "data": {"shared_prefix": {"output_len": 5, "system_prompt_len": 16}},
            "load": {"stages": [{"duration": 0.6, "rate": 10}, {"duration": 0.3, "rate": 20}]},
        }
        profile_text = changes.get("profile", json.dumps(profile)) if mine else json.dumps(profile)
        (exp / "profile.yaml").write_text(profile_text)
        resolved = (
            "data:\n  type: shared_prefix\n  shared_prefix:\n    num_groups: 2\n"
            "    num_prompts_per_group: 2\n    system_prompt_len: 16\n    output_len: 5\n"
        )
        (exp / "results" / "config.yaml").write_text(
            changes.get("resolved", resolved) if mine else resolved
        )
    return root


# Request 1 repeats request 0's first 32 tokens (two full blocks), then differs; request 2
# shares nothing. Timestamps on the server's clock (seconds).
RTX_IDS = (
    list(range(1, 41)),
    list(range(1, 33)) + list(range(500, 508)),
    list(range(900, 920)),
)
RTX_TIMES = (
    (1000.0, 1000.0, 1000.5, 1002.0),
    (1000.2, 1000.7, 1001.0, 1003.0),
    (1000.4, 1001.0, 1001.3, 1004.0),
)


def write_rtx4090(root: Path, **changes: Any) -> Path:
    """The run under ``root/rtx4090-llama-3.1-8b``; ``changes``: ``workload`` / ``requests``
    (lists of JSON lines as text), ``series`` (the CSV's text)."""
    folder = root / "rtx4090-llama-3.1-8b"
    folder.mkdir(parents=True, exist_ok=True)
    workload = [
        json.dumps(
            {
                "input_toks": len(ids),
                "output_toks": 4,
                "arrival_time_ns": k * 10**8,
                "input_tok_ids": ids,
            }
        )
        for k, ids in enumerate(RTX_IDS)
    ]
    requests = [
        json.dumps(
            {
                "request_id": f"bench-{k}",
                "input_toks": len(RTX_IDS[k]),
                "output_toks": 4,
                "arrival_time": 1_787_267_980.0 + t[0] - 1000.0,
                "queued_ts": t[0],
                "scheduled_ts": t[1],
                "first_token_ts": t[2],
                "last_token_ts": t[3],
            }
        )
        for k, t in enumerate(RTX_TIMES)
    ]
    (folder / "workload.jsonl").write_text("\n".join(changes.get("workload", workload)) + "\n")
    (folder / "requests.jsonl").write_text("\n".join(changes.get("requests", requests)) + "\n")
    meta = {
        "model": "meta-llama/Llama-3.1-8B",
        "vllm_version": "0.19.0",
        "started_at": "2026-08-20T23:19:39.900000Z",
        "engine_kwargs": {
            "tensor_parallel_size": 1,
            "max_num_seqs": 256,
            "max_num_batched_tokens": 2048,
            "max_model_len": 32768,
        },
        "kv_cache": {"num_gpu_blocks": 2588, "block_size": 16, "enable_prefix_caching": True},
        "hardware": {"device_name": "NVIDIA GeForce RTX 4090"},
        "resolved_config": {"scheduler_config": {"async_scheduling": True}},
    }
    (folder / "meta.json").write_text(json.dumps(meta))
    series = (
        "t,prompt_throughput,gen_throughput,running,waiting,kv_cache_pct\n"
        "1.0,80,2,2,1,1.5\n2.0,0,8,3,0,2.0\n"
    )
    (folder / "timeseries.csv").write_text(changes.get("series", series))
    (folder / "llmservingsim_summary.txt").write_text(
        "Metric  vLLM  Sim  Diff%\nTTFT Mean  700.0  707.0  +1.0%\n"
        "Latency P99  3600.0  3564.0  -1.0%\n"
    )
    return root
