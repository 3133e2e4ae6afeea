"""Drive vLLM's own v1 ``Scheduler`` through workloads, step by step (runs inside ``.venv-vllm``).

Run as ``.venv-vllm/bin/python tests/vllm/vllm_driver.py < workloads.jsonl > steps.jsonl``:
one workload (``tests/vllm/workloads.py``'s JSON form) a line in, one line out for each, with
the per-step records (``tests/vllm/compare.py`` documents them). It imports vLLM only, never
kvsim: the two sides meet in JSON.

The scheduler is built as vLLM's tests build it (``tests/v1/core/utils.py::create_scheduler``):
a ``VllmConfig`` over a local tiny Llama ``config.json`` (no weights, tokenizer skipped) and a
hand-made ``KVCacheConfig`` of ``num_blocks`` blocks in one full-attention group (a hybrid
workload adds a sliding-window group: vLLM then runs its ``HybridKVCacheCoordinator``), with
synchronous scheduling (``async_scheduling=False``: vLLM's tests' default and what its CPU
build forces; GPU vLLM defaults to async scheduling). The device is given as
``DeviceConfig(device="cpu")`` with no platform selected: vLLM 0.34's CPU platform
(``VLLM_TARGET_DEVICE=cpu``) refuses x86 without triton-cpu, which no scheduling code needs.
Nothing in vLLM is stubbed; the model is faked as vLLM's scheduler tests fake it: a request
whose scheduled tokens reach its known tokens samples one token, a partial prefill chunk
samples none, and a request finishes after ``output_tokens`` sampled tokens (``max_tokens``,
``ignore_eos``). A speculative-decoding workload adds an EAGLE ``SpeculativeConfig`` whose draft
model is the same tiny config (``k`` lookahead slots) or n-gram lookup (none); the fake drafter
proposes ``k`` drafts for every request of the step's batch (vLLM drops those of prefill
chunks and finished requests), and the fake model samples ``1 + accepted`` tokens, accepted as
``tests/vllm/workloads.py`` says.

Token identity: token ``t`` of segment ``s`` is the token id ``TOKEN_BASE + s * 2**16 + t``, so
equal runs are equal tokens exactly as in ``kvsim.workload.tokens``; a request's ``j``-th sampled
token is ``OUTPUT_BASE + req * 2**12 + j``, unique to the request, as kvsim's output segments are.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
from typing import Any

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import numpy as np
import torch
from vllm.config import (
    CacheConfig,
    DeviceConfig,
    ModelConfig,
    ParallelConfig,
    SchedulerConfig,
    SpeculativeConfig,
    VllmConfig,
)
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

TOKEN_BASE = 1_000
OUTPUT_BASE = 1 << 30
EOS_TOKEN_ID = 2
MAX_POSITIONS = 1 << 17

# a Llama with one tiny layer: only its shape is read (no weights are loaded)
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "num_hidden_layers": 1,
    "vocab_size": 32000,
    "max_position_embeddings": MAX_POSITIONS,
    "bos_token_id": 1,
    "eos_token_id": EOS_TOKEN_ID,
    "torch_dtype": "float16",
}


SPEC_STREAM = 0x5BEC  # the acceptance draws' stream (tests/vllm/workloads.py)
DRAFT_TOKEN = 7  # the id of every proposed draft (the fake model decides acceptance itself)


def model_dir(prefix: str = "kvsim-vllm-model-") -> str:
    """A temporary directory holding the tiny Llama's ``config.json``, removed when the
    process exits (each run made one or more: 1,200 folders a test tier were left in /tmp)."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(TINY_LLAMA, f)
    return path


def speculative_config(cfg: dict[str, Any], model_config: ModelConfig) -> SpeculativeConfig:
    """EAGLE with ``num_speculative_tokens`` drafts over the tiny Llama as its draft model (a
    directory named ``eagle-...``, which vLLM's ``EagleSpeculatorConfig.matches``): no weights
    are loaded, and vLLM's ``num_lookahead_tokens`` is ``k``; or n-gram prompt lookup
    (``spec_method = "ngram"``), whose ``num_lookahead_tokens`` is 0."""
    if cfg.get("spec_method") == "ngram":  # prompt lookup: no model, no lookahead slots
        return SpeculativeConfig(
            method="ngram",
            num_speculative_tokens=cfg["num_speculative_tokens"],
            prompt_lookup_max=3,
            prompt_lookup_min=1,
        )
    return SpeculativeConfig(
        method="eagle",
        model=model_dir("kvsim-eagle-"),
        num_speculative_tokens=cfg["num_speculative_tokens"],
        target_model_config=model_config,
        target_parallel_config=ParallelConfig(),
    )


def build_scheduler(cfg: dict[str, Any], model: str) -> Scheduler:
    """vLLM's ``create_scheduler`` with the workload's knobs."""
    model_config = ModelConfig(
        model=model,
        dtype="float16",
        seed=42,
        skip_tokenizer_init=True,
        max_model_len=cfg["max_model_len"],
    )
    scheduler_config = SchedulerConfig(
        max_num_seqs=cfg["max_num_seqs"],
        max_num_batched_tokens=cfg["max_num_batched_tokens"],
        max_model_len=cfg["max_model_len"],
        long_prefill_token_threshold=cfg["long_prefill_token_threshold"],
        enable_chunked_prefill=cfg["enable_chunked_prefill"],
        async_scheduling=False,
        is_encoder_decoder=False,
        watermark=cfg.get("watermark", 0.0),
    )
    cache_config = CacheConfig(
        block_size=cfg["block_size"],
        gpu_memory_utilization=0.9,
        cache_dtype="auto",
        enable_prefix_caching=cfg["enable_prefix_caching"],
    )
    spec = None
    if cfg.get("num_speculative_tokens"):
        spec = speculative_config(cfg, model_config)
    vllm_config = VllmConfig(
        scheduler_config=scheduler_config,
        model_config=model_config,
        cache_config=cache_config,
        device_config=DeviceConfig(device="cpu"),
        speculative_config=spec,
    )
    groups = [
        KVCacheGroupSpec(
            ["layer"],
            FullAttentionSpec(
                block_size=cfg["block_size"],
                num_kv_heads=1,
                head_size=1,
                dtype=torch.float32,
            ),
        )
    ]
    if cfg.get("sliding_window"):  # a hybrid workload: a sliding-window group beside it
        window = SlidingWindowSpec(
            block_size=cfg["block_size"],
            num_kv_heads=1,
            head_size=1,
            dtype=torch.float32,
            sliding_window=cfg["sliding_window"],
        )
        sliding = KVCacheGroupSpec(["sliding_layer"], window)
        groups.insert(0 if cfg.get("sliding_first") else 1, sliding)  # (the layers' order)
    kv_cache_config = KVCacheConfig(
        num_blocks=cfg["num_blocks"], kv_cache_tensors=[], kv_cache_groups=groups
    )
    cache_config.num_gpu_blocks = cfg["num_blocks"]
    return Scheduler(
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        block_size=cfg["block_size"],
        log_stats=True,
        structured_output_manager=StructuredOutputManager(vllm_config),
    )


def prompt_ids(segments: list[list[int]]) -> list[int]:
    """Token ids of a prompt given as ``[segment, length]`` runs."""
    ids: list[int] = []
    for seg, length in segments:
        start = TOKEN_BASE + seg * (1 << 16)
        ids.extend(range(start, start + length))
    return ids


def run_workload(work: dict[str, Any], model: str) -> dict[str, Any]:
    """The per-step records of one workload (see ``tests/vllm/compare.py``)."""
    cfg = work["config"]
    sched = build_scheduler(cfg, model)
    # as vLLM's engine core builds it: EAGLE with a prefix cache hashes a block with the token
    # after it (VllmConfig.num_hash_lookahead_tokens, 1; 0 otherwise)
    lookahead = sched.vllm_config.num_hash_lookahead_tokens
    hasher = get_request_block_hasher(cfg["block_size"], sha256, lookahead)
    pending = sorted(work["requests"], key=lambda r: (r["arrival_step"], r["id"]))
    live: dict[str, Request] = {}
    num_sampled: dict[str, int] = {}
    steps: list[dict[str, Any]] = []
    step, i, max_steps = 0, 0, work["max_steps"]
    spec_k = cfg.get("num_speculative_tokens", 0)
    draws = np.random.default_rng((cfg.get("spec_seed", 0), SPEC_STREAM))
    while (i < len(pending) or live) and step < max_steps:
        if not live and pending[i]["arrival_step"] > step:
            step = pending[i]["arrival_step"]  # an idle engine waits for the next arrival
        while i < len(pending) and pending[i]["arrival_step"] <= step:
            spec = pending[i]
            rid = str(spec["id"])
            req = Request(
                request_id=rid,
                prompt_token_ids=prompt_ids(spec["segments"]),
                sampling_params=SamplingParams(max_tokens=spec["output_tokens"], ignore_eos=True),
                pooling_params=None,
                arrival_time=float(spec["arrival_step"]),
                block_hasher=hasher,
            )
            sched.add_request(req)
            live[rid] = req
            num_sampled[rid] = 0
            i += 1
        out = sched.schedule()
        new_ids = {r.req_id for r in out.scheduled_new_reqs}
        hits = {int(r.req_id): r.num_computed_tokens for r in out.scheduled_new_reqs}
        scheduled = [[int(rid), n] for rid, n in out.num_scheduled_tokens.items()]
        free_blocks = sched.kv_cache_manager.block_pool.get_num_free_blocks()
        sampled: list[list[int]] = []
        req_ids = list(out.num_scheduled_tokens)
        for rid in req_ids:
            req = live[rid]
            if req.num_computed_tokens >= req.num_tokens:  # caught up: it samples
                count = 1 + accepted(out.scheduled_spec_decode_tokens.get(rid), cfg, draws)
                first = OUTPUT_BASE + int(rid) * (1 << 12) + num_sampled[rid]
                sampled.append(list(range(first, first + count)))
                num_sampled[rid] += count
            else:
                sampled.append([])
        output = ModelRunnerOutput(req_ids=req_ids, sampled_token_ids=sampled)
        sched.update_from_output(out, output)
        if spec_k and not out.skip_drafts:  # the drafter proposes for the step's batch
            sched.update_draft_token_ids(
                DraftTokenIds(req_ids, [[DRAFT_TOKEN] * spec_k for _ in req_ids])
            )
        finished = sorted(int(rid) for rid, req in live.items() if req.is_finished())
        for rid in finished:
            del live[str(rid)]
        steps.append(
            {
                "step": step,
                "scheduled": scheduled,
                "preempted": sorted(int(rid) for rid in out.preempted_req_ids),
                "finished": finished,
                "hits": {str(k): v for k, v in sorted(hits.items()) if str(k) in new_ids},
                "free_blocks": free_blocks,
            }
        )
        step += 1
    return {"name": work["name"], "steps": steps}


def accepted(drafts: list[int] | None, cfg: dict[str, Any], draws: np.random.Generator) -> int:
    """Drafts the fake model accepts of those a step verifies: none for no drafts or a padded
    admission's placeholders (-1, no draw), else ``#{i : u < acceptance_rates[i]}`` over the
    verified positions for one uniform ``u`` of the workload's stream."""
    if not drafts or all(t < 0 for t in drafts):
        return 0
    u = float(draws.random())
    rates = cfg["acceptance_rates"]
    count = 0
    while count < len(drafts) and u < rates[count]:
        count += 1
    return count


SELF_CHECK = {
    "name": "self-check",
    "max_steps": 50,
    "config": {
        "num_blocks": 11,
        "block_size": 4,
        "max_num_seqs": 4,
        "max_num_batched_tokens": 16,
        "max_model_len": 64,
        "long_prefill_token_threshold": 0,
        "enable_chunked_prefill": True,
        "enable_prefix_caching": True,
    },
    "requests": [
        {"id": 0, "arrival_step": 0, "segments": [[1, 10]], "output_tokens": 2},
        {"id": 1, "arrival_step": 1, "segments": [[1, 10], [2, 3]], "output_tokens": 1},
    ],
}


SPEC_SELF_CHECK = {
    "name": "spec-self-check",
    "max_steps": 50,
    "config": {
        **SELF_CHECK["config"],
        "num_blocks": 21,
        "enable_prefix_caching": False,
        "num_speculative_tokens": 2,
        "acceptance_rates": [1.0, 0.0],
        "spec_seed": 0,
    },
    "requests": [{"id": 0, "arrival_step": 0, "segments": [[1, 10]], "output_tokens": 6}],
}


def self_check(model: str) -> None:
    """Schedule two requests; exit non-zero unless vLLM does what is worked out here by hand.

    10 usable blocks of 4 tokens (block 0 is the null block). Step 0: request 0's 10-token
    prompt, cdiv(10, 4) = 3 blocks, 7 free; it samples its first token. Step 1: request 0
    decodes (token 11 fits its third block); request 1 (13 tokens) hits request 0's two full
    prompt blocks (8 tokens) and computes 5, cdiv(13, 4) - 2 = 2 new blocks, 5 free; request 0
    samples its second (last) token and finishes, and request 1 its first and only one.
    """
    steps = run_workload(SELF_CHECK, model)["steps"]
    got = [(s["scheduled"], s["hits"], s["free_blocks"], s["finished"]) for s in steps]
    want = [([[0, 10]], {"0": 0}, 7, []), ([[0, 1], [1, 5]], {"1": 8}, 5, [0, 1])]
    if got != want:
        sys.exit(f"vllm_driver self-check: got {got}, want {want}")
    # EAGLE, k = 2 drafts and 2 lookahead slots, the first draft always accepted and the
    # second never (u < 1.0, u >= 0.0): every verification keeps 1 + 1 tokens. 20 usable
    # blocks of 4. Step 0: prefill 10 + 2 lookahead = 12 slots, 3 blocks, 17 free; samples 1.
    # Step 1: 1 + 2 drafts, 10 + 3 + 2 = 15 slots, 4 blocks, 16 free; computed 13 - 1
    # rejected = 12, outputs 3. Step 2: 12 + 3 + 2 = 17, 5 blocks, 15 free; computed 14,
    # outputs 5. Step 3: 14 + 3 + 2 = 19, 5 blocks, 15 free; the 6th output finishes it.
    steps = run_workload(SPEC_SELF_CHECK, model)["steps"]
    got = [(s["scheduled"], s["free_blocks"], s["finished"]) for s in steps]
    want = [([[0, 10]], 17, []), ([[0, 3]], 16, []), ([[0, 3]], 15, []), ([[0, 3]], 15, [0])]
    if got != want:
        sys.exit(f"vllm_driver spec self-check: got {got}, want {want}")
    print("vllm_driver self-check: ok")


def main() -> None:
    init_none_hash(sha256)
    model = model_dir()
    if sys.argv[1:] == ["--self-check"]:
        self_check(model)
        return
    for line in sys.stdin:
        if line.strip():
            result = run_workload(json.loads(line), model)
            sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
