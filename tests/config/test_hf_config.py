"""Models read from Hugging Face ``config.json`` files.

The files are hand-written copies of the published configs' relevant fields (Hugging Face model
cards: meta-llama/Llama-3.1-8B, Qwen/Qwen2.5-7B-Instruct, mistralai/Mistral-7B-v0.1,
deepseek-ai/DeepSeek-V3). Every expected number is worked out by hand in the comments.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvsim.cli import app
from kvsim.config import ModelSpec, ParallelConfig, SimConfig, config_from_dict
from kvsim.config.hardware import kv_bytes_per_token_per_gpu

LLAMA_31_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"factor": 8.0, "rope_type": "llama3"},
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 128256,
}
QWEN25_7B: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_act": "silu",
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "max_position_embeddings": 32768,
    "max_window_layers": 28,
    "model_type": "qwen2",
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "rope_theta": 1000000.0,
    "sliding_window": 131072,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "use_sliding_window": False,
    "vocab_size": 152064,
}
MISTRAL_7B: dict[str, Any] = {
    "architectures": ["MistralForCausalLM"],
    "hidden_act": "silu",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "model_type": "mistral",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rope_theta": 10000.0,
    "sliding_window": 4096,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 32000,
}
DEEPSEEK_V3: dict[str, Any] = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 7168,
    "intermediate_size": 18432,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v3",
    "moe_intermediate_size": 2048,
    "moe_layer_freq": 1,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_attention_heads": 128,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 61,
    "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "quantization_config": {"fmt": "e4m3", "quant_method": "fp8"},
    "tie_word_embeddings": False,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "v_head_dim": 128,
    "vocab_size": 129280,
}


# google/gemma-3-27b-it's text_config (the fields kvsim reads); Gemma3TextConfig ties the
# embeddings by default
GEMMA3_27B: dict[str, Any] = {
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "hidden_size": 5376,
    "intermediate_size": 21504,
    "num_hidden_layers": 62,
    "num_attention_heads": 32,
    "num_key_value_heads": 16,
    "head_dim": 128,
    "vocab_size": 262208,
    "max_position_embeddings": 131072,
    "sliding_window": 1024,
    "sliding_window_pattern": 6,
    "torch_dtype": "bfloat16",
}


def _write(tmp_path: Path, config: dict[str, Any], folder: str = "model") -> Path:
    path = tmp_path / folder / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2))
    return path


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        # Llama-3.1-8B: head_dim = 4096 / 32 = 128;
        # bytes/token = 2 (K, V) * 32 layers * 8 KV heads * 128 * 2 bytes = 131,072.
        # params: embed 128,256 * 4,096 = 525,336,576, untied head the same; per layer
        # q 4096*4096 = 16,777,216 + k, v 4096*1024 = 4,194,304 each + o 16,777,216
        # + MLP 3 * 4096 * 14336 = 176,160,768 + norms 8,192 = 218,112,000; * 32 = 6,979,584,000;
        # + final norm 4,096: 2 * 525,336,576 + 6,979,584,000 + 4,096 = 8,030,261,248.
        (LLAMA_31_8B, (32, 32, 8, 128, 2, 131072, 131_072, 8_030_261_248)),
        # Qwen2.5-7B: head_dim = 3584 / 28 = 128; bytes/token = 2 * 28 * 4 * 128 * 2 = 57,344.
        # params: embed 152,064 * 3,584 = 544,997,376 (x2, untied); per layer q, o 3584^2 =
        # 12,845,056 each, k, v 3584 * 512 = 1,835,008 each, q/k/v biases 3584 + 512 + 512,
        # = 29,364,736; MLP 3 * 3584 * 18944 = 203,685,888; norms 7,168 -> 233,057,792 * 28 =
        # 6,525,618,176; total 1,089,994,752 + 6,525,618,176 + 3,584 = 7,615,616,512.
        (QWEN25_7B, (28, 28, 4, 128, 2, 32768, 57_344, 7_615_616_512)),
        # Mistral-7B-v0.1: layers as Llama-3.1-8B (218,112,000 each), vocab 32,000:
        # 2 * 32,000 * 4,096 = 262,144,000 + 6,979,584,000 + 4,096 = 7,241,732,096;
        # bytes/token = 2 * 32 * 8 * 128 * 2 = 131,072.
        (MISTRAL_7B, (32, 32, 8, 128, 2, 32768, 131_072, 7_241_732_096)),
        # DeepSeek-V3 (MLA): one latent of 512 + 64 values per token per layer, no K/V pair:
        # bytes/token = 61 * (512 + 64) * 2 = 70,272; KV heads 1; head_dim 128 + 64 = 192.
        # params: attention q_a 7168*1536 = 11,010,048 + norm 1,536 + q_b 1536*128*192 =
        # 37,748,736 + kv_a 7168*576 = 4,128,768 + norm 512 + kv_b 512*128*256 = 16,777,216
        # + o 128*128*7168 = 117,440,512 = 187,107,328; dense MLP 3*7168*18432 = 396,361,728;
        # MoE: 256 experts * 3*7168*2048 (44,040,192) = 11,274,289,152 + 1 shared 44,040,192
        # + router 256*7168 = 1,835,008 + bias 256 = 11,320,164,608; norms 14,336.
        # 3 dense layers 583,483,392 each = 1,750,450,176; 58 MoE layers 11,507,286,272 each =
        # 667,422,603,776; embed + head 2 * 129,280 * 7,168 = 1,853,358,080; final norm 7,168:
        # total 671,026,419,200 (DeepSeek: "671B total parameters", MTP layer left out).
        (DEEPSEEK_V3, (61, 128, 1, 192, 2, 163840, 70_272, 671_026_419_200)),
    ],
    ids=["llama-3.1-8b", "qwen2.5-7b", "mistral-7b", "deepseek-v3"],
)
def test_published_configs(tmp_path: Path, config: dict[str, Any], expected: tuple) -> None:
    model = ModelSpec.model_validate({"hf_config": str(_write(tmp_path, config))})
    # layers, heads, KV heads, head dim, dtype bytes, context, KV bytes per token, parameters
    assert (
        model.num_layers,
        model.num_attention_heads,
        model.num_kv_heads,
        model.head_dim,
        model.dtype_bytes,
        model.max_position_embeddings,
        model.bytes_per_token,
        model.num_params,
    ) == expected
    assert model.name == "model"  # the folder's name (no _name_or_path in the file)


def test_mla_is_not_split_by_tensor_parallelism(tmp_path: Path) -> None:
    model = ModelSpec.model_validate(str(_write(tmp_path, DEEPSEEK_V3)))  # a bare path works too
    assert model.is_mla
    tp8 = ParallelConfig(tensor_parallel_size=8)
    assert kv_bytes_per_token_per_gpu(model, tp8) == 70_272  # every rank holds the whole latent
    # pipeline parallelism still splits layers: cdiv(61, 2) = 31 layers * 576 * 2 bytes = 35,712
    pp2 = ParallelConfig(pipeline_parallel_size=2)
    assert kv_bytes_per_token_per_gpu(model, pp2) == 35_712
    # an fp8 KV cache: 61 * 576 * 1 byte = 35,136
    assert kv_bytes_per_token_per_gpu(model, ParallelConfig(), "fp8") == 35_136


def test_gqa_split_by_tensor_parallelism(tmp_path: Path) -> None:
    model = ModelSpec.model_validate({"hf_config": str(_write(tmp_path, LLAMA_31_8B))})
    # TP=2: 8 / 2 = 4 KV heads per GPU: 2 * 32 * 4 * 128 * 2 = 65,536 bytes
    assert kv_bytes_per_token_per_gpu(model, ParallelConfig(tensor_parallel_size=2)) == 65_536


def test_sim_config_from_hf_config(tmp_path: Path) -> None:
    path = _write(tmp_path, LLAMA_31_8B, folder="Llama-3.1-8B")
    config = config_from_dict(
        {"model": {"hf_config": str(path.parent), "num_params": 8_000_000_000}, "gpu": "h200"}
    )
    assert config.model.name == "Llama-3.1-8B"
    assert config.model.num_params == 8_000_000_000  # the table's key overrides the count
    assert config.bytes_per_token == 131_072
    # the canonical config does not need the file any more (Results.load reads it back)
    path.unlink()
    again = SimConfig.model_validate_json(config.canonical_json())
    assert again.model == config.model
    assert "kv_lora_rank" not in json.loads(config.canonical_json())["model"]


def test_dotted_override_replaces_the_default_model(tmp_path: Path) -> None:
    path = _write(tmp_path, QWEN25_7B)
    config = config_from_dict({"gpu": "h200"}, {"model.hf_config": str(path)})
    assert config.model.num_kv_heads == 4
    with pytest.raises(ValueError, match=r"give preset \('llama-3.1-8b'\) or hf_config"):
        config_from_dict({"model": "llama-3.1-8b"}, {"model.hf_config": str(path)})


def test_cli_runs_an_hf_model(tmp_path: Path) -> None:
    path = _write(tmp_path, LLAMA_31_8B)
    out = tmp_path / "out"
    args = ["run", "--no-progress", "--set", f"model.hf_config={path}", "--set", "gpu=h200"]
    args += ["--set", "cache.kv_cache_gib=1", "--set", "scheduler.max_model_len=4096"]
    args += ["--set", "workload.num_requests=20", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    saved = json.loads((out / "config.json").read_text())["model"]
    assert (saved["num_layers"], saved["num_kv_heads"], saved["head_dim"]) == (32, 8, 128)


def test_sliding_window_and_quantization_are_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="kvsim.config.hf"):
        ModelSpec.model_validate({"hf_config": str(_write(tmp_path, MISTRAL_7B, "m"))})
        ModelSpec.model_validate({"hf_config": str(_write(tmp_path, QWEN25_7B, "q"))})
        ModelSpec.model_validate({"hf_config": str(_write(tmp_path, DEEPSEEK_V3, "d"))})
    messages = [r.getMessage() for r in caplog.records]
    assert sum("sliding_window = 4096" in m for m in messages) == 1  # Mistral only
    assert not any("131072" in m for m in messages)  # Qwen's use_sliding_window is false
    assert sum("quantization_config" in m for m in messages) == 1  # DeepSeek-V3's fp8 weights


def test_sliding_window_note_names_the_table_window_over_the_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(_write(tmp_path, MISTRAL_7B))  # the file: a 4,096-token window on all 32 layers
    with caplog.at_level(logging.WARNING, logger="kvsim.config.hf"):
        ModelSpec.model_validate({"hf_config": path, "attention": {"sliding_window_tokens": 1024}})
    (message,) = [r.getMessage() for r in caplog.records if "sliding" in r.getMessage()]
    assert "sliding_window_tokens = 1024 (the file's sliding_window is 4096) on 32" in message
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kvsim.config.hf"):  # no sliding layer left
        table = {"num_sliding_layers": 0, "sliding_window_tokens": None}
        model = ModelSpec.model_validate({"hf_config": path, "attention": table})
    assert model.attention is not None
    assert model.attention.num_sliding_layers == 0
    assert not any("sliding" in r.getMessage() for r in caplog.records)


def test_float32_is_counted_at_two_bytes(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = str(_write(tmp_path, {**LLAMA_31_8B, "torch_dtype": "float32"}))
    with caplog.at_level(logging.WARNING, logger="kvsim.config.hf"):
        model = ModelSpec.model_validate({"hf_config": path})
    assert model.dtype_bytes == 2  # vLLM's dtype="auto" casts FP32 checkpoints to 16 bits
    assert any("float32" in r.getMessage() for r in caplog.records)
    assert ModelSpec.model_validate({"hf_config": path, "dtype_bytes": 4}).dtype_bytes == 4


def test_head_dim_given_explicitly(tmp_path: Path) -> None:
    # Mistral-Nemo style: hidden 5120, 32 heads, but head_dim 128 (not 5120 / 32 = 160)
    config = {**MISTRAL_7B, "hidden_size": 5120, "head_dim": 128, "num_parameters": 12_000}
    model = ModelSpec.model_validate({"hf_config": str(_write(tmp_path, config))})
    assert model.head_dim == 128
    assert model.num_params == 12_000  # the file's own count wins over the formula


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"num_hidden_layers": "32"},
            r"config\.json line 15: num_hidden_layers must be an integer from 1 to 100,000 .*, "
            r"got '32'",
        ),
        (
            {"num_hidden_layers": None},
            r"hf_config .*config\.json: missing field 'num_hidden_layers'",
        ),
        (
            {"hidden_size": 4100},
            r"config\.json line 9: hidden_size 4100 is not a multiple of num_attention_heads 32",
        ),
        (
            {"torch_dtype": "int3"},
            r"config\.json line 24: torch_dtype must be one of .*, got 'int3'",
        ),
        (
            {"model_type": "opt"},
            r"cannot count the parameters of model_type 'opt' .*; set model\.num_params",
        ),
    ],
)
def test_bad_config_names_file_line_field_value(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    config = {k: v for k, v in {**LLAMA_31_8B, **change}.items() if v is not None}
    path = tmp_path / "config.json"
    # json.dumps(indent=2): "{" on line 1, "architectures" list on lines 2-4, then one key per
    # line: hidden_size on line 9, num_hidden_layers 15, num_key_value_heads 16 (rope_scaling
    # spans lines 18-21), torch_dtype 24
    path.write_text(json.dumps(config, indent=2))
    with pytest.raises(ValueError, match=message):
        config_from_dict({"model": {"hf_config": str(path)}})


def test_bad_config_through_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_31_8B, "num_key_value_heads": 0}, indent=2))
    result = CliRunner().invoke(app, ["run", "--no-progress", "--set", f"model.hf_config={path}"])
    assert result.exit_code == 2
    assert "config.json line 16: num_key_value_heads must be an integer from 1 to 100,000" in (
        " ".join(result.output.split())
    )
    assert "got 0" in result.output
    assert "Traceback" not in result.output


def test_gemma_3_27b_parameters_counted_by_hand(tmp_path: Path) -> None:
    # tied embedding 262,208 * 5,376 = 1,409,630,208; per layer: q 5376 * 32 * 128 =
    # 22,020,096, k and v 5376 * 16 * 128 = 11,010,048 each, o 32 * 128 * 5376 = 22,020,096
    # (66,060,288), q/k norms 2 * 128 = 256, gated MLP 3 * 5376 * 21504 = 346,816,512, four
    # norms 4 * 5376 = 21,504: 412,898,560; * 62 = 25,599,710,720; + final norm 5,376:
    # 27,009,346,304 (the gemma-3-27b preset's 27,009,000,000 to 4 figures)
    model = ModelSpec.model_validate({"hf_config": str(_write(tmp_path, GEMMA3_27B))})
    assert model.num_params == 27_009_346_304
    assert model.attention is not None
    # 62 layers, every 6th global: 10 full, 52 sliding (window 1,024)
    assert (model.attention.num_sliding_layers, model.attention.sliding_window_tokens) == (
        52,
        1024,
    )


# Multi-query and MPT-style files (the fields vLLM reads; num_params given: no count for them)
STARCODER = {  # bigcode/starcoder
    "model_type": "gpt_bigcode",
    "n_embd": 6144,
    "n_head": 48,
    "n_layer": 40,
    "n_positions": 8192,
    "multi_query": True,
    "torch_dtype": "float16",
}
FALCON_7B = {  # tiiuae/falcon-7b
    "model_type": "falcon",
    "hidden_size": 4544,
    "num_attention_heads": 71,
    "num_hidden_layers": 32,
    "multi_query": True,
    "new_decoder_architecture": False,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 2048,
}
FALCON_40B = {  # tiiuae/falcon-40b: the new decoder reads num_kv_heads, multi_query aside
    **FALCON_7B,
    "hidden_size": 8192,
    "num_attention_heads": 128,
    "num_kv_heads": 8,
    "num_hidden_layers": 60,
    "new_decoder_architecture": True,
}
MPT_GQA = {  # an MPT file with grouped KV heads in attn_config
    "model_type": "mpt",
    "d_model": 4096,
    "n_heads": 32,
    "n_layers": 32,
    "max_seq_len": 8192,
    "attn_config": {"kv_n_heads": 8},
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        # 2 (K, V) x 40 layers x 1 head x 6144 / 48 = 128 dims x 2 bytes = 20,480
        (STARCODER, 20_480),
        # 2 x 32 layers x 1 head x 4544 / 71 = 64 dims x 2 bytes = 8,192
        (FALCON_7B, 8_192),
        # 2 x 60 layers x 8 heads x 8192 / 128 = 64 dims x 2 bytes = 122,880
        (FALCON_40B, 122_880),
        # 2 x 32 layers x 8 heads x 4096 / 32 = 128 dims x 2 bytes = 131,072
        (MPT_GQA, 131_072),
    ],
    ids=["starcoder", "falcon-7b", "falcon-40b", "mpt-gqa"],
)
def test_multi_query_and_attn_config_kv_heads(
    tmp_path: Path, config: dict[str, Any], expected: int
) -> None:
    model = {"hf_config": str(_write(tmp_path, config)), "num_params": 7_000_000_000}
    assert config_from_dict({"model": model}).bytes_per_token == expected


def test_multi_query_must_be_a_json_boolean(tmp_path: Path) -> None:
    path = _write(tmp_path, {**STARCODER, "multi_query": "true"})
    with pytest.raises(ValueError, match="multi_query: expected true or false"):
        config_from_dict({"model": {"hf_config": str(path), "num_params": 7_000_000_000}})


# vLLM 0.34.0's derivation (vllm/config/model.py, _get_and_verify_max_len): the file's context
# times a RoPE scaling's factor, except the scalings whose file gives the scaled context already
@pytest.mark.parametrize(
    ("rope", "expected"),
    [
        # linear and dynamic scale the file's context: 32,768 x 2 = 65,536
        ({"rope_type": "linear", "factor": 2.0}, 65_536),
        ({"type": "dynamic", "factor": 2.0}, 65_536),
        # YaRN, llama3 and longrope files give the scaled context: 32,768 as written (Qwen2.5's
        # 128K recipe, yarn x 4, needs --max-model-len; vLLM 0.34 no longer multiplies)
        ({"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 32_768),
        ({"rope_type": "llama3", "factor": 8.0}, 32_768),
        ({"rope_type": "longrope", "factor": 4.0}, 32_768),
        # a null factor is 1 (vLLM falls back to 1.0 with a warning)
        ({"rope_type": "linear", "factor": None}, 32_768),
        # one table a layer type (transformers v5's rope_parameters): the factor given
        (
            {
                "full_attention": {"rope_type": "linear", "factor": 2.0},
                "sliding_attention": {"rope_type": "default"},
            },
            65_536,
        ),
    ],
    ids=["linear", "dynamic", "yarn", "llama3", "longrope", "null-factor", "per-layer-type"],
)
def test_rope_scaling_sets_the_context_as_vllm_derives_it(
    tmp_path: Path, rope: dict[str, Any], expected: int
) -> None:
    path = _write(tmp_path, {**QWEN25_7B, "rope_scaling": rope})
    config = config_from_dict({"model": {"hf_config": str(path)}})
    assert config.model.max_position_embeddings == expected
    assert config.max_model_len == expected


def test_gemma3s_linear_rope_factor_is_not_applied_again(tmp_path: Path) -> None:
    # google/gemma-3-27b-it: max_position_embeddings 131,072 with a linear factor 8, which vLLM
    # skips for gemma3 ("its max_model_len (128K) is already scaled"); x 8 it would be 1 M
    path = _write(tmp_path, {**GEMMA3_27B, "rope_scaling": {"rope_type": "linear", "factor": 8.0}})
    assert ModelSpec.model_validate({"hf_config": str(path)}).max_position_embeddings == 131_072


@pytest.mark.parametrize(
    ("rope", "message"),
    [
        ("yarn", "rope_scaling: expected an object"),
        ({"type": "linear", "factor": "4"}, "rope_scaling factor must be a positive number"),
        ({"type": "linear", "factor": 0}, "rope_scaling factor must be a positive number"),
    ],
)
def test_a_rope_scaling_vllm_cannot_read_is_refused(
    tmp_path: Path, rope: Any, message: str
) -> None:
    path = _write(tmp_path, {**QWEN25_7B, "rope_scaling": rope})
    with pytest.raises(ValueError, match=message):
        config_from_dict({"model": {"hf_config": str(path)}})
