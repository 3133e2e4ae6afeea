"""Tiny experiments for sweep tests: OPT-13B on 2 GiB of KV (2,621 slots), fixed-length requests."""

from __future__ import annotations

from typing import Any

import pytest

import kvsim.study.point as point_mod
from kvsim.study.experiment import Experiment, parse_experiment

# 2 GiB / 800 KiB per token = 2,621 slots: holds one 2,048-token Max slab, several paged requests.
BASE: dict[str, Any] = {
    "model": "opt-13b",
    "gpu": "a100-40gb",
    "cache": {"kv_cache_gib": 2.0, "block_size_tokens": 16},
    "workload": {
        "lengths": "fixed",
        "fixed_prompt_tokens": 64,
        "fixed_output_tokens": 32,
        "num_requests": 12,
        "rate_per_s": 4.0,
    },
}


def tiny_experiment(name: str = "tiny", **extra: Any) -> Experiment:
    """2 allocators x 2 block sizes = 4 points unless ``extra`` replaces grid/zip."""
    data: dict[str, Any] = {
        "name": name,
        "base": BASE,
        "grid": {"cache.block_size_tokens": [8, 16]},
        "zip": [{"label": ["contiguous", "paged"], "cache.allocator": ["first_fit", "paged"]}],
    }
    data.update(extra)
    return parse_experiment(data, name=name)


@pytest.fixture
def tiny() -> Experiment:
    return tiny_experiment()


@pytest.fixture
def make_experiment() -> Any:
    """``tiny_experiment`` as a fixture (tests do not import conftest)."""
    return tiny_experiment


@pytest.fixture
def base_table() -> dict[str, Any]:
    return BASE


@pytest.fixture
def counted(monkeypatch):
    """Count in-process simulations (serial runs); ``calls`` lists their allocators."""
    calls: list[str] = []
    real = point_mod.simulate

    def wrapper(config, *args, **kwargs):
        calls.append(config.cache.allocator)
        return real(config, *args, **kwargs)

    monkeypatch.setattr(point_mod, "simulate", wrapper)
    return calls
