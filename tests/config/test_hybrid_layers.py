"""``model.attention``: hybrid layer patterns from presets and Hugging Face configs, and the
errors a bad one gives."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from kvsim.config import SimConfig
from kvsim.config.hardware import ModelSpec
from kvsim.config.layers import attention_from_hf

# Gemma-3-27B's text_config fields (google/gemma-3-27b-it config.json), flattened
GEMMA3_TEXT = {
    "num_hidden_layers": 62,
    "num_attention_heads": 32,
    "num_key_value_heads": 16,
    "head_dim": 128,
    "sliding_window": 1024,
    "sliding_window_pattern": 6,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}


def test_layer_patterns_read_as_vllm_reads_them():
    # Gemma-3: every 6th layer global: 62 // 6 = 10 global, 52 sliding; layer 0 slides, so
    # vLLM's groups (in the layers' order) are the sliding ones first
    assert attention_from_hf(GEMMA3_TEXT, 62, 2) == {
        "num_sliding_layers": 52,
        "sliding_window_tokens": 1024,
        "kind_order": ["sliding", "full"],
    }
    # gpt-oss-20b: layer_types alternate sliding / full over 24 layers, window 128
    gpt_oss = {"sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"] * 12}
    assert attention_from_hf(gpt_oss, 24, 2) == {
        "num_sliding_layers": 12,
        "sliding_window_tokens": 128,
        "kind_order": ["sliding", "full"],
    }
    # Mistral-7B-v0.1: a window on every layer; Qwen2.5 turns its window off
    assert attention_from_hf({"sliding_window": 4096}, 32, 2)["num_sliding_layers"] == 32
    assert attention_from_hf({"sliding_window": 131072, "use_sliding_window": False}, 28, 2) == {}
    # Qwen3-Next-80B-A3B: 36 linear_attention layers of 48; state per layer:
    # conv (4 - 1) x (2 x 16 x 128 + 32 x 128) = 24,576 values, SSM 32 x 128 x 128 = 524,288
    # values: 548,864 x 2 bytes = 1,097,728 bytes (the preset's figure)
    qwen3_next = {
        "layer_types": ["linear_attention"] * 3 + ["full_attention"],
        "linear_conv_kernel_dim": 4,
        "linear_num_key_heads": 16,
        "linear_key_head_dim": 128,
        "linear_num_value_heads": 32,
        "linear_value_head_dim": 128,
    }
    qwen3_next["layer_types"] = qwen3_next["layer_types"] * 12  # type: ignore[operator]
    assert attention_from_hf(qwen3_next, 48, 2) == {
        "num_state_layers": 36,
        "state_bytes_per_layer": 1_097_728,
        "kind_order": ["state", "full"],
    }
    assert ModelSpec.model_validate("qwen3-next-80b-a3b").attention.state_bytes_per_layer == (
        1_097_728
    )
    with pytest.raises(ValueError, match="linear_attention layers need linear_conv_kernel_dim"):
        attention_from_hf({"layer_types": ["linear_attention"]}, 1, 2)


def test_layer_patterns_without_layer_types_follow_transformers() -> None:
    """Each count worked from the model's transformers ``*Config`` (``layer_types`` built when the
    file has none)."""
    # Gemma-3: layer i global when (i + 1) % pattern == 0: pattern 1 -> every layer global;
    # gemma3_text without a pattern -> 6 (Gemma3TextConfig): 62 - 62 // 6 = 52 sliding
    assert attention_from_hf({**GEMMA3_TEXT, "sliding_window_pattern": 1}, 62, 2) == {}
    no_pattern = {k: v for k, v in GEMMA3_TEXT.items() if k != "sliding_window_pattern"}
    assert attention_from_hf({**no_pattern, "model_type": "gemma3_text"}, 62, 2) == {
        "num_sliding_layers": 52,
        "sliding_window_tokens": 1024,
        "kind_order": ["sliding", "full"],
    }
    # Gemma-2 (google/gemma-2-9b: 42 layers, window 4096): the even layers slide -> 21
    gemma2 = {"model_type": "gemma2", "sliding_window": 4096}
    assert attention_from_hf(gemma2, 42, 2) == {
        "num_sliding_layers": 21,
        "sliding_window_tokens": 4096,
        "kind_order": ["sliding", "full"],
    }
    # Qwen2: no window unless use_sliding_window; then layers from max_window_layers on:
    # 28 - 21 = 7 sliding (layers 21..27: full layers first); max_window_layers 28 of 28 -> none
    qwen2 = {"model_type": "qwen2", "sliding_window": 32768, "max_window_layers": 21}
    assert attention_from_hf(qwen2, 28, 2) == {}
    assert attention_from_hf({**qwen2, "use_sliding_window": True}, 28, 2) == {
        "num_sliding_layers": 7,
        "sliding_window_tokens": 32768,
        "kind_order": ["full", "sliding"],
    }
    assert (
        attention_from_hf({**qwen2, "use_sliding_window": True, "max_window_layers": 28}, 28, 2)
        == {}
    )
    # the legacy name "attention" is full attention
    assert attention_from_hf({"layer_types": ["attention"] * 4, "sliding_window": 8}, 4, 2) == {}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"sliding_window": 0}, "sliding_window must be an integer from 1 to 134,217,728"),
        ({"sliding_window": -5}, "sliding_window must be an integer from 1"),
        # past any context: it was refused as model.attention.sliding_window_tokens, a field
        # the user never wrote, with no place in the file
        ({"sliding_window": 10**9}, r"sliding_window must be .* got 1000000000"),
        ({"sliding_window": "1024"}, "got '1024'"),
        ({"sliding_window": 1024.0}, "got 1024.0"),
        ({"sliding_window": True}, "got True"),
        ({**GEMMA3_TEXT, "sliding_window_pattern": 0}, "sliding_window_pattern must be"),
        ({**GEMMA3_TEXT, "sliding_window_pattern": "6"}, "sliding_window_pattern must be"),
        ({"layer_types": "full_attention"}, "layer_types must be a list"),
        ({"layer_types": ["full_attention"] * 3}, r"\(4, num_hidden_layers\), got 3 entries"),
        (
            {"layer_types": ["full_attention"] * 3 + ["chunked_attention"]},
            r"layer_types\[3\] = 'chunked_attention' is not a kind kvsim models",
        ),
        ({"layer_types": ["mamba"] * 4}, r"layer_types\[0\] = 'mamba'"),
        # an entry that is a list or an object (unhashable: a TypeError escaped)
        ({"layer_types": [["full_attention"]] + ["full_attention"] * 3}, r"\[0\] = \['full_"),
        ({"layer_types": ["full_attention"] * 3 + [{"a": 1}]}, r"layer_types\[3\] = \{'a': 1\}"),
        # a state size given as JSON true: not 1 (Python's bool is an int)
        (
            {
                "layer_types": ["linear_attention"] * 4,
                "linear_conv_kernel_dim": True,
                "linear_num_key_heads": 16,
                "linear_key_head_dim": 128,
                "linear_num_value_heads": 32,
                "linear_value_head_dim": 128,
            },
            r"need linear_conv_kernel_dim \(an integer >= 1\), got True",
        ),
    ],
)
def test_a_layer_pattern_kvsim_cannot_read_is_refused(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        attention_from_hf(fields, 4, 2)


def test_a_window_turned_off_is_not_read() -> None:
    # use_sliding_window false: the file's sliding_window means nothing, whatever it holds
    assert attention_from_hf({"sliding_window": 0, "use_sliding_window": False}, 4, 2) == {}


def test_sliding_layers_without_a_window_are_full_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kinds = ["sliding_attention", "full_attention"] * 2
    with caplog.at_level(logging.WARNING, logger="kvsim.config.layers"):
        assert attention_from_hf({"layer_types": kinds}, 4, 2) == {}
    assert any("2 sliding_attention layers but no window" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "fields",
    [
        {"model_type": "gemma3_text", "sliding_window": None},
        {"model_type": "gemma2", "sliding_window": None},
        {"model_type": "gemma3_text"},  # (no window key at all)
        # gpt-oss slides every other layer (GptOssConfig); a null window made it full silently
        {"model_type": "gpt_oss", "sliding_window": None},
    ],
)
@pytest.mark.usefixtures("fresh_warnings")  # (said once a process: each case forgets)
def test_a_gemma_model_without_a_window_is_full_with_a_warning(
    fields: dict, caplog: pytest.LogCaptureFixture
) -> None:
    # transformers builds its pattern's sliding layers without a window: full attention; it ran
    # so without a word
    with caplog.at_level(logging.WARNING, logger="kvsim.config.layers"):
        assert attention_from_hf(fields, 6, 2) == {}
    assert "sliding layers have no window" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kvsim.config.layers"):
        attention_from_hf({"model_type": "llama", "sliding_window": None}, 6, 2)
    assert "no window" not in caplog.text  # (a model with no pattern: nothing to say)


def test_an_attention_table_beside_an_hf_config_overrides_key_by_key(tmp_path: Path) -> None:
    # the file's 52 sliding layers (62 - 62 // 6) keep; only the window is the table's. It
    # replaced the file's whole attention table: "num_sliding_layers and sliding_window_tokens
    # go together, got 0 and 512"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(GEMMA3_TEXT))
    given = {"hf_config": str(path), "num_params": 27_000_000_000}
    model = ModelSpec.model_validate({**given, "attention": {"sliding_window_tokens": 512}})
    assert model.attention is not None
    assert (model.attention.num_sliding_layers, model.attention.sliding_window_tokens) == (52, 512)


def test_hf_layer_errors_name_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**GEMMA3_TEXT, "sliding_window": 0}, indent=1))
    # json.dumps with indent 1: "{", then one key a line in order: sliding_window is line 6
    with pytest.raises(ValueError, match=r"config.json line 6: sliding_window must be"):
        ModelSpec.model_validate({"hf_config": str(path), "num_params": 27_000_000_000})


def test_a_multimodal_file_is_read_through_its_text_config(tmp_path: Path) -> None:
    # google/gemma-3-27b-it's layout: the language model under text_config (model_type
    # gemma3_text, no sliding_window_pattern: 6), torch_dtype at the top
    text = {
        k: v for k, v in GEMMA3_TEXT.items() if k not in ("sliding_window_pattern", "torch_dtype")
    }
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "gemma3",
                "torch_dtype": "bfloat16",
                "text_config": {**text, "model_type": "gemma3_text"},
                "vision_config": {"num_hidden_layers": 27},
            }
        )
    )
    model = ModelSpec.model_validate({"hf_config": str(path), "num_params": 27_000_000_000})
    assert (model.num_layers, model.num_kv_heads, model.head_dim) == (62, 16, 128)
    assert model.attention is not None
    assert (model.attention.num_sliding_layers, model.attention.sliding_window_tokens) == (52, 1024)


def test_hf_config_carries_the_window(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**GEMMA3_TEXT, "num_parameters": 27_000_000_000}))
    with caplog.at_level(logging.WARNING, logger="kvsim.config.hf"):
        model = ModelSpec.model_validate({"hf_config": str(path)})
    assert model.attention is not None
    assert (model.attention.num_sliding_layers, model.attention.sliding_window_tokens) == (52, 1024)
    assert any("on 52 of the layers" in r.getMessage() for r in caplog.records)
    # the groups turned off: the note says the layers run as full attention, not how to turn
    # them off
    caplog.clear()
    attention = {"hybrid_kv_cache": False}
    with caplog.at_level(logging.WARNING, logger="kvsim.config.hf"):
        ModelSpec.model_validate({"hf_config": str(path), "attention": attention})
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "on 52 of the layers, run as full attention" in said
    assert "free the blocks" not in said


@pytest.mark.usefixtures("fresh_warnings")
@pytest.mark.parametrize("value", [True, False])
def test_hybrid_kv_cache_on_a_model_without_sliding_or_state_layers_has_no_effect(
    value: bool, caplog: pytest.LogCaptureFixture
) -> None:
    attention = {"hybrid_kv_cache": value}
    with caplog.at_level(logging.WARNING, logger="kvsim.config.layers"):
        ModelSpec.model_validate({"preset": "llama-3.1-8b", "attention": attention})
    assert f"hybrid_kv_cache = {str(value).lower()} has no effect" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kvsim.config.layers"):  # (it has sliding ones)
        ModelSpec.model_validate({"preset": "gemma-3-27b", "attention": attention})
    assert "has no effect" not in caplog.text


def test_a_preset_table_field_is_overridden_key_by_key():
    model = ModelSpec.model_validate(
        {"preset": "gemma-3-27b", "attention": {"hybrid_kv_cache": False}}
    )
    assert model.attention is not None
    assert model.attention.num_sliding_layers == 52  # kept from the preset
    assert not model.attention.hybrid_kv_cache


def test_bad_patterns_name_the_field():
    with pytest.raises(ValueError, match=r"70 sliding and state layers exceed num_layers \(62\)"):
        ModelSpec.model_validate({"preset": "gemma-3-27b", "attention": {"num_sliding_layers": 70}})
    with pytest.raises(ValueError, match="sliding_window_tokens"):
        ModelSpec.model_validate(
            {"preset": "gemma-3-27b", "attention": {"sliding_window_tokens": 0}}
        )
    with pytest.raises(ValueError, match="pipeline_parallel_size: hybrid KV cache groups"):
        _ = SimConfig.model_validate(
            {
                "model": "gemma-3-27b",
                "gpu": "h100-80gb",
                "parallel": {"pipeline_parallel_size": 2},
                "scheduler": {"max_model_len": 8192},
            }
        ).kv_groups


def test_models_without_attention_keep_their_config_key():
    # the optional field is left out of the canonical form when unset: old hashes stand
    assert "attention" not in ModelSpec.model_validate("llama-3.1-8b").model_dump()


def test_other_policies_and_v0_treat_every_layer_as_full():
    base = {"model": "gemma-3-27b", "gpu": "h100-80gb", "scheduler": {"max_model_len": 8192}}
    v0 = SimConfig.model_validate(
        {**base, "scheduler": {"max_model_len": 8192, "engine": "vllm-v0"}}
    )
    slab = SimConfig.model_validate({**base, "cache": {"allocator": "first_fit"}})
    hybrid = SimConfig.model_validate(base)
    assert v0.kv_groups is None
    assert slab.kv_groups is None
    assert hybrid.kv_groups is not None
    assert v0.bytes_per_token == 62 * 8192  # every layer, every token


def test_v0_refuses_prefix_caching_on_a_model_whose_every_layer_slides():
    # vLLM v0's CacheConfig._verify_prefix_caching raises for a sliding window: Mistral-7B-v0.1
    # slides on all 32 layers; v1 caches its prefixes, and Gemma-3 (10 of 62 layers full) is
    # run by v0 as every layer full, with its prefixes cached
    base = {"gpu": "h100-80gb", "cache": {"enable_prefix_caching": True}}
    v0 = {"max_model_len": 8192, "engine": "vllm-v0"}
    with pytest.raises(ValueError, match=r"cache\.enable_prefix_caching: vLLM v0 does not cache"):
        SimConfig.model_validate({**base, "model": "mistral-7b-v0.1", "scheduler": v0})
    v1 = {**v0, "engine": "vllm-v1"}
    assert SimConfig.model_validate({**base, "model": "mistral-7b-v0.1", "scheduler": v1})
    assert SimConfig.model_validate({**base, "model": "gemma-3-27b", "scheduler": v0})
    off = {**base, "cache": {"enable_prefix_caching": False}}
    assert SimConfig.model_validate({**off, "model": "mistral-7b-v0.1", "scheduler": v0})


def test_the_longest_request_counts_every_groups_blocks():
    # Gemma-3-27B, 8 GiB of KV: 8 GiB // 1.25 MiB = 6,553 blocks, 6,552 usable (null block).
    # vLLM's need per group (max_memory_usage_bytes): full cdiv(L, 16); sliding at most
    # cdiv(1024 - 1 + 8192, 16) + 1 = 577 (a step's chunk and the window before it).
    # 7 groups grow together up to 6,552 // 7 = 936 blocks > 577, so the sliding ones stop at 577:
    # the full group gets 6,552 - 6 x 577 = 3,090 blocks = 49,440 tokens; a 131,072-token request
    # needs (8,192 + 3,462 + the null block) x 1.25 MiB = 14.228 GiB, "14.3" rounded up
    with pytest.raises(ValueError, match=r"needs 14\.3 GiB.*at most 49,440"):
        SimConfig.model_validate(
            {"model": "gemma-3-27b", "gpu": "h100-80gb", "cache": {"kv_cache_gib": 8.0}}
        )
    ok = SimConfig.model_validate(
        {
            "model": "gemma-3-27b",
            "gpu": "h100-80gb",
            "cache": {"kv_cache_gib": 8.0},
            "scheduler": {"max_model_len": 49_440},
        }
    )
    assert ok.kv_groups is not None


def test_offloading_hybrid_groups_is_refused_with_the_way_out():
    base = {"model": "gemma-3-27b", "gpu": "h100-80gb", "scheduler": {"max_model_len": 8192}}
    with pytest.raises(ValueError, match="hybrid_kv_cache = false to offload it"):
        SimConfig.model_validate({**base, "offload": {"kv_offloading_size": 16}})
    full = {**base, "model": {"preset": "gemma-3-27b", "attention": {"hybrid_kv_cache": False}}}
    assert (
        SimConfig.model_validate({**full, "offload": {"kv_offloading_size": 16}}).kv_groups is None
    )
    # state layers cannot run as full attention (refused, as vLLM refuses): no way out to offer
    qwen = {
        "model": "qwen3-next-80b-a3b",
        "gpu": "h200",
        "parallel": {"tensor_parallel_size": 2},
        "scheduler": {"max_model_len": 8192},
        "offload": {"kv_offloading_size": 16},
    }
    with pytest.raises(ValueError, match="state layers cannot run as full attention") as err:
        SimConfig.model_validate(qwen)
    assert "hybrid_kv_cache = false" not in str(err.value)


def test_a_hybrid_pool_too_small_names_a_budget_that_fits():
    # Qwen3-Next-80B-A3B on H200s with TP 4: 12 full-attention layers with 2 KV heads, so 1 per
    # GPU (replicated) x 256 dims x K and V x 2 bytes = 1,024 bytes per token and layer, 12,288
    # per token; a state layer's page per GPU is 1,097,728 / 4 = 274,432 bytes, so the block
    # grows to the first multiple of 16 tokens whose page holds it: 272 (272 x 1,024 = 278,528),
    # 272 x 12,288 = 3,342,336 bytes a block, shared by 1 full and 3 state groups.
    # A 262,144-token request: cdiv(262,144, 272) = 964 full-group blocks + 1 in each state group
    # + the null block = 968 blocks = 3,235,381,248 bytes = 3.0132 GiB, "3.02 GiB" rounded up.
    # 3.01 GiB holds 263,017 tokens = 966 blocks (< 968); 3.02 GiB 263,891 tokens = 970 blocks.
    spec = {
        "model": "qwen3-next-80b-a3b",
        "gpu": "h200",
        "parallel": {"tensor_parallel_size": 4},
        "scheduler": {"max_model_len": 262_144},
    }
    with pytest.raises(
        ValueError,
        match=r"needs 3\.02 GiB of KV .*the pool's 966 blocks of 272 tokens serve all 4 KV cache",
    ):
        SimConfig.model_validate({**spec, "cache": {"kv_cache_gib": 3.01}})
    fits = SimConfig.model_validate({**spec, "cache": {"kv_cache_gib": 3.02}})
    assert fits.kv_groups is not None
    assert fits.kv_groups.block_size_tokens == 272


def test_an_attention_table_without_sliding_or_state_layers_keeps_a_dense_model_dense(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An attention table of a dense model (empty, hybrid_kv_cache = true, or a kind_order
    alone) made Llama-3.1-8B a one-group hybrid pool, which refused CPU offloading; it is every
    layer full attention, as without the table, and a kind_order naming absent kinds warns."""
    import logging

    from kvsim.config import config_from_dict
    from tests.conftest import forget_warnings

    base = {"model": "llama-3.1-8b", "gpu": "h100-80gb", "offload": {"kv_offloading_size": 64}}
    forget_warnings(caplog)
    with caplog.at_level(logging.WARNING, logger="kvsim"):
        for attention in ({}, {"hybrid_kv_cache": True}, {"kind_order": ["state", "sliding"]}):
            model = {"preset": "llama-3.1-8b", "attention": attention}
            config = config_from_dict({**base, "model": model})
            assert config.kv_groups is None
            assert config.capacity_tokens == config_from_dict(base).capacity_tokens
    said = [r.getMessage() for r in caplog.records]
    assert [m for m in said if "['state', 'sliding'] name layers the model does not have" in m]


# the attention part of ai21labs/Jamba-v0.1's config.json (32 layers, one attention layer in
# 8 at offset 4) and of a Nemotron-H file (its pattern cut to 12 layers), with Mamba sizes
_ATTENTION_PART = {
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "max_position_embeddings": 262144,
    "torch_dtype": "bfloat16",
}
JAMBA = {
    **_ATTENTION_PART,
    "model_type": "jamba",
    "num_hidden_layers": 32,
    "attn_layer_period": 8,
    "attn_layer_offset": 4,
    "mamba_d_state": 16,
}
NEMOTRON_H = {
    **_ATTENTION_PART,
    "model_type": "nemotron_h",
    "num_hidden_layers": 12,
    "hybrid_override_pattern": "M-M-M*-M-M*-",
    "mamba_num_heads": 128,
}
FALCON_H1 = {**_ATTENTION_PART, "model_type": "falcon_h1", "num_hidden_layers": 4, "mamba_d_ssm": 1}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        # Jamba: layer i attends when i % 8 == 4: layers 4, 12, 20, 28; the other 28 Mamba
        (
            JAMBA,
            r"line 9: a jamba model whose attn_layer_period makes 4 attention and 28 Mamba "
            r"layers of 32 .*"
            r"num_layers = 32, attention = \{ num_state_layers = 28,",
        ),
        # Nemotron-H: "M-M-M*-M-M*-" has 5 M, 2 *, 5 -: 7 layers hold KV or state
        (
            NEMOTRON_H,
            r"line 9: a nemotron_h model whose hybrid_override_pattern makes 2 attention "
            r"\('\*'\), 5 Mamba \('M'\) and 5 layers holding neither .*"
            r"num_layers = 7, attention = \{ num_state_layers = 5,",
        ),
        (FALCON_H1, r"line 9: a falcon_h1 model with Mamba state \(mamba_d_ssm\)"),
    ],
)
def test_mamba_layers_kvsim_cannot_read_are_refused_not_counted_as_attention(
    tmp_path: Path, fields: dict, message: str
) -> None:
    # read as full attention, each Mamba layer would hold KV a token (8 to 13 times the KV);
    # json.dumps with indent 1: "{", then one key a line in order: the marking key is line 9
    path = tmp_path / "config.json"
    path.write_text(json.dumps(fields, indent=1))
    with pytest.raises(ValueError, match=r"config.json " + message):
        ModelSpec.model_validate({"hf_config": str(path), "num_params": 8_000_000_000})


def test_mamba_layers_the_model_table_describes_are_taken(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(JAMBA))
    attention = {"num_state_layers": 28, "state_bytes_per_layer": 1_000_000}
    model = ModelSpec.model_validate(
        {"hf_config": str(path), "num_params": 8_000_000_000, "attention": attention}
    )
    assert model.attention is not None
    assert (model.num_layers, model.attention.num_state_layers) == (32, 28)


@pytest.mark.parametrize(
    ("preset", "field", "message"),
    [
        # read as "no attention table", Qwen3-Next's 36 state layers would hold KV a token
        ("qwen3-next-80b-a3b", "attention", r"attention\.hybrid_kv_cache = false"),
        ("gemma-3-27b", "attention", r"null would drop gemma-3-27b's attention table"),
        ("qwen3-next-80b-a3b", "moe", r"null would drop .* moe table .*one by one"),
    ],
)
def test_a_presets_table_set_to_null_is_refused_not_dropped(
    preset: str, field: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ModelSpec.model_validate({"preset": preset, field: None})
