"""Error messages that pointed the wrong way under hostile input: a ``text_config`` field's line,
weights that do not fit blamed on a state size, and vAttention suggestions that the next check
refused. Every expected number is worked out by hand in the comments."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvsim.cli import app
from kvsim.config import config_from_dict
from kvsim.config.hf import model_fields_from_hf

# A Gemma-3-like multimodal file: the language model under text_config, and a vision_config
# before it that names some of the same keys. Line numbers counted by hand (line 1 is "{").
GEMMA3_LIKE = """\
{
  "architectures": ["Gemma3ForConditionalGeneration"],
  "model_type": "gemma3",
  "torch_dtype": "bfloat16",
  "vision_config": {
    "hidden_size": 1152,
    "intermediate_size": 4304,
    "num_attention_heads": 16,
    "num_hidden_layers": 27
  },
  "text_config": {
    "model_type": "gemma3_text",
    "head_dim": 256,
    "hidden_size": 2560,
    "intermediate_size": 10240,
    "max_position_embeddings": 131072,
    "num_attention_heads": 8,
    "num_hidden_layers": 34,
    "num_key_value_heads": 4,
    "torch_dtype": "float16",
    "vocab_size": 262208
  }
}
"""


@pytest.mark.parametrize(
    ("good", "bad", "expected"),
    [
        # line 17 in text_config; the old search found vision_config's key on line 8
        (
            '"num_attention_heads": 8',
            '"num_attention_heads": 0',
            "config.json line 17: num_attention_heads must be",
        ),
        # line 20 in text_config; the old search found the top-level torch_dtype on line 4
        (
            '"torch_dtype": "float16"',
            '"torch_dtype": "int4"',
            "config.json line 20: torch_dtype must be one of",
        ),
        # line 15, read by the parameter count (which named no line before); vision_config's
        # intermediate_size on line 7 is not the model's
        (
            '"intermediate_size": 10240',
            '"intermediate_size": -1',
            "config.json line 15: counting parameters needs intermediate_size",
        ),
    ],
)
def test_a_bad_text_config_field_names_its_own_line(
    tmp_path: Path, good: str, bad: str, expected: str
) -> None:
    assert GEMMA3_LIKE.count(good) == 1
    path = tmp_path / "config.json"
    path.write_text(GEMMA3_LIKE, encoding="utf-8")
    # unbroken, the file reads, with text_config's fields: 8 heads, 34 layers, 2-byte float16
    fields = model_fields_from_hf(path)
    assert (fields["num_attention_heads"], fields["num_layers"], fields["dtype_bytes"]) == (
        8,
        34,
        2,
    )
    path.write_text(GEMMA3_LIKE.replace(good, bad), encoding="utf-8")
    with pytest.raises(ValueError, match=r"^config\.json line") as err:
        model_fields_from_hf(path)
    assert str(err.value).startswith(expected), str(err.value)


# Qwen3-Next-80B-A3B (kvsim/data/models.toml): 81,300,000,000 parameters at 2 bytes =
# 162,600,000,000 bytes = 162.6e9 / 2^30 = 151.43 GiB of weights on one GPU. h100-80gb: 0.9 x
# 79.19 GiB (81,089 MiB) = 71.27 GiB usable, so the weights alone are short by 151.43 - 71.27 =
# 80.16 GiB, 80.2. TP 2: 75.7 GiB, still over 71.3; TP 4 (16 query heads and 2 KV heads split
# by 4): 37.9 GiB, leaving 71.27 - 37.86 - 2 (activation headroom) = 31.4 GiB for KV, which
# holds a 262,144-token request of 12 full layers x 2 (K, V) x 1 KV head x 256 x 2 bytes =
# 12,288 bytes a token (3 GiB). The state-size check used to fire first (a pool of 0 blocks)
# and blame the state.
QWEN3_NEXT_ON_H100: dict[str, Any] = {
    "model": "qwen3-next-80b-a3b",
    "gpu": "h100-80gb",
    "workload": {"num_requests": 5},
}


def test_weights_that_do_not_fit_are_named_before_the_state_size() -> None:
    with pytest.raises(ValueError, match="weights") as err:
        config_from_dict(QWEN3_NEXT_ON_H100)
    message = str(err.value)
    assert "state_bytes_per_layer" not in message
    assert message.startswith("cache.gpu_memory_utilization = 0.9 (qwen3-next-80b-a3b on h100")
    assert "0.9 x 79.2 GiB = 71.3 GiB usable per GPU; weights take 151.4 GiB" in message
    assert "the weights alone are short by 80.2 GiB" in message
    assert message.endswith("parallel.tensor_parallel_size = 4 fits")
    # the suggestion holds
    config_from_dict({**QWEN3_NEXT_ON_H100, "parallel": {"tensor_parallel_size": 4}})


def test_the_cli_says_the_weights_do_not_fit() -> None:
    args = ["run", "--set", "model=qwen3-next-80b-a3b", "--set", "gpu=h100-80gb"]
    result = CliRunner().invoke(app, [*args, "--set", "workload.num_requests=5"])
    assert result.exit_code == 2
    assert "the weights alone are short by 80.2 GiB" in result.output
    assert "Traceback" not in result.output


# llama-3.1-8b under vAttention: one tensor (K or V of a layer) holds 8 KV heads x 128 x 2 bytes
# = 2,048 bytes a token; 64 tensors (K and V of 32 layers) make 131,072 bytes a token. A 2 MiB
# page row is 64 x 2,097,152 = 134,217,728 bytes. A 100,000,000-byte pool holds 100,000,000 //
# 131,072 = 762 tokens but no 2 MiB row, so no max_model_len fits: the old message suggested
# 762, which the page-row check then refused. vAttention maps pages of 64, 128 and 256 KiB
# (its modified UVM driver) and 2 MiB (CUDA's virtual memory API; Prabhu et al., ASPLOS'25):
# the largest below 2 MiB is 256 KiB, whose row is 64 x 262,144 =
# 16,777,216 bytes: 762 x 131,072 = 99,876,864 bytes hold 5 rows (6 would be 100,663,296), of
# 262,144 // 2,048 = 128 tokens each: 640 tokens, fewer than max_model_len 2,048.
LLAMA_VATTENTION: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "gpu": "a100-40gb",
    "cache": {"allocator": "vattention"},
    "scheduler": {"max_model_len": 2048},
    "workload": {"num_requests": 5},
}
# The derived budget: 0.9 x 42,949,672,960 = 38,654,705,664 bytes usable, less 8,030,000,000 x 2
# = 16,060,000,000 of weights; a headroom of 38,654,705,664 - 16,060,000,000 - left leaves
# ``left`` bytes for KV.
USABLE_LESS_WEIGHTS = 38_654_705_664 - 16_060_000_000


def _with(base: dict[str, Any], cache: dict[str, Any], scheduler: dict[str, Any]) -> Any:
    return {
        **base,
        "cache": {**base["cache"], **cache},
        "scheduler": {**base["scheduler"], **scheduler},
    }


@pytest.mark.parametrize(
    "budget",
    [
        {"kv_cache_bytes": 100_000_000},
        {"activation_headroom_bytes": USABLE_LESS_WEIGHTS - 100_000_000},
    ],
    ids=["explicit", "derived"],
)
def test_a_vattention_pool_without_a_page_row_suggests_a_page_and_a_length_that_fit(
    budget: dict[str, Any],
) -> None:
    config = _with(LLAMA_VATTENTION, budget, {})
    with pytest.raises(ValueError, match="max_model_len") as err:
        config_from_dict(config)
    message = str(err.value)
    assert "no row of 64 pages of 2,097,152 bytes" in message
    page = re.search(r"lower cache\.page_size_bytes to ([\d,]+)", message)
    length = re.search(r"scheduler\.max_model_len to at most ([\d,]+)", message)
    assert page is not None, message
    assert length is not None, message
    suggested = int(page.group(1).replace(",", "")), int(length.group(1).replace(",", ""))
    assert suggested == (262_144, 640)
    config_from_dict(  # following the suggestion, the config validates
        _with(config, {"page_size_bytes": suggested[0]}, {"max_model_len": suggested[1]})
    )


def test_a_vattention_pool_too_small_for_any_page_row_asks_for_kv_only() -> None:
    # 3,000,000 bytes: 22 tokens of 131,072 bytes, but even a 64 KiB row is 64 x 65,536 =
    # 4,194,304 bytes; the old message suggested max_model_len 22
    config = _with(LLAMA_VATTENTION, {"kv_cache_bytes": 3_000_000}, {})
    with pytest.raises(ValueError, match="max_model_len") as err:
        config_from_dict(config)
    message = str(err.value)
    assert "lower scheduler.max_model_len" not in message
    assert "page_size_bytes to" not in message
    assert message.endswith("raise the KV budget")


def test_a_derived_vattention_pool_names_its_page_rows_not_blocks() -> None:
    # left 200,000,000 bytes: 200,000,000 // 131,072 = 1,525 slots, one 2 MiB row (134,217,728
    # bytes; two would be 268,435,456) of 2,097,152 // 2,048 = 1,024 tokens. max_model_len 1,500
    # needs 1,500 x 131,072 = 196,608,000 bytes <= 200,000,000, yet one row holds 1,024 tokens
    headroom = {"activation_headroom_bytes": USABLE_LESS_WEIGHTS - 200_000_000}
    config = _with(LLAMA_VATTENTION, headroom, {"max_model_len": 1500})
    with pytest.raises(ValueError, match="max_model_len") as err:
        config_from_dict(config)
    message = str(err.value)
    assert "its 1,525 slots hold one request of at most 1,024 tokens" in message
    assert "(whole rows of 64 pages, 1,024 tokens a row)" in message
    assert "blocks" not in message
    assert "lower scheduler.max_model_len to at most 1,024" in message
    config_from_dict(_with(config, {}, {"max_model_len": 1024}))


def test_a_headroom_that_does_not_fit_is_named_in_the_advice():
    from kvsim import config_from_dict

    # Llama-3.1-8B's 8.03 B parameters in 16 bits take 15.0 GiB of an A100-40GB's 0.9 x 40 =
    # 36 GiB; 35 GiB of activation headroom beside them is 14 GiB too much. Each GPU of a TP
    # group keeps the 35 GiB: at TP 16 the weights' 0.94 GiB leave 0.06 GiB, short of one
    # request's KV, so no TP size is offered; the advice names the headroom, and a KV budget
    # of one's own (checked against the whole GPU) still
    with pytest.raises(ValueError, match="weights plus activation headroom are short") as err:
        config_from_dict(
            {
                "model": "llama-3.1-8b",
                "gpu": "a100-40gb",
                "cache": {"activation_headroom_bytes": 35 << 30},
            }
        )
    # (15 + 35 GiB and one request's KV exceed the whole 40 GiB: a higher utilisation cannot
    # help; 15 GiB and that KV fit the usable 36 GiB, and the whole GPU)
    assert str(err.value).endswith(
        "; lower cache.activation_headroom_bytes, set cache.kv_cache_gib, or use a larger GPU"
    )
    # the weights alone short of 0.01 x 40 GiB: a KV budget of one's own validates (vLLM's
    # kv_cache_memory_bytes ignores gpu_memory_utilization): 15 + 17 GiB < 40 GiB
    cache = {"gpu_memory_utilization": 0.01, "kv_cache_gib": 17}
    config_from_dict({"model": "llama-3.1-8b", "gpu": "a100-40gb", "cache": cache})


def test_weights_larger_than_the_whole_gpu_are_told_of_less_headroom_at_a_tp_or_a_larger_gpu():
    from kvsim import config_from_dict

    # OPT-175B's 175 B parameters in 16 bits are 326 GiB, past an A100-40GB's whole 40 GiB: no
    # utilisation, headroom or KV budget of one's own makes room. TP splits its 96 heads by
    # powers of two up to 32, where 10.2 GiB of weights and 27.9 GiB (30e9 bytes) of headroom
    # exceed the 36 GiB usable: no TP size fits as configured. With less headroom TP 16 does:
    # 0.9 x 40 GiB - 350e9 B / 16 - one request's 2,048 / 16 + 1 (null) = 129 blocks of 16 at
    # 2 x 96 layers x 6 heads x 128 x 2 B = 294,912 B a token = 38,654,705,664 - 21,875,000,000
    # - 608,698,368 = 16,171,007,296 B (15.1 GiB) of headroom at most; TP 8's 43.75e9 B of
    # weights alone exceed the usable 38.65e9
    cache = {"activation_headroom_bytes": 30_000_000_000}
    with pytest.raises(ValueError, match="the weights alone are short by") as err:
        config_from_dict({"model": "opt-175b", "gpu": "a100-40gb", "cache": cache})
    assert str(err.value).endswith(
        "; lower cache.activation_headroom_bytes to at most 16,171,007,296 (15.1 GiB) and set "
        "parallel.tensor_parallel_size = 16 or use a larger GPU"
    )
