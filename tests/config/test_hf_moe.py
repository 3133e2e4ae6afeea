"""The fields the step cost splits parameters by, read from Hugging Face configs (by hand)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvsim.config import ModelSpec

MIXTRAL = {  # mistralai/Mixtral-8x7B-v0.1 config.json (the fields that matter)
    "model_type": "mixtral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "num_local_experts": 8,
    "num_experts_per_tok": 2,
    "vocab_size": 32000,
    "tie_word_embeddings": False,
    "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
}


def _model(tmp_path: Path, config: dict[str, Any]) -> ModelSpec:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return ModelSpec.model_validate({"hf_config": str(path)})


def test_mixtral_runs_two_of_eight_experts(tmp_path: Path) -> None:
    model = _model(tmp_path, MIXTRAL)
    assert model.moe is not None
    assert (model.moe.num_experts, model.moe.num_experts_per_tok) == (8, 2)
    assert model.moe.num_moe_layers == 32
    assert model.moe.params_per_expert == 3 * 4096 * 14336  # 176,160,768: w1, w2, w3
    assert model.expert_params == 8 * 32 * 176_160_768  # 45,097,156,608 of 46.7 B
    assert (model.vocab_size, model.embedding_dim, model.tie_word_embeddings) == (
        32000,
        4096,
        False,
    )
    assert model.lm_head_params == model.embedding_params == 32000 * 4096


def test_qwen3_moe_uses_its_moe_width(tmp_path: Path) -> None:
    config = {
        **MIXTRAL,
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "head_dim": 128,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "num_hidden_layers": 48,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "vocab_size": 151936,
    }
    del config["num_local_experts"]
    model = _model(tmp_path, config)
    assert model.moe is not None
    assert (model.moe.num_experts, model.moe.num_experts_per_tok) == (128, 8)
    assert model.moe.params_per_expert == 3 * 2048 * 768
    assert model.embedding_dim == 2048
    assert model.residual_width == 2048


def test_dense_layers_first_are_not_moe_layers(tmp_path: Path) -> None:
    # DeepSeek's first_k_dense_replace = 1 of 4 layers, moe_layer_freq 1: 3 MoE layers
    config = {
        **MIXTRAL,
        "num_hidden_layers": 4,
        "first_k_dense_replace": 1,
        "num_parameters": 10**11,
    }
    model = _model(tmp_path, config)
    assert model.moe is not None
    assert model.moe.num_moe_layers == 3


def test_a_dense_model_has_no_experts_and_a_tied_head_once(tmp_path: Path) -> None:
    config = {**MIXTRAL, "model_type": "qwen2", "tie_word_embeddings": True}
    del config["num_local_experts"], config["num_experts_per_tok"]
    model = _model(tmp_path, config)
    assert model.moe is None
    assert model.expert_params == 0
    assert model.embedding_params == 0
    assert model.lm_head_params == 32000 * 4096


def test_more_experts_per_token_than_experts_is_refused() -> None:
    with pytest.raises(ValueError, match=r"num_experts_per_tok \(9\) exceeds num_experts \(8\)"):
        ModelSpec(
            num_layers=1,
            num_attention_heads=1,
            num_kv_heads=1,
            head_dim=1,
            num_params=10**6,
            moe={
                "num_experts": 8,
                "num_experts_per_tok": 9,
                "num_moe_layers": 1,
                "params_per_expert": 1,
            },
        )
