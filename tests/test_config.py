"""Specs: bytes per token by hand, KV budget derivation, validation messages, canonical keys."""

from __future__ import annotations

import pytest

from kvsim.config import GpuSpec, ModelSpec, SimConfig, config_from_dict, load_config
from kvsim.units import GiB, KiB, MiB


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("opt-13b", 2 * 40 * 40 * 128 * 2),  # 819,200 B = 800 KiB (paper)
        ("opt-66b", 2 * 64 * 72 * 128 * 2),
        ("opt-175b", 2 * 96 * 96 * 128 * 2),
        ("llama-2-7b", 2 * 32 * 32 * 128 * 2),  # 512 KiB (seed: "without GQA")
        ("llama-3.1-8b", 2 * 32 * 8 * 128 * 2),  # 128 KiB (seed)
        ("llama-3.1-70b", 2 * 80 * 8 * 128 * 2),
    ],
)
def test_bytes_per_token(name, expected):
    assert ModelSpec.model_validate(name).bytes_per_token == expected


def test_paper_and_seed_figures():
    assert ModelSpec.model_validate("opt-13b").bytes_per_token == 800 * KiB
    assert ModelSpec.model_validate("llama-3.1-8b").bytes_per_token == 128 * KiB
    # paper: 12 GiB of KV for OPT-13B is about 15.7K slots
    cfg = config_from_dict({"cache": {"kv_cache_gib": 12}})
    assert cfg.capacity_tokens == 12 * GiB // (800 * KiB) == 15_728
    # seed: 24 GiB at 128 KiB per token = 196,608 tokens
    cfg = config_from_dict({"model": "llama-3.1-8b", "cache": {"kv_cache_gib": 24}})
    assert cfg.capacity_tokens == 196_608
    # seed: 10 GiB / 128 KiB = 81,920 tokens
    cfg = config_from_dict({"model": "llama-3.1-8b", "cache": {"kv_cache_gib": 10}})
    assert cfg.capacity_tokens == 81_920


def test_kv_budget_derived_like_vllm():
    # 0.9 x 80 GiB - 8.03e9 params x 2 B - 2 GiB headroom
    cfg = config_from_dict(
        {"model": "llama-3.1-8b", "gpu": "a100-80gb", "cache": {"gpu_memory_utilization": 0.9}}
    )
    expected = int(0.9 * 80 * GiB - 8_030_000_000 * 2 - 2 * GiB)
    assert cfg.kv_cache_bytes == expected
    assert cfg.capacity_tokens == expected // (128 * KiB)


def test_user_defined_model_and_preset_override(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(
        '[model]\nname = "mine"\nnum_layers = 2\nnum_attention_heads = 4\nnum_kv_heads = 2\n'
        'head_dim = 64\nnum_params = 1000000\n\n[gpu]\npreset = "h100-80gb"\n'
        "hbm_bandwidth_bytes_per_s = 3.0e12\n\n[cache]\nkv_cache_bytes = 1048576\n"
        "[scheduler]\nmax_model_len = 256\n"
    )
    cfg = load_config(path)
    assert cfg.model.bytes_per_token == 2 * 2 * 2 * 64 * 2
    assert cfg.gpu.name == "h100-80gb"
    assert cfg.gpu.hbm_bandwidth_bytes_per_s == 3.0e12
    assert cfg.capacity_tokens == MiB // 1024


@pytest.mark.parametrize(
    ("overrides", "pattern"),
    [
        (
            {"cache.block_size_tokens": 0},
            r"cache\.block_size_tokens: .*greater than or equal to 1, got 0",
        ),
        (
            {"cache.allocator": "slabby"},
            r"cache\.allocator: .*unknown allocator 'slabby'; choose from",
        ),
        ({"cache.reservation": "lots"}, r"cache\.reservation: .*'max'.*got 'lots'"),
        ({"model": "gpt-5"}, r"model: .*unknown model preset 'gpt-5'; choose from \[.*'opt-13b'"),
        ({"scheduler.max_num_seqs": -3}, r"scheduler\.max_num_seqs: .*got -3"),
        (
            {"cache.gpu_memory_utilization": 1.5},
            r"cache\.gpu_memory_utilization: .*less than or equal to 1",
        ),
        ({"cache.kv_cache_gib": 0.001}, r"KV budget of \d+ bytes holds fewer than max_model_len"),
        ({"cache.bogus": 1}, r"cache\.bogus: Extra inputs are not permitted"),
        (
            {"scheduler.max_num_batched_tokens": 100},
            r"max_num_batched_tokens \(100\) must be >= max_model_len",
        ),
    ],
)
def test_bad_values_name_field_expected_and_got(overrides, pattern):
    with pytest.raises(ValueError, match=pattern):
        config_from_dict({}, overrides)


def test_invalid_toml_names_the_file(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[cache\nallocator = 'paged'")
    with pytest.raises(ValueError, match=r"bad\.toml: invalid TOML"):
        load_config(path)


def test_canonical_key_is_stable_and_sensitive():
    a = config_from_dict({"cache": {"block_size_tokens": 16}})
    b = config_from_dict({})  # 16 is the default: same canonical config
    c = config_from_dict({"cache": {"block_size_tokens": 32}})
    assert a.key() == b.key()
    assert a.canonical_json() == b.canonical_json()
    assert a.key() != c.key()
    assert SimConfig.model_validate_json(a.canonical_json()) == a


def test_gpu_presets():
    h200 = GpuSpec.model_validate("h200")
    assert h200.memory_bytes == 141_000_000_000
    assert h200.hbm_bandwidth_bytes_per_s == 4.8e12
    assert GpuSpec.model_validate("a100-40gb").memory_bytes == 40 * GiB
