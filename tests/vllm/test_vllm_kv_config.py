"""``make test-vllm``: kvsim's KV pool (blocks and KV cache groups) against vLLM's own planning.

For model presets with and without a speculative drafter's KV layers, hybrid groups on and off,
kvsim's ``SimConfig`` gives the pool's blocks (``capacity_tokens // block size``, vLLM's null
block among them) and its KV cache groups; vLLM's ``get_kv_cache_configs`` gives its
``num_blocks`` and groups for the same layers on one GPU (``kv_config_driver.py``, in
``.venv-vllm``), the layers registered in the model's order (its groups' order, which decides
the order vLLM allocates and frees them in). A budget one ``max_model_len`` request outgrows is
refused by both. Skipped
unless ``.venv-vllm`` exists. A state layer (Mamba / GDN) is given to vLLM as one state of
kvsim's bytes in the attention page, at the block size kvsim raised to hold it (vLLM raises it
in the model's config, before planning).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kvsim.base.units import GiB
from kvsim.config import SimConfig, config_from_dict
from kvsim.config.hardware import kv_dtype_bytes
from tests.vllm.compare import vllm_python

pytestmark = pytest.mark.vllm

DRIVER = Path(__file__).with_name("kv_config_driver.py")
SPEC = {"num_speculative_tokens": 3, "acceptance_rate": 0.7}
KINDS = ["full", "sliding", "state"]

# (model, GiB of KV per GPU, max_model_len, block size, tensor parallel, kv_cache_dtype,
#  drafter KV layers (None: no speculation), hybrid groups)
CASES: list[tuple[str, float, int, int, int, str, int | None, bool]] = [
    ("llama-3.1-8b", 4, 8192, 16, 1, "auto", None, True),
    ("llama-3.1-8b", 4, 8192, 16, 1, "auto", 1, True),
    ("llama-3.1-8b", 4, 8192, 16, 1, "auto", 2, True),
    ("llama-3.1-8b", 3, 8192, 32, 2, "fp8", 1, True),
    ("gemma-3-27b", 20, 8192, 16, 1, "auto", None, True),
    ("gemma-3-27b", 20, 8192, 16, 1, "auto", 1, True),
    ("gemma-3-27b", 20, 8192, 32, 1, "auto", 1, False),
    ("gemma-3-27b", 4, 8192, 16, 1, "auto", 1, True),  # refused: one request needs 4.4 GiB
    ("gpt-oss-20b", 8, 16384, 16, 1, "auto", None, True),
    ("gpt-oss-20b", 8, 16384, 16, 1, "auto", 1, True),
    ("gpt-oss-20b", 8, 16384, 16, 2, "auto", 3, True),
    ("mistral-7b-v0.1", 8, 8192, 16, 1, "auto", None, True),
    ("mistral-7b-v0.1", 8, 8192, 16, 1, "auto", 1, True),
    ("qwen3-next-80b-a3b", 2, 8192, 16, 2, "auto", None, True),
    ("qwen3-next-80b-a3b", 2, 8192, 16, 4, "auto", 1, True),
    # refused: 38 blocks of 272 tokens; one request needs cdiv(8192, 272) = 31 full + 3 state
    # groups x (1 state + 3 drafts' blocks) + the null block = 44 (35 with one block a state)
    ("qwen3-next-80b-a3b", 0.13, 8192, 16, 4, "auto", 1, True),
]


def kvsim_config(case: tuple) -> SimConfig:
    """The case as a kvsim config (raises ``ValueError`` where kvsim refuses it)."""
    model, gib, length, block, tp, dtype, draft, hybrid = case
    spec = {} if draft is None else {**SPEC, "draft_num_kv_layers": draft}
    return config_from_dict(
        {
            "model": {"preset": model, "attention": {"hybrid_kv_cache": hybrid}}
            if model != "llama-3.1-8b"
            else model,
            "gpu": "h100-80gb",
            "parallel": {"tensor_parallel_size": tp},
            "cache": {"kv_cache_gib": gib, "block_size_tokens": block, "kv_cache_dtype": dtype},
            "scheduler": {"max_model_len": length},
            "speculative": spec,
        }
    )


def vllm_case(case: tuple) -> dict[str, Any]:
    """The same layers as vLLM's model runner reports them on one GPU."""
    model, gib, length, block, tp, dtype, draft, hybrid = case
    shape = {
        "gpu": "h100-80gb",
        "parallel": {"tensor_parallel_size": tp},
        "cache": {"kv_cache_gib": 1},
        "scheduler": {"max_model_len": 64},
    }
    base = config_from_dict({"model": model, **shape}).model  # (the preset's layers only)
    attention = base.attention
    sliding = attention.num_sliding_layers if attention else 0
    window = attention.sliding_window_tokens if attention else None
    state = attention.num_state_layers if attention else 0
    if state:  # the block size raised to hold a state (kvsim.config.layers.state_block_size;
        # on a budget that holds a request: the case's may be one kvsim refuses)
        groups = kvsim_config((model, 2, length, block, tp, dtype, draft, hybrid)).kv_groups
        assert groups is not None
        block = groups.block_size_tokens
    return {
        "num_full": base.num_kv_layers - sliding,
        "num_sliding": sliding,
        "num_state": state,
        "state_bytes": -(-(attention.state_bytes_per_layer or 0) // tp) if state else 0,
        "num_draft": draft or 0,
        "num_speculative_tokens": 0 if draft is None else SPEC["num_speculative_tokens"],
        # the kinds as the model's layers first come (vLLM registers layers in order)
        "kind_order": list(dict.fromkeys([*(attention.kind_order or ()), *KINDS]))
        if attention
        else ["full"],
        "num_kv_heads": max(1, base.num_kv_heads // tp),
        "head_size": base.head_dim,
        "dtype_bytes": kv_dtype_bytes(base, dtype),  # type: ignore[arg-type]
        "sliding_window": window,
        "block_size": block,
        "max_model_len": length,
        "available_bytes": int(gib * GiB),
        "hybrid": hybrid,
    }


def kvsim_plan(case: tuple) -> dict[str, Any]:
    """kvsim's pool in the driver's terms: ``num_blocks`` and groups, or its refusal."""
    try:
        cfg = kvsim_config(case)
    except ValueError as err:
        return {"error": str(err)}
    groups = cfg.kv_groups
    if groups is None:  # one group of every attention layer, the drafter's too
        layers = cfg.model.num_kv_layers + cfg.draft_kv_layers
        return {
            "num_blocks": cfg.capacity_tokens // cfg.cache.block_size_tokens,
            "groups": [["full", layers]],
        }
    return {
        "num_blocks": cfg.capacity_tokens // groups.block_size_tokens,
        "groups": [[g.kind, g.num_real_layers] for g in groups.groups],
    }


def test_kv_pool_matches_vllms_planning():
    python = vllm_python()
    if python is None:
        pytest.skip(".venv-vllm is not built (scripts/vllm_venv.sh, or make test-vllm)")
    done = subprocess.run(
        [str(python), str(DRIVER)],
        input=json.dumps([vllm_case(c) for c in CASES]),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = json.loads(done.stdout)
    differ = []
    for case, vllm in zip(CASES, theirs, strict=True):
        ours = kvsim_plan(case)
        if "error" in vllm or "error" in ours:  # both refuse, or it is a difference
            same = ("error" in vllm) == ("error" in ours)
        else:  # the same blocks, and the same groups in the same order
            same = ours["num_blocks"] == vllm["num_blocks"] and ours["groups"] == vllm["groups"]
        if not same:
            differ.append(f"{case}:\n  kvsim {ours}\n  vLLM  {vllm}")
    assert not differ, "\n".join(differ)
    assert sum("error" in v for v in theirs) == 2  # the two budgets meant to be refused
