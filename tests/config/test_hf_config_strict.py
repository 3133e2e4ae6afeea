"""Hugging Face ``config.json`` files read as transformers builds them, and refused where JSON's
looseness would change their meaning: layer patterns a file leaves to its config class
(Qwen3-Next's ``full_attention_interval``, gpt-oss's alternation), a key given twice, a flag
written as a string. Every expected count is worked out by hand in the comments."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvsim.cli import app
from kvsim.config.hardware import ModelSpec
from kvsim.config.layers import kv_cache_groups

# Qwen/Qwen3-Next-80B-A3B-Instruct's config.json (the fields kvsim reads): the published file
# gives full_attention_interval 4 and no layer_types
QWEN3_NEXT: dict[str, Any] = {
    "architectures": ["Qwen3NextForCausalLM"],
    "model_type": "qwen3_next",
    "full_attention_interval": 4,
    "head_dim": 256,
    "hidden_size": 2048,
    "intermediate_size": 5120,
    "linear_conv_kernel_dim": 4,
    "linear_key_head_dim": 128,
    "linear_num_key_heads": 16,
    "linear_num_value_heads": 32,
    "linear_value_head_dim": 128,
    "max_position_embeddings": 262144,
    "moe_intermediate_size": 512,
    "num_attention_heads": 16,
    "num_experts": 512,
    "num_experts_per_tok": 10,
    "num_hidden_layers": 48,
    "num_key_value_heads": 2,
    "shared_expert_intermediate_size": 512,
    "torch_dtype": "bfloat16",
    "vocab_size": 151936,
}
# openai/gpt-oss-20b's config.json less its layer_types
GPT_OSS: dict[str, Any] = {
    "model_type": "gpt_oss",
    "head_dim": 64,
    "hidden_size": 2880,
    "intermediate_size": 2880,
    "max_position_embeddings": 131072,
    "num_attention_heads": 64,
    "num_experts_per_tok": 4,
    "num_hidden_layers": 24,
    "num_key_value_heads": 8,
    "num_local_experts": 32,
    "sliding_window": 128,
    "torch_dtype": "bfloat16",
    "vocab_size": 201088,
}
# Mistral-7B-v0.1's config.json (a window on every layer unless use_sliding_window is false)
MISTRAL: dict[str, Any] = {
    "model_type": "mistral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 32768,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "sliding_window": 4096,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 32000,
}
# the model table's num_params (kvsim does not count qwen3_next's parameters)
PARAMS = 80_000_000_000


def _write(tmp_path: Path, config: dict[str, Any] | str, folder: str = "model") -> Path:
    path = tmp_path / folder / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(config if isinstance(config, str) else json.dumps(config, indent=1))
    return path


def _model(tmp_path: Path, config: dict[str, Any] | str, folder: str = "model") -> ModelSpec:
    path = _write(tmp_path, config, folder)
    return ModelSpec.model_validate({"hf_config": str(path), "num_params": PARAMS})


def _refused(path: Path) -> str:
    """``kvsim run`` with the file as its model: exit 2 with one ``error:`` line and no
    traceback; returns the output, whitespace runs folded to one space."""
    args = ["run", "--no-progress", "--set", f"model.hf_config={path}"]
    result = CliRunner().invoke(app, [*args, "--set", "workload.num_requests=3"])
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert "Traceback" not in result.output
    return " ".join(result.output.split())


# --- layer patterns a file leaves to its transformers config class ---------------------------


def test_qwen3_next_without_layer_types_reads_its_interval(tmp_path: Path) -> None:
    # Qwen3NextConfig: layer i is full attention when (i + 1) % 4 == 0, i.e. layers 3, 7, ...,
    # 47: 48 / 4 = 12 full; the other 48 - 12 = 36 linear attention (state layers)
    model = _model(tmp_path, QWEN3_NEXT)
    assert model.attention is not None
    assert model.attention.num_state_layers == 36
    assert model.num_layers - model.attention.num_state_layers == 12
    # state per layer (Gated DeltaNet): conv (4 - 1) x (2 x 16 x 128 + 32 x 128) = 24,576
    # values + SSM 32 x 128 x 128 = 524,288 values = 548,864 x 2 bytes = 1,097,728 bytes
    assert model.attention.state_bytes_per_layer == 1_097_728
    # vLLM's groups: 12 full, 36 state; 36 >= 1.5 x 12 so g = 12: 36 / 12 = 3 state + 1 full,
    # the state groups first (layer 0 is linear attention: the layers' order)
    groups = kv_cache_groups(model.num_layers, model.attention, 4096, 16)
    assert groups.kinds == ("state", "state", "state", "full")
    assert groups.layers_per_group == 12


def test_a_byte_order_mark_before_the_json_is_read_past(tmp_path: Path) -> None:
    """A config.json saved with a UTF-8 byte-order mark was "invalid JSON (Unexpected UTF-8
    BOM)"; JSON forbids the mark, but it carries no content: the file reads as without it."""
    plain = _model(tmp_path, QWEN3_NEXT, "a")
    path = _write(tmp_path, QWEN3_NEXT, "a")
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert ModelSpec.model_validate({"hf_config": str(path), "num_params": PARAMS}) == plain


def test_qwen3_next_reads_the_same_with_and_without_layer_types(tmp_path: Path) -> None:
    # the explicit list written by hand: three linear layers, then a full one, 12 times
    explicit = {**QWEN3_NEXT, "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 12}
    implied = _model(tmp_path, QWEN3_NEXT, "a")
    assert implied == _model(tmp_path, explicit, "a")  # (same folder: same name)
    # and with no full_attention_interval either: Qwen3NextConfig's default is 4
    no_interval = {k: v for k, v in QWEN3_NEXT.items() if k != "full_attention_interval"}
    assert _model(tmp_path, no_interval, "a") == implied


@pytest.mark.parametrize(
    ("interval", "state_layers"),
    [
        (1, 0),  # (i + 1) % 1 == 0 for every i: 48 full, no state layer
        (2, 24),  # layers 1, 3, ..., 47 full: 24; 24 linear
        (5, 39),  # layers 4, 9, ..., 44 full: 48 // 5 = 9; 48 - 9 = 39 linear
        (48, 47),  # only layer 47 full
    ],
)
def test_qwen3_next_other_intervals(tmp_path: Path, interval: int, state_layers: int) -> None:
    model = _model(tmp_path, {**QWEN3_NEXT, "full_attention_interval": interval})
    got = model.attention.num_state_layers if model.attention is not None else 0
    assert got == state_layers


def test_an_interval_past_the_last_layer_is_refused(tmp_path: Path) -> None:
    # interval 64 > 48 layers: (i + 1) % 64 == 0 for no i < 48: no full-attention layer, which
    # kvsim cannot allocate for; indent 1: "{", the architectures list on lines 2-4,
    # model_type 5, full_attention_interval 6
    with pytest.raises(ValueError, match=r"config\.json line 6: full_attention_interval 64 > num_"):
        _model(tmp_path, {**QWEN3_NEXT, "full_attention_interval": 64})


@pytest.mark.parametrize(
    ("interval", "shown"), [(0, "got 0"), ("4", "got '4'"), (True, "got True"), (2.0, "got 2.0")]
)
def test_a_bad_interval_is_refused(tmp_path: Path, interval: Any, shown: str) -> None:
    with pytest.raises(
        ValueError, match=rf"config\.json line \d+: full_attention_interval .*{shown}"
    ):
        _model(tmp_path, {**QWEN3_NEXT, "full_attention_interval": interval})


def test_gpt_oss_without_layer_types_alternates(tmp_path: Path) -> None:
    # GptOssConfig: layer i slides when i is even: 0, 2, ..., 22 -> 12 sliding, 12 full
    model = _model(tmp_path, GPT_OSS, "g")
    assert model.attention is not None
    assert (model.attention.num_sliding_layers, model.attention.sliding_window_tokens) == (12, 128)
    explicit = {**GPT_OSS, "layer_types": ["sliding_attention", "full_attention"] * 12}
    assert model == _model(tmp_path, explicit, "g")
    # without a sliding_window key GptOssConfig's default, 128 tokens, applies
    no_window = {k: v for k, v in GPT_OSS.items() if k != "sliding_window"}
    assert _model(tmp_path, no_window, "g") == model


def test_gpt_oss_mxfp4_experts_are_counted_at_4_25_bits(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """gpt-oss-20b's file names its MXFP4 experts (quantization_config quant_method "mxfp4"):
    32 experts x 24 layers x 3 x 2,880 x 2,880 = 19,110,297,600 parameters at 4.25 bits =
    10,152,345,600 B. Of its 20,914,757,184 parameters (the table's, as the preset's) the other
    1,804,459,584 are bf16 = 3,608,919,168 B: 13,761,264,768 B of weights (12.8 GiB; the
    checkpoint's safetensors hold about 13.8 GB), not 41.8 GB. Nothing is said of the
    quantization, which is modelled."""
    mxfp4 = {**GPT_OSS, "quantization_config": {"quant_method": "mxfp4"}}
    given = {"num_params": 20_914_757_184}
    with caplog.at_level(logging.WARNING, logger="kvsim.config.hf"):
        model = ModelSpec.model_validate({"hf_config": str(_write(tmp_path, mxfp4, "q")), **given})
    assert model.moe is not None
    assert model.moe.expert_weight_bits == 4.25
    assert model.weight_bytes == 13_761_264_768
    assert not any("quantization_config" in r.getMessage() for r in caplog.records)
    plain = ModelSpec.model_validate({"hf_config": str(_write(tmp_path, GPT_OSS, "b")), **given})
    assert plain.weight_bytes == 2 * 20_914_757_184  # no quantization_config: all bf16
    assert ModelSpec.model_validate("gpt-oss-20b").weight_bytes == 13_761_264_768  # the preset
    # a dense model's file saying mxfp4: nothing for the 4.25 bits to apply to, so said so
    caplog.clear()
    dense = {**MISTRAL, "quantization_config": {"quant_method": "mxfp4"}}
    with caplog.at_level(logging.WARNING, logger="kvsim.config.hf"):
        ModelSpec.model_validate({"hf_config": str(_write(tmp_path, dense, "d"))})
    assert any("quantization_config" in r.getMessage() for r in caplog.records)


# --- a key given twice ------------------------------------------------------------------------


def test_a_key_given_twice_is_refused(tmp_path: Path) -> None:
    text = json.dumps(MISTRAL, indent=1)[:-2] + ',\n "num_hidden_layers": 40\n}'
    # indent 1: "{" on line 1, then a key a line: num_hidden_layers is the 6th key (line 7),
    # vocab_size the 11th (line 12), the added num_hidden_layers line 13
    expected = "model/config.json lines 7 and 13: key 'num_hidden_layers' appears more than once"
    with pytest.raises(ValueError, match=re.escape(expected)):
        _model(tmp_path, text)


def test_a_key_given_twice_inside_a_nested_object_is_refused(tmp_path: Path) -> None:
    text = json.dumps({**MISTRAL, "rope_scaling": {"factor": 8.0}})
    text = text.replace('{"factor": 8.0}', '{"factor": 8.0, "factor": 2.0}')
    with pytest.raises(ValueError, match="key 'factor' appears more than once in one object"):
        _model(tmp_path, text)


def test_one_key_in_two_objects_is_not_a_duplicate(tmp_path: Path) -> None:
    # a multimodal file: num_hidden_layers in text_config and in vision_config, once each
    text = {k: v for k, v in MISTRAL.items() if k != "torch_dtype"}
    config = {
        "torch_dtype": "bfloat16",
        "text_config": text,
        "vision_config": {"num_hidden_layers": 27},
    }
    assert _model(tmp_path, config).num_layers == 32


def test_a_key_given_twice_through_the_cli(tmp_path: Path) -> None:
    # /tmp/h1w/hf/dupkey.json's shape: 32 layers, then 40, on one line
    path = _write(
        tmp_path, '{"num_hidden_layers": 32, "num_attention_heads": 32, "num_hidden_layers": 40}'
    )
    line = _refused(path)
    assert str(path) in line
    assert "line 1: key 'num_hidden_layers' appears more than once in one object" in line


# --- flags must be JSON booleans --------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("use_sliding_window", "false", '"false"'),  # a string: not false
        ("use_sliding_window", "yes", '"yes"'),
        ("use_sliding_window", 0, "0"),
        ("use_sliding_window", None, "null"),
        ("tie_word_embeddings", "false", '"false"'),
        ("attention_bias", 1, "1"),
    ],
)
def test_a_flag_that_is_not_a_json_boolean_is_refused(
    tmp_path: Path, key: str, value: Any, shown: str
) -> None:
    config = {k: v for k, v in MISTRAL.items() if k != key}
    config[key] = value  # the last key: "{" on line 1, then a key a line
    line = 12 if key in MISTRAL else 13  # MISTRAL has 11 keys: the 11th or 12th key
    expected = (
        f"config.json line {line}: {key}: expected true or false (a JSON boolean, without "
        f"quotes), got {shown} ["  # (pydantic's "[type=value_error" follows the message)
    )
    with pytest.raises(ValueError, match=re.escape(expected)):
        _model(tmp_path, config)


def test_a_window_turned_off_by_a_json_false_is_off(tmp_path: Path) -> None:
    # the same file with the JSON boolean false: no window; true: 32 sliding layers of 4,096
    assert _model(tmp_path, {**MISTRAL, "use_sliding_window": False}).attention is None
    model = _model(tmp_path, {**MISTRAL, "use_sliding_window": True})
    assert model.attention is not None
    assert (model.attention.num_sliding_layers, model.attention.sliding_window_tokens) == (32, 4096)


def test_a_string_flag_through_the_cli(tmp_path: Path) -> None:
    # /tmp/h1w/hf/usefalse.json's shape: Mistral with "use_sliding_window": "false"
    path = _write(tmp_path, json.dumps({**MISTRAL, "use_sliding_window": "false"}))
    line = _refused(path)
    assert "config.json line 1: use_sliding_window: expected true or false" in line
    assert 'got "false"' in line


# --- a multimodal file's text_config ----------------------------------------------------------


def test_a_text_config_beside_top_level_fields_is_the_one_read(tmp_path: Path) -> None:
    # transformers' PretrainedConfig.get_text_config returns the text_config whenever a file
    # has one; kvsim read it only when the top level had no num_hidden_layers, so 32 layers
    # above a text_config of 8 ran as 32
    config = {**MISTRAL, "text_config": {**MISTRAL, "num_hidden_layers": 8}}
    assert _model(tmp_path, config).num_layers == 8


def test_a_text_config_that_is_not_an_object_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, {**MISTRAL, "text_config": "oops"})
    line = _refused(path)
    assert "text_config: expected a JSON object" in line
    assert 'got "oops"' in line


LLAMA_SMALL = {
    "model_type": "llama",
    "hidden_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "intermediate_size": 1024,
    "max_position_embeddings": 4096,
}


def test_a_moe_file_without_experts_per_token_names_the_key_not_num_params(tmp_path) -> None:
    """A MoE file without num_experts_per_tok said 'counting parameters needs
    num_experts_per_token ...; set model.num_params', though num_params was set: the routing
    (the step cost's expert coverage) needs it, under the file's own key name."""
    path = _write(tmp_path, {**LLAMA_SMALL, "num_local_experts": 8})
    with pytest.raises(ValueError, match="mixture-of-experts model's 8 experts need") as err:
        ModelSpec.model_validate({"hf_config": str(path), "num_params": PARAMS})
    assert "num_experts_per_tok, an integer >= 0, which it lacks" in str(err.value)
    assert "num_params" not in str(err.value)


def test_an_mla_file_without_its_rope_dim_is_named(tmp_path) -> None:
    """kv_lora_rank without qk_rope_head_dim read both head parts as 0: 'model.head_dim: Input
    should be greater than or equal to 1, got 0', a field the file does not have."""
    path = _write(tmp_path, {**LLAMA_SMALL, "model_type": "deepseek_v3", "kv_lora_rank": 512})
    text = _refused(path)
    assert "an MLA model (kv_lora_rank set) needs qk_rope_head_dim, which the file lacks" in text
