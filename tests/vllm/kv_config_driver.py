"""vLLM's own KV cache planning for layer patterns given as JSON (runs inside ``.venv-vllm``).

Run as ``.venv-vllm/bin/python tests/vllm/kv_config_driver.py < cases.json``: a JSON list of
cases in, a JSON list of results out. It imports vLLM only, never kvsim: ``test_vllm_kv_config.py``
builds the cases from kvsim's model presets and compares.

A case names a model's attention layers on one GPU as vLLM's model runner reports them
(``vllm/v1/worker/gpu/attn_utils.py``, ``get_kv_cache_spec``): ``num_full`` full-attention and
``num_sliding`` sliding-window layers of ``num_kv_heads`` heads of ``head_size`` in bf16 or
fp8, ``num_state`` state layers whose ``state_bytes`` state vLLM pads to the attention page
(``MambaSpec.page_size_padded``; ``block_size`` is then the one vLLM raised to hold the state,
kvsim's ``KVCacheGroups.block_size_tokens``; ``num_speculative_tokens`` a state's blocks for
draft positions, as vLLM's model runner sets ``MambaSpec.num_speculative_blocks``), and
``num_draft`` layers of a speculative drafter, full attention marked ``is_draft``. The
specs go through ``get_global_kv_cache_groups`` and ``get_kv_cache_configs``
(``vllm/v1/core/kv_cache_planning.py``) with ``available_bytes`` of KV memory, as vLLM's engine
core plans them; the result is ``num_blocks`` and each group's ``[kind, layers]``, or ``error``
(vLLM's message) when vLLM refuses the budget. The config is the tiny Llama of
``vllm_driver.py``: only the scheduler's ``max_model_len`` and the cache's block size are read by
the planning. The hybrid KV cache manager is enabled by hand (vLLM disables it on a platform
without a GPU, ``VllmConfig``'s hybrid check), and the KV cache layout is fixed (the engine core
resolves it from the attention backends, which the planning's byte counts do not depend on).
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from typing import Any

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import torch
from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
from vllm.v1.core import kv_cache_planning
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec, SlidingWindowSpec

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from tests.vllm.vllm_driver import model_dir  # (the tiny Llama, vLLM-side only)

DTYPES = {2: torch.bfloat16, 1: torch.float8_e4m3fn}


def vllm_config(case: dict[str, Any], model: str) -> VllmConfig:
    """A ``VllmConfig`` whose planning reads the case's ``max_model_len`` and block size."""
    length = case["max_model_len"]
    config = VllmConfig(
        model_config=ModelConfig(
            model=model, dtype="float16", seed=0, skip_tokenizer_init=True, max_model_len=length
        ),
        scheduler_config=SchedulerConfig(
            max_model_len=length, max_num_batched_tokens=length, is_encoder_decoder=False
        ),
        cache_config=CacheConfig(block_size=case["block_size"]),
        device_config=DeviceConfig(device="cpu"),
    )
    config.cache_config.kv_cache_layout = "LBNHC"
    config.scheduler_config.disable_hybrid_kv_cache_manager = not case["hybrid"]
    return config


def layer_specs(case: dict[str, Any]) -> dict[str, Any]:
    """Layer name -> KV cache spec in the order the layers register: the kinds in the case's
    ``kind_order`` (each kind's first layer's place in the model), the drafter's layers last
    (they register after the target's)."""
    shape = {
        "block_size": case["block_size"],
        "num_kv_heads": case["num_kv_heads"],
        "head_size": case["head_size"],
        "dtype": DTYPES[case["dtype_bytes"]],
    }
    specs: dict[str, Any] = {}
    for kind in case.get("kind_order", ["full", "sliding", "state"]):
        if kind == "full":
            for i in range(case["num_full"]):
                specs[f"model.layers.{i}.full"] = FullAttentionSpec(**shape)
        elif kind == "sliding":
            for i in range(case["num_sliding"]):
                specs[f"model.layers.{i}.sliding"] = SlidingWindowSpec(
                    **shape, sliding_window=case["sliding_window"]
                )
        else:
            for i in range(case.get("num_state", 0)):  # one state a request, in its own page
                page = FullAttentionSpec(**shape).page_size_bytes  # (padded to the attn page)
                specs[f"model.layers.{i}.state"] = MambaSpec(
                    block_size=case["block_size"],
                    shapes=((case["state_bytes"] // 2,),),
                    dtypes=(torch.bfloat16,),
                    page_size_padded=page,
                    num_speculative_blocks=case.get("num_speculative_tokens", 0),
                )
    for i in range(case["num_draft"]):
        specs[f"draft_model.layers.{i}"] = replace(FullAttentionSpec(**shape), is_draft=True)
    return specs


def plan(case: dict[str, Any], model: str) -> dict[str, Any]:
    """vLLM's ``num_blocks`` and groups for one case, or its refusal."""
    config = vllm_config(case, model)
    specs = layer_specs(case)
    try:
        groups = kv_cache_planning.get_global_kv_cache_groups(config, [specs])
        (kv_config,) = kv_cache_planning.get_kv_cache_configs(
            config, [specs], [case["available_bytes"]], groups
        )
    except ValueError as err:
        return {"error": str(err)}
    kinds = {FullAttentionSpec: "full", SlidingWindowSpec: "sliding", MambaSpec: "state"}
    return {
        "num_blocks": kv_config.num_blocks,
        "groups": [
            [kinds[type(g.kv_cache_spec)], len(g.layer_names)] for g in kv_config.kv_cache_groups
        ],
    }


def main() -> None:
    model = model_dir("kvsim-vllm-kvconfig-")
    cases = json.load(sys.stdin)
    json.dump([plan(case, model) for case in cases], sys.stdout)


if __name__ == "__main__":
    main()
