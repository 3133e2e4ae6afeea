"""vLLM's own reading of Hugging Face ``config.json`` contents (runs inside ``.venv-vllm``).

Run as ``.venv-vllm/bin/python tests/vllm/hf_config_driver.py < cases.json``: a JSON list of
config dicts in (each with its ``model_type``), a JSON list out, each ``{"max_model_len": N,
"total_num_kv_heads": K}``. It imports vLLM and transformers only, never kvsim:
``test_vllm_hf_config.py`` compares kvsim's reading of the same files. Each dict becomes the
transformers config of its ``model_type`` (``AutoConfig.for_model``), patched as vLLM loads a
config (``patch_rope_parameters``), converted by vLLM's convertor of that type
(``MODEL_ARCH_CONFIG_CONVERTORS``), and its ``max_model_len`` derived with none given
(``vllm/config/model.py``, ``_get_and_verify_max_len``).
"""

from __future__ import annotations

import json
import sys

import vllm.config  # noqa: F401  (the config package first: the convertor module imports it)
from transformers import AutoConfig
from vllm.config.model import _get_and_verify_max_len
from vllm.transformers_utils.config import patch_rope_parameters
from vllm.transformers_utils.model_arch_config_convertor import (
    MODEL_ARCH_CONFIG_CONVERTORS,
    ModelArchConfigConvertorBase,
)


def main() -> None:
    out = []
    for case in json.load(sys.stdin):
        fields = dict(case)
        config = AutoConfig.for_model(fields.pop("model_type"), **fields)
        patch_rope_parameters(config)
        kind = MODEL_ARCH_CONFIG_CONVERTORS.get(config.model_type, ModelArchConfigConvertorBase)
        arch = kind(config, config.get_text_config()).convert()
        length = _get_and_verify_max_len(config, arch, None, None, False, None)
        out.append({"max_model_len": int(length), "total_num_kv_heads": arch.total_num_kv_heads})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
