"""``make test-vllm``: kvsim's reading of a ``config.json`` against vLLM's own.

For files with RoPE scalings of each kind (linear, dynamic, YaRN, llama3, Gemma-3's linear
factor that vLLM skips) and multi-query Falcon files, kvsim's model fields
(``kvsim.config.hf.model_fields_from_hf``) give the context ``max_model_len`` defaults to and
the KV heads; vLLM's convertor and ``_get_and_verify_max_len`` give its own
(``hf_config_driver.py``, in ``.venv-vllm``). Skipped unless ``.venv-vllm`` exists.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kvsim.config.hf import model_fields_from_hf
from tests.vllm.compare import vllm_python

pytestmark = pytest.mark.vllm

DRIVER = Path(__file__).with_name("hf_config_driver.py")
QWEN = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "num_hidden_layers": 28,
    "intermediate_size": 18944,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "torch_dtype": "bfloat16",
}
FALCON = {
    "model_type": "falcon",
    "hidden_size": 4544,
    "num_attention_heads": 71,
    "num_hidden_layers": 32,
    "max_position_embeddings": 2048,
    "multi_query": True,
    "new_decoder_architecture": False,
    "torch_dtype": "bfloat16",
}
CASES: dict[str, dict[str, Any]] = {
    "no-scaling": QWEN,
    "linear": {**QWEN, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "dynamic": {**QWEN, "rope_scaling": {"type": "dynamic", "factor": 2.0}},
    "yarn": {
        **QWEN,
        "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    },
    "llama3": {
        **QWEN,
        "model_type": "llama",
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192,
        },
    },
    "gemma3": {
        "model_type": "gemma3_text",
        "hidden_size": 5376,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "num_hidden_layers": 62,
        "max_position_embeddings": 131072,
        "sliding_window": 1024,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
        "torch_dtype": "bfloat16",
    },
    "falcon-7b": FALCON,
    "falcon-40b": {
        **FALCON,
        "hidden_size": 8192,
        "num_attention_heads": 128,
        "num_kv_heads": 8,
        "num_hidden_layers": 60,
        "new_decoder_architecture": True,
    },
}


def test_context_and_kv_heads_match_vllms_reading(tmp_path: Path) -> None:
    python = vllm_python()
    if python is None:
        pytest.skip(".venv-vllm is not built (scripts/vllm_venv.sh, or make test-vllm)")
    done = subprocess.run(
        [str(python), str(DRIVER)],
        input=json.dumps(list(CASES.values())),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    theirs = dict(zip(CASES, json.loads(done.stdout), strict=True))
    for name, case in CASES.items():
        path = tmp_path / name / "config.json"
        path.parent.mkdir()
        path.write_text(json.dumps(case))
        ours = model_fields_from_hf(str(path), num_params=1_000_000_000)
        assert ours["max_position_embeddings"] == theirs[name]["max_model_len"], name
        assert ours["num_kv_heads"] == theirs[name]["total_num_kv_heads"], name
