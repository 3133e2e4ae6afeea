"""A model with state layers runs where its per-request state is modelled, and says what kvsim
leaves out of vLLM 0.34's prefix caching for it."""

from __future__ import annotations

import logging

import pytest

from kvsim.base import say_once
from kvsim.config import SimConfig

QWEN3_NEXT = {
    "model": "qwen3-next-80b-a3b",
    "gpu": "h200",
    "parallel": {"tensor_parallel_size": 2},
    "scheduler": {"max_model_len": 8192},
}


@pytest.mark.parametrize(
    ("change", "field", "value"),
    [
        (
            {"scheduler": {"max_model_len": 8192, "engine": "vllm-v0"}},
            "scheduler.engine",
            "vllm-v0",
        ),
        ({"cache": {"allocator": "first_fit"}}, "cache.allocator", "first_fit"),
        ({"cache": {"allocator": "vattention"}}, "cache.allocator", "vattention"),
        ({"cache": {"allocator": "radix"}}, "cache.allocator", "radix"),
    ],
)
def test_state_layers_outside_hybrid_groups_are_refused(change: dict, field: str, value: str):
    # Qwen3-Next-80B-A3B: 48 layers, every 4th full attention, so 36 state layers whose state
    # only the hybrid groups hold (elsewhere the pool would count attention KV alone)
    with pytest.raises(ValueError, match=rf"{field}: .*36 state layers.*got '{value}'"):
        SimConfig.model_validate({**QWEN3_NEXT, **change})


def test_prefix_caching_with_state_layers_warns_that_nothing_hits(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(say_once, "SAID", set())  # (said once a process: maybe said before)
    with caplog.at_level(logging.WARNING, logger="kvsim"):
        SimConfig.model_validate({**QWEN3_NEXT, "cache": {"enable_prefix_caching": False}})
    assert "mamba_cache_mode" not in caplog.text
    with caplog.at_level(logging.WARNING, logger="kvsim"):
        SimConfig.model_validate(QWEN3_NEXT)  # vllm-v1: prefix caching on by default
    assert "no request hits the prefix cache" in caplog.text
    assert "mamba_cache_mode 'align'" in caplog.text
