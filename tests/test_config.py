"""Specs: bytes per token by hand, KV budget derivation, validation messages, canonical keys."""

from __future__ import annotations

import copy
import logging
from importlib import resources

import pytest

from kvsim.base.units import GiB, KiB, MiB
from kvsim.config import GpuSpec, ModelSpec, SimConfig, config_from_dict, load_config
from tests.conftest import forget_warnings


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
    llama = {"model": "llama-3.1-8b", "gpu": "a100-80gb"}
    cfg = config_from_dict({**llama, "cache": {"kv_cache_gib": 24}})
    assert cfg.capacity_tokens == 196_608
    # seed: 10 GiB / 128 KiB = 81,920 tokens (fewer than the 128K context: max_model_len set)
    cfg = config_from_dict(
        {**llama, "cache": {"kv_cache_gib": 10}, "scheduler": {"max_model_len": 8192}}
    )
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
        (  # (2,048 / 16 + the null block) x 16 x 800 KiB = 1.5747 GiB, "1.58" rounded up (a
            # minimum); 0.01 GiB holds 13 tokens
            {"cache.kv_cache_gib": 0.01},
            r"scheduler\.max_model_len: one request of 2,048 tokens needs 1\.58 GiB of KV but the "
            r"pool holds 13 tokens \(0\.01 GiB,",
        ),
        ({"cache.bogus": 1}, r"cache\.bogus: Extra inputs are not permitted"),
        (  # a misspelt key names the section's closest field
            {"workload.num_request": 100},
            r"workload\.num_request: Extra inputs are not permitted, got 100; did you mean "
            r"'workload\.num_requests'\?",
        ),
        ({"modle": "x"}, r"modle: Extra inputs are not permitted, got 'x'; did you mean 'model'\?"),
        (  # a message naming the value already is not followed by it again
            {"workload": "azure_conversation"},
            r"workload: no workload preset 'azure_conversation'; .*did you mean 'azure_conv'\?$",
        ),
        (
            {"scheduler.max_num_batched_tokens": 100, "scheduler.engine": "vllm-v0"},
            r"max_num_batched_tokens \(100\) must be >= max_model_len \(2048\) without chunked",
        ),
        (
            {"scheduler.max_num_batched_tokens": 100},
            r"max_num_batched_tokens \(100\) must be >= max_num_seqs \(256\)",
        ),
        ({"scheduler.engine": "vllm-v2"}, r"scheduler\.engine: .*'vllm-v1' or 'vllm-v0'"),
        (
            {"scheduler.engine": "vllm-v0", "scheduler.enable_chunked_prefill": True},
            r"scheduler\.enable_chunked_prefill: the vllm-v0 profile follows v0's",
        ),
        (
            {"cache.watermark": 0.01, "cache.allocator": "first_fit"},
            r"cache\.watermark: vLLM v1's watermark \(0.01\) is a share of a block pool's",
        ),
        ({"workload.beam_width": 2}, r"workload\.beam_width: beam search runs outside vLLM v1"),
        ({"cache.kv_cache_dtype": "fp4"}, r"cache\.kv_cache_dtype: .*'auto'.*got 'fp4'"),
        (
            {"parallel.tensor_parallel_size": 3},
            r"40 attention heads, not divisible by tensor_parallel_size = 3",
        ),
        (
            {"cache.allocator": "first_fit", "cache.enable_prefix_caching": True},
            r"cache\.enable_prefix_caching: prefix caching needs a paged pool, not 'first_fit'",
        ),
        ({"cache.kv_cache_gib": float("inf")}, r"cache\.kv_cache_gib: .*finite number"),
        ({"workload.time_scale": float("nan")}, r"workload\.time_scale: .*finite number"),
        ({"cache.kv_cache_gib": 1e300}, r"cache\.kv_cache_gib: .*less than or equal to"),
        (
            {"cache.kv_cache_gib": 10, "cache.kv_cache_bytes": 10**6},
            r"cache: set one of kv_cache_gib \(10\.0\) and kv_cache_bytes \(1000000\)",
        ),
        (
            {"cache.kv_cache_bytes": 1},
            r"cache\.kv_cache_bytes: the KV budget of 1 bytes per GPU holds 0 tokens",
        ),
        (  # (0.9 x 40 GiB - 2 x 12.853e9 B of OPT-13B weights - 2 GiB) / 819,200 B = 13,185
            {"cache.block_size_tokens": 100_000},
            r"cache\.block_size_tokens: 100,000-token blocks give the 13,185-slot KV pool 0",
        ),
        ({"cache.gpu_memory_utilization": 0}, r"gpu_memory_utilization: .*greater than 0, got 0"),
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
    # H100 and H200: the device total CUDA reports (what vLLM multiplies by
    # gpu_memory_utilization), not the datasheet's 80 GB / 141 GB. H100: 81,089 MiB (79.19 GiB);
    # H200: 150,109,880,320 B (139.80 GiB), the memory_bytes the H200 calibration run measured
    h200 = GpuSpec.model_validate("h200")
    assert h200.memory_bytes == 150_109_880_320
    hbm = resources.files("kvsim.data").joinpath("calibration/parts/h200/hbm.csv").read_text()
    assert "# source: measured\n" in hbm
    assert "# memory_bytes: 150109880320\n" in hbm
    assert h200.hbm_bandwidth_bytes_per_s == 4.8e12
    assert GpuSpec.model_validate("h100-80gb").memory_bytes == 81_089 * MiB == 85_027_979_264
    assert GpuSpec.model_validate("a100-40gb").memory_bytes == 40 * GiB


def test_engine_profile_defaults_follow_vllm():
    # vLLM v0.20.0 `vllm serve` defaults: 2,048 batched tokens / 256 seqs on an A100 (or any
    # GPU under 70 GiB), 8,192 / 1,024 on a larger one such as the H100; chunked prefill and
    # prefix caching on; v0.6.6: max(max_model_len, 2048) tokens, 256 seqs, watermark 0.01
    a100 = config_from_dict({}).engine_args
    assert (a100.max_num_batched_tokens, a100.max_num_seqs) == (2048, 256)
    assert (a100.enable_chunked_prefill, a100.enable_prefix_caching) == (True, True)
    assert (a100.watermark, a100.reserve_null_block) == (0.0, True)
    h100 = config_from_dict({"gpu": "h100-80gb"}).engine_args
    assert (h100.max_num_batched_tokens, h100.max_num_seqs) == (8192, 1024)
    # vLLM 0.34.0 get_batch_defaults: >= 160 GiB (B200/B300 class) 16,384 / 1,024; the GB200
    # preset's 186 GB is 173.2 GiB; the H200's 139.8 GiB stays at 8,192
    gb200 = config_from_dict({"gpu": "gb200", "scheduler": {"max_model_len": 8192}}).engine_args
    assert (gb200.max_num_batched_tokens, gb200.max_num_seqs) == (16384, 1024)
    h200 = config_from_dict({"gpu": "h200", "scheduler": {"max_model_len": 8192}}).engine_args
    assert h200.max_num_batched_tokens == 8192
    v0 = config_from_dict({"scheduler": {"engine": "vllm-v0"}}).engine_args
    assert (v0.max_num_batched_tokens, v0.max_num_seqs, v0.watermark) == (2048, 256, 0.01)
    flags = (v0.enable_chunked_prefill, v0.enable_prefix_caching, v0.reserve_null_block)
    assert flags == (False, False, False)


def test_chunked_prefill_lets_the_budget_be_below_max_model_len():
    # example 1 of the v1 issue: refused before chunked prefill existed
    cfg = config_from_dict(
        {}, {"scheduler.max_num_batched_tokens": 2048, "scheduler.max_model_len": 8192}
    )
    assert cfg.engine_args.max_num_batched_tokens == 2048
    assert cfg.max_model_len == 8192


def test_vllms_scheduler_config_checks(caplog):
    # vllm/config/scheduler.py: a threshold above max_model_len is refused (opt-13b's 2,048
    # tokens); a budget above max_num_seqs x max_model_len = 1 x 2,048 is warned; the v1
    # scheduler reads the threshold only with chunked prefill (scheduler.py, "if
    # enable_chunked_prefill and num_eligible_reqs > 1"), so without it there is no effect
    with pytest.raises(ValueError, match=r"threshold \(2049\) must be at most max_model_len"):
        config_from_dict({"scheduler": {"long_prefill_token_threshold": 2049}})
    assert config_from_dict({"scheduler": {"long_prefill_token_threshold": 2048}})
    forget_warnings(caplog)
    with caplog.at_level(logging.WARNING):
        config_from_dict({"scheduler": {"max_num_seqs": 1, "max_num_batched_tokens": 2049}})
        config_from_dict({"scheduler": {"max_num_seqs": 1, "max_num_batched_tokens": 2048}})
        config_from_dict(
            {"scheduler": {"enable_chunked_prefill": False, "long_prefill_token_threshold": 64}}
        )
        config_from_dict({"scheduler": {"long_prefill_token_threshold": 64}})  # chunked: read
    assert [r.getMessage() for r in caplog.records] == [
        "scheduler.max_num_batched_tokens (2,049) exceeds max_num_seqs x max_model_len "
        "(2,048), which vLLM warns may lead to unexpected behaviour: no step can fill the budget",
        "scheduler.long_prefill_token_threshold = 64 has no effect: vLLM caps prefill chunks at "
        "it only with chunked prefill, and scheduler.enable_chunked_prefill is false",
    ]


def test_max_model_len_defaults_to_the_model_context():
    cfg = config_from_dict({"model": "llama-3.1-8b", "gpu": "h100-80gb"})
    assert cfg.max_model_len == 131_072
    assert config_from_dict({}).max_model_len == 2048  # OPT-13B's context


@pytest.mark.parametrize(
    ("field", "value"), [("kv_cache_gib", 200), ("kv_cache_bytes", 200 * 2**30)]
)
def test_a_kv_budget_above_the_gpu_is_an_error_naming_both(field, value):
    # 200 GiB of KV plus 12.853e9 x 2 B = 23.9 GiB of weights on a 40 GiB A100; the error names
    # the budget field the user set
    with pytest.raises(
        ValueError,
        match=rf"^cache\.{field}: 200\.0 GiB of KV per GPU plus 23\.9 GiB of weights "
        r"exceed the 40\.0 GiB of one a100-40gb",
    ):
        config_from_dict({"cache": {field: value}})


def test_70b_needs_tensor_parallelism_and_the_error_says_what_is_short():
    # Llama-3.1-70B: 70.554e9 x 2 B = 131.4 GiB of weights; 0.9 x 79.19 GiB (81,089 MiB) =
    # 71.27 GiB usable: the weights alone are short by 60.1 GiB. TP 2 leaves 71.27 - 65.71 - 2 =
    # 3.56 GiB, less than a 131,072-token request's 20 GiB at 160 KiB/token per GPU; TP 4 leaves
    # 71.27 - 32.85 - 2 = 36.4 GiB against 10 GiB at 80 KiB/token: it fits
    with pytest.raises(
        ValueError,
        match=r"weights alone are short by 60\.1 GiB; "
        r"parallel\.tensor_parallel_size = 4 fits",
    ):
        config_from_dict({"model": "llama-3.1-70b", "gpu": "h100-80gb"})
    cfg = config_from_dict(
        {"model": "llama-3.1-70b", "gpu": "h100-80gb", "parallel": {"tensor_parallel_size": 4}}
    )
    per_gpu = 2 * 80 * (8 // 4) * 128 * 2  # 2 of 8 KV heads per GPU: 80 KiB per token
    assert cfg.bytes_per_token == per_gpu
    left = int(0.9 * 81_089 * MiB - 70_554_000_000 * 2 / 4 - 2 * GiB)  # 39,100,697,689 B
    assert abs(cfg.kv_cache_bytes - left) <= 1
    assert cfg.capacity_tokens == cfg.kv_cache_bytes // per_gpu


def test_when_only_the_headroom_rules_out_every_tp_the_error_says_lower_it_with_a_tp():
    # 75e9 B of activation headroom leave no TP size room for one 131,072-token request, so
    # the error only said "use a larger GPU". One request's pool: 131,072 / 16 blocks + the
    # null block = 131,088 slots. Without headroom, TP 2 leaves 0.9 x 81,089 MiB - 70.554e9 x 2 B
    # / 2 - 160 KiB x 131,088 = 76,525,181,337.6 - 70,554,000,000 - 21,477,457,920 < 0; TP 4
    # leaves 76,525,181,337.6 - 35,277,000,000 - 80 KiB x 131,088 (10,738,728,960) =
    # 30,509,452,377.6 B, at most 30,509,452,377 (28.4 GiB) for headroom
    with pytest.raises(
        ValueError,
        match=r"weights alone are short by 60\.1 GiB; lower cache\.activation_headroom_bytes to "
        r"at most 30,509,452,377 \(28\.4 GiB\) and set parallel\.tensor_parallel_size = 4 "
        r"or use a larger GPU$",
    ):
        config_from_dict(
            {"model": "llama-3.1-70b", "gpu": "h100-80gb"},
            {"cache.activation_headroom_bytes": 75_000_000_000},
        )
    advised = config_from_dict(  # the advice taken: one whole request's pool is left
        {"model": "llama-3.1-70b", "gpu": "h100-80gb"},
        {"cache.activation_headroom_bytes": 30_509_452_377, "parallel.tensor_parallel_size": 4},
    )
    assert advised.capacity_tokens == 131_088  # int(10,738,728,960.6 B) // 80 KiB
    # a vAttention pool's page row holds more tokens at a larger TP, so one request's pool is
    # not the same at every size: no such advice (following one failed, at TP 4 for 100,000)
    with pytest.raises(
        ValueError, match=r"weights alone are short by 60\.1 GiB; use a larger GPU$"
    ):
        config_from_dict(
            {"model": "llama-3.1-70b", "gpu": "h100-80gb"},
            {
                "cache.allocator": "vattention",
                "scheduler.max_model_len": 100_000,
                "cache.activation_headroom_bytes": 75_000_000_000,
            },
        )


def test_a_hybrid_models_budget_error_counts_its_groups_pool():
    # Gemma-3-27B: 10 full and 52 sliding layers (window 1,024), 16 KV heads of 128, bf16: a
    # layer's token is 2 x 16 x 128 x 2 = 8,192 B, a slot (one token of a group of 10 layers)
    # 81,920 B, 7 groups (1 full, 6 sliding). One 131,072-token request holds 131,072 / 16 =
    # 8,192 full blocks and, in each sliding group, vLLM's SlidingWindowSpec bound of
    # cdiv(1,023 + 2,048 batched, 16) + 1 = 193 blocks; with the null block (8,192 + 6 x 193 +
    # 1) x 16 = 149,616 slots = 12,256,542,720 B. At 0.76 x 80 GiB = 65,283,502,899 B usable,
    # the 54,018,000,000 B of weights and 2 GiB of headroom leave 9,118,019,251 B: short by
    # 3,138,523,469 B = 2.92 GiB (it said 1.51 GiB: 131,072 slots, no group's blocks). TP 2
    # (8 heads a GPU: a slot is 40,960 B) leaves 65,283,502,899 - 27,009,000,000 -
    # 149,616 x 40,960 = 32,146,231,539 B for headroom: TP 2 fits (it said 4: pricing each of
    # the 149,616 slots at all 62 layers' 253,952 B, 37,995,282,432 B, left 279,220,467 B,
    # under the 2 GiB of headroom)
    gemma = {"model": "gemma-3-27b", "gpu": "a100-80gb"}
    asked = {"cache.gpu_memory_utilization": 0.76, "scheduler.max_model_len": 131_072}
    with pytest.raises(
        ValueError,
        match=r"leaving 8\.49 GiB for KV: KV is short by 2\.92 GiB for one max_model_len = "
        r"131,072 request; .*; parallel\.tensor_parallel_size = 2 fits$",
    ):
        config_from_dict(gemma, asked)
    advised = config_from_dict(gemma, {**asked, "parallel.tensor_parallel_size": 2})
    assert advised.bytes_per_token == 40_960
    assert advised.kv_cache_bytes // 40_960 >= 149_616


# first_fit slabs of the trained context (full_context), whatever the 8,192 max_model_len
FULL_CONTEXT_8K = {
    "cache.allocator": "first_fit",
    "cache.reservation": "full_context",
    "scheduler.max_model_len": 8192,
}


def test_a_slab_reservations_tp_advice_counts_its_largest_slab():
    # Llama-3.1-70B, first_fit with 'full_context' at max_model_len 8,192: every request
    # reserves the trained context, 131,072 slots. TP 2 leaves 0.9 x 81,089 MiB - 70,554,000,000
    # - 2 GiB = 3,823,697,689.6 B, 23,337 slots of 160 KiB: one 8,192-token request, not the
    # slab; TP 4 leaves 76,525,181,337.6 - 35,277,000,000 - 2,147,483,648 = 39,100,697,689.6 B,
    # 477,303 slots of 80 KiB: the slab fits. The advice said TP 2, which the pool's shape
    # refuses. (At TP 1 the weights alone, 141,108,000,000 B, are short by 64,582,818,662.4 B =
    # 60.1 GiB.)
    slab = {"model": "llama-3.1-70b", "gpu": "h100-80gb"}
    asked = FULL_CONTEXT_8K
    with pytest.raises(ValueError, match=r"short by 60\.1 GiB; parallel\.tensor_parallel_size = 4"):
        config_from_dict(slab, asked)
    with pytest.raises(ValueError, match=r"cache\.reservation: .* 23,337-slot pool"):
        config_from_dict(slab, {**asked, "parallel.tensor_parallel_size": 2})
    assert config_from_dict(
        slab, {**asked, "parallel.tensor_parallel_size": 4}
    ).capacity_tokens == (39_100_697_689 // 81_920)


def test_a_full_context_slabs_budget_error_counts_the_slab_and_shortens_only_with_another():
    # Llama-3.1-8B, first_fit 'full_context', max_model_len 8,192, 0.44 of an A100-40GB:
    # 0.44 x 42,949,672,960 = 18,897,856,102 B less 16,060,000,000 of weights and 2 GiB of
    # headroom leaves 690,372,454 B (0.643 GiB). Every request reserves the trained context,
    # 131,072 x 131,072 B = 16 GiB: short by 16,489,496,730 B = 15.4 GiB (it said 0.357 GiB,
    # for 8,192 tokens, and advised max_model_len 5,267, which leaves the slab as it is). TP 2
    # leaves 18,897,856,102 - 8,030,000,000 - 8 GiB (64 KiB a token) = 2,277,921,510 B, more
    # than the 2 GiB of headroom: it fits
    slab = {"model": "llama-3.1-8b", "gpu": "a100-40gb"}
    asked = FULL_CONTEXT_8K
    with pytest.raises(ValueError, match="gpu_memory_utilization") as derived:
        config_from_dict(slab, {**asked, "cache.gpu_memory_utilization": 0.44})
    message = str(derived.value)
    assert (
        "leaving 0.643 GiB for KV: KV is short by 15.4 GiB for one max_model_len = 8,192 "
        "request (its 'full_context' slab: 131,072 tokens); choose another cache.reservation"
    ) in message  # (a budget of one's own: the options after it, here TP 2)
    # another reservation's slab is max_model_len, so it must fit the 0.643 GiB too:
    # 690,372,454 // 131,072 = 5,267 slots (it advised a shorter context alone, which leaves
    # the slab as it is)
    assert message.count("lower scheduler.max_model_len") == 1
    assert "choose another cache.reservation" in message.split("lower scheduler.max_model_len")[0]
    assert "and lower scheduler.max_model_len to at most 5,267;" in message
    assert str(derived.value).endswith("parallel.tensor_parallel_size = 2 fits")
    config_from_dict(
        slab,
        {**asked, "cache.gpu_memory_utilization": 0.44, "parallel.tensor_parallel_size": 2},
    )
    # an explicit 0.5 GiB (4,096 slots) likewise: a shorter context would not shrink the slab
    with pytest.raises(ValueError, match="max_model_len") as explicit:
        config_from_dict(slab, {**asked, "cache.kv_cache_gib": 0.5})
    assert "pool holds 4,096 tokens" in str(explicit.value)
    assert "8,192 tokens (its 'full_context' slab: 131,072 tokens) needs 16.0 GiB" in str(
        explicit.value
    )  # 131,072 x 131,072 B
    assert str(explicit.value).endswith(
        "whatever max_model_len) and lower scheduler.max_model_len to at most 4,096"
    )


def test_buddys_advice_is_a_power_of_two_context_and_a_budget_that_fits_the_gpu():
    # Gemma-3-27B at TP 2 under buddy (every layer full attention: 62 x 8 heads x 128 x 2 x 2 B
    # = 253,952 B a token) on an A100-40GB: 0.9 x 40 GiB - 27,009,000,000 of weights - 2 GiB
    # = 9,498,222,016 B, 37,401 slots. Buddy's chunk for max_model_len is a power of two, so
    # the longest context that fits is 32,768 (it advised 37,401, which buddy then refused)
    gemma = {"model": "gemma-3-27b", "gpu": "a100-40gb"}
    buddy = {
        "parallel.tensor_parallel_size": 2,
        "cache.allocator": "buddy",
        "cache.reservation": "max",
    }
    with pytest.raises(ValueError, match=r"lower scheduler\.max_model_len to at most 32,768;"):
        config_from_dict(gemma, buddy)
    assert config_from_dict(
        gemma, {**buddy, "scheduler.max_model_len": 32_768}
    ).capacity_tokens == (9_498_222_016 // 253_952)
    # at 37,401 the chunk is 65,536 slots, 16,642,998,272 B (15.5 GiB): beside 25.2 GiB of
    # weights on a 40 GiB GPU no budget holds it, so none is advised (it said "raise the KV
    # budget to 15.5 GiB", which the GPU then refused)
    with pytest.raises(ValueError, match="65,536-slot chunk") as err:
        config_from_dict(gemma, {**buddy, "scheduler.max_model_len": 37_401})
    assert str(err.value).endswith(
        "lower scheduler.max_model_len to 32,768 (a pool of 65,536 slots, 15.5 GiB, does not "
        "fit beside the 25.2 GiB of weights on one a100-40gb)"
    )


def test_buddy_refuses_a_trained_context_chunk_it_never_carves_whatever_the_budget():
    # Buddy's chunks reach next_power_of_2(8,192) = 8,192 slots; 'full_context' asks for the
    # trained context's 131,072: no pool holds it, at TP 1 (which said "use a larger GPU") or
    # at TP 4 (which said "lower max_model_len to 8,192": it was 8,192)
    buddy = {
        "cache.allocator": "buddy",
        "cache.reservation": "full_context",
        "scheduler.max_model_len": 8192,
    }
    for tp in (1, 4):
        with pytest.raises(ValueError, match=r"^cache\.reservation: ") as err:
            config_from_dict(
                {"model": "llama-3.1-70b", "gpu": "h100-80gb"},
                {**buddy, "parallel.tensor_parallel_size": tp},
            )
        message = str(err.value)
        assert "a 131,072-slot power-of-two chunk" in message
        assert "next_power_of_2(max_model_len) = 8,192 slots" in message
        assert message.endswith("raise scheduler.max_model_len to 131,072")
        assert "larger GPU" not in message


def test_buddys_full_context_advice_lowers_max_model_len_only_with_another_reservation():
    # OPT-13B (819,200 B a token) with a trained context of 3,000 and max_model_len 2,100: the
    # 3,000-token slab is a 4,096-slot chunk, within buddy's reach (next_power_of_2(2,100) =
    # 4,096), but a 3,500-slot pool's largest chunk is 2,048. Lowering max_model_len alone
    # leaves the slab as it is (it said "lower scheduler.max_model_len to 2,048"); with another
    # reservation the chunk is max_model_len's, which must then come down to 2,048. Raising the
    # budget to the chunk, 4,096 x 819,200 = 3,355,443,200 B = 3.125 GiB, shown at three
    # digits: 3.12
    with pytest.raises(ValueError, match=r"4,096-slot chunk.*largest chunk of the 3,500-slot") as e:
        config_from_dict(
            {},
            {
                "model.max_position_embeddings": 3000,
                "scheduler.max_model_len": 2100,
                "cache.allocator": "buddy",
                "cache.reservation": "full_context",
                "cache.kv_cache_bytes": 3500 * 819_200,
            },
        )
    assert str(e.value).endswith(
        "; choose another reservation and lower scheduler.max_model_len to 2,048 or raise the KV "
        "budget to 4,096 slots (3.12 GiB) or more"
    )


@pytest.mark.parametrize(
    ("parallel", "dtype", "expected"),
    [
        ({"tensor_parallel_size": 2}, "auto", 2 * 80 * 4 * 128 * 2),
        ({"tensor_parallel_size": 16}, "auto", 2 * 80 * 1 * 128 * 2),  # 8 heads replicated
        ({"pipeline_parallel_size": 2}, "auto", 2 * 40 * 8 * 128 * 2),
        ({"pipeline_parallel_size": 3}, "auto", 2 * 27 * 8 * 128 * 2),  # stages of 27/27/26
        ({}, "fp8", 2 * 80 * 8 * 128 * 1),
    ],
)
def test_kv_bytes_per_token_per_gpu(parallel, dtype, expected):
    from kvsim.config import ParallelConfig, kv_bytes_per_token_per_gpu

    model = ModelSpec.model_validate("llama-3.1-70b")
    assert kv_bytes_per_token_per_gpu(model, ParallelConfig(**parallel), dtype) == expected


def test_a_dotted_override_edits_the_default_preset():
    # no model table: model.num_layers overrides OPT-13B's 40 layers (half the KV per token)
    cfg = config_from_dict({}, {"model.num_layers": 20})
    assert cfg.model.bytes_per_token == 2 * 20 * 40 * 128 * 2
    assert cfg.model.num_params == ModelSpec.model_validate("opt-13b").num_params


def test_max_model_len_above_the_context_is_a_warning(caplog, monkeypatch):
    from kvsim.base import say_once

    # (said once a process: another test in this worker may have said it first)
    monkeypatch.setattr(say_once, "SAID", set())
    cfg = config_from_dict({}, {"scheduler.max_model_len": 4096})
    assert cfg.max_model_len == 4096
    assert "exceeds opt-13b's trained context of 2,048 tokens" in caplog.text


def test_kv_cache_gb_is_decimal_gigabytes() -> None:
    # The seed: "50 GB ~ 23,800 blocks" of 16 tokens at 128 KiB/token (decimal gigabytes):
    # 50e9 / 131,072 = 381,469.7 -> 381,469 slots -> 23,841 blocks (50 GiB would give 25,600).
    config = config_from_dict(
        {"model": "llama-3.1-8b", "gpu": "h100-80gb", "cache": {"kv_cache_gb": 50}}
    )
    assert config.cache.kv_cache_bytes == 50 * 10**9
    assert config.capacity_tokens // 16 == 23_841
    with pytest.raises(ValueError, match=r"kv_cache_gb .* and kv_cache_gib, not both"):
        config_from_dict({"cache": {"kv_cache_gb": 10, "kv_cache_gib": 10}})
    for bad in (float("nan"), float("inf"), 0, "50GB"):
        with pytest.raises(ValueError, match="kv_cache_gb: expected a number of GB"):
            config_from_dict({"cache": {"kv_cache_gb": bad}})


def test_a_bad_value_in_a_config_file_names_the_file(tmp_path):
    from kvsim.config import load_config

    path = tmp_path / "c.toml"
    path.write_text("[cache]\nblock_size_tokens = 0\n")
    with pytest.raises(ValueError, match="block_size_tokens") as err:
        load_config(path)
    assert str(err.value).startswith(f"{path} line 2: cache.block_size_tokens:")
    with pytest.raises(ValueError, match="block_size_tokens") as err:  # the override's fault
        load_config(tmp_path / "c.toml", {"cache.block_size_tokens": -1})
    assert str(err.value).startswith(
        f"{path} with --set cache.block_size_tokens=-1: cache.block_size_tokens:"
    )
    with pytest.raises(ValueError, match="block_size_tokens") as err:  # the file's, --set aside
        load_config(tmp_path / "c.toml", {"workload.num_requests": 3})
    assert str(err.value).startswith(f"{path} line 2: cache.block_size_tokens:")


def test_toml_key_line_finds_where_a_field_is_set() -> None:
    from kvsim.base.textfile import toml_key_line

    text = (
        'model = "llama-3.1-8b"\n'  # 1
        "\n"  # 2
        "[cache]\n"  # 3
        "kv_cache_gib = 8\n"  # 4
        'block_size_tokens = 16  # "x = 1" in a comment\n'  # 5
        "[ workload ]\n"  # 6
        "num_requests = 3\n"  # 7
        "scheduler = { max_num_seqs = 0 }\n"  # 8: workload.scheduler, an inline table
        "[offload]\n"  # 9
        "speculative.num_speculative_tokens = 3\n"  # 10: offload.speculative.num_...
    )
    assert toml_key_line(text, "model") == 1
    assert toml_key_line(text, "cache.block_size_tokens") == 5
    assert toml_key_line(text, "workload.num_requests") == 7
    assert toml_key_line(text, "workload.scheduler.max_num_seqs") == 8  # the inline table's line
    assert toml_key_line(text, "offload.speculative.num_speculative_tokens") == 10
    assert toml_key_line(text, "cache.enable_prefix_caching") == 3  # not set: its table's line
    assert toml_key_line(text, "fleet.replicas") is None


def test_a_byte_order_mark_is_read_past_with_a_warning(tmp_path, caplog) -> None:
    from kvsim.config import load_config

    path = tmp_path / "bom.toml"
    path.write_bytes(b'\xef\xbb\xbfmodel = "llama-3.1-8b"\n')
    with caplog.at_level(logging.WARNING, logger="kvsim.base.textfile"):
        assert load_config(path).model.name == "llama-3.1-8b"
    assert "byte-order mark" in caplog.text


LLAMA_SMALL = {"model": "llama-3.1-8b", "gpu": "h100-80gb", "workload": {"num_requests": 5}}


def test_the_longest_request_a_paged_pool_holds_leaves_out_v1s_null_block():
    # Llama-3.1-8B keeps 128 KiB of KV per token, so 0.5 GiB hold 4,096 slots: 256 blocks of 16.
    # vLLM v1 reserves block 0 (the null block), so a request can hold 255 x 16 = 4,080 tokens;
    # vLLM v0 has no null block: 4,096.
    half = {**LLAMA_SMALL, "cache": {"kv_cache_gib": 0.5}}
    with pytest.raises(ValueError, match=r"requests can hold 4,080 .*at most 4,080 or raise"):
        config_from_dict({**half, "scheduler": {"max_model_len": 4096}})
    assert config_from_dict({**half, "scheduler": {"max_model_len": 4080}}).max_model_len == 4080
    v0 = {"engine": "vllm-v0", "max_model_len": 4096}
    assert config_from_dict({**half, "scheduler": v0}).capacity_tokens == 4096
    slabs = {"kv_cache_gib": 0.5, "allocator": "first_fit"}  # a slab may take the whole pool
    assert config_from_dict({**half, "cache": slabs, "scheduler": {"max_model_len": 4096}})


def test_a_derived_budget_short_only_by_the_null_block_says_so():
    # a utilisation leaving 4,100 slots for KV: 256 whole blocks, 255 usable under v1
    probe = config_from_dict({**LLAMA_SMALL, "scheduler": {"max_model_len": 2048}})
    left = 4100 * probe.bytes_per_token
    memory = probe.gpu.memory_bytes
    util = (probe.weight_bytes_per_gpu + probe.cache.activation_headroom_bytes + left) / memory
    with pytest.raises(ValueError, match=r"its 4,100 slots hold one request of at most 4,080"):
        config_from_dict(
            {
                **LLAMA_SMALL,
                "cache": {"gpu_memory_utilization": util},
                "scheduler": {"max_model_len": 4096},
            }
        )


def test_an_override_that_makes_a_valid_file_invalid_is_named_with_it(tmp_path):
    # the file's max_num_seqs and the override's budget conflict: the message blamed the file
    path = tmp_path / "base.toml"
    path.write_text("[scheduler]\nmax_num_seqs = 1024\n")
    overrides = {"scheduler.max_num_batched_tokens": 512, "workload.lengths": "fixed"}
    with pytest.raises(ValueError, match="must be >= max_num_seqs") as err:
        load_config(path, overrides)
    assert str(err.value).startswith(
        f"{path} with --set scheduler.max_num_batched_tokens=512: "
        "scheduler.max_num_batched_tokens (512) must be >= max_num_seqs (1024)"
    )


def test_an_override_named_by_its_last_key_part_is_echoed_with_the_error(tmp_path):
    # "allocator 'radix'" names cache.allocator by its last part: it was left out of the echo
    path = tmp_path / "base.toml"
    path.write_text("[cache]\nenable_prefix_caching = true\n")
    overrides = {"offload.kv_offloading_size": 4, "cache.allocator": "radix"}
    with pytest.raises(ValueError, match="has no hashed blocks") as err:
        load_config(path, overrides)
    assert str(err.value).startswith(
        f"{path} with --set offload.kv_offloading_size=4 --set cache.allocator=radix: "
    )


def test_a_bad_override_of_an_invalid_file_still_names_the_file(tmp_path):
    # both the file (a KV budget past the GPU) and the override are wrong: the override's error
    # comes first, with the file it was given with (it came bare)
    path = tmp_path / "base.toml"
    path.write_text('model = "llama-3.1-8b"\ngpu = "h100-80gb"\n[cache]\nkv_cache_gib = 400\n')
    overrides = {"speculative.num_speculative_tokens": -1}
    with pytest.raises(ValueError, match="greater than or equal to 0") as err:
        load_config(path, overrides)
    assert str(err.value).startswith(
        f"{path} with --set speculative.num_speculative_tokens=-1: "
        "speculative.num_speculative_tokens: "
    )


@pytest.mark.parametrize(
    ("table", "fields"),
    [
        ({"workload": "sharegpt_like"}, {"workload.num_requests": 50, "workload.rate_per_s": 100}),
        ({"model": "llama-3.1-8b"}, {"model.num_layers": 2}),
        ({"gpu": "h100-80gb"}, {"gpu.hbm_bandwidth_bytes_per_s": 1e12}),
        ({"cost": "vllm-2023"}, {"cost.step_overhead_s": 0.01}),
        ({"workload": {"lengths": "fixed"}}, {"workload.fixed_output_tokens": 7}),
    ],
)
def test_a_table_override_applies_before_its_fields_in_any_order(table, fields):
    # workload.num_requests=50 given before workload=sharegpt_like was dropped by the preset
    given = copy.deepcopy(table)
    after = config_from_dict({}, {**table, **fields})
    before = config_from_dict({}, {**fields, **table})
    assert table == given  # the caller's table did not gain the field set under it
    assert before == after
    section = next(iter(table))
    dumped = before.model_dump()[section]
    for dotted, value in fields.items():
        assert dumped[dotted.split(".", 1)[1]] == value, dotted
    if isinstance(table[section], str):  # the preset, not the default section, under them
        assert dumped != config_from_dict({}, fields).model_dump()[section]


@pytest.mark.parametrize(
    ("num_bytes", "shown"),
    [
        (GiB // 4, "0.25 GiB"),  # was "0.2 GiB" at one decimal
        (GiB // 2, "0.5 GiB"),
        (2 * GiB, "2.0 GiB"),
        (2_048 * 800 * KiB, "1.56 GiB"),  # 1.5625
        (24 * GiB, "24.0 GiB"),
        (70_554_000_000 * 2, "131.4 GiB"),
        (-int(61.4 * GiB), "-61.4 GiB"),
    ],
)
def test_gib_are_shown_to_three_significant_digits(num_bytes, shown):
    from kvsim.base.units import format_gib

    assert format_gib(num_bytes) == shown


@pytest.mark.parametrize(
    ("num_bytes", "shown"),
    [
        (2_048 * 800 * KiB, "1.57 GiB"),  # 1.5625 up
        (2 * GiB, "2.0 GiB"),  # exact: unchanged
        (GiB // 4, "0.25 GiB"),
        (16 * GiB + 2 * 2**20, "16.1 GiB"),  # 16.002: "16.0" would not be enough
        (70_554_000_000 * 2, "131.5 GiB"),  # 131.41 up, one decimal above 100
    ],
)
def test_a_minimum_is_rounded_up(num_bytes, shown):
    from kvsim.base.units import format_gib

    assert format_gib(num_bytes, round_up=True) == shown


def test_a_quarter_gib_budget_reads_as_such_in_the_error():
    # 0.25 GiB / 128 KiB per token = 2,048 slots, short of one 131,072-token request: 8,192
    # blocks of 16 tokens + the null block = 8,193 x 2 MiB = 16.002 GiB, "16.1" rounded up
    with pytest.raises(
        ValueError, match=r"16\.1 GiB of KV but the pool holds 2,048 tokens \(0\.25 GiB,"
    ):
        config_from_dict(
            {"model": "llama-3.1-8b", "gpu": "h100-80gb", "cache": {"kv_cache_gib": 0.25}}
        )


def test_raising_the_kv_budget_is_advised_only_where_it_fits_beside_the_weights():
    # Llama-3.1-70B at TP 2 on an H100 with 1 GiB of KV: 1,073,741,824 // 163,840 B a token =
    # 6,553 slots, 409 blocks of 16 less the null block: 6,528 tokens. One 131,072-token
    # request needs (8,192 + 1) x 16 x 163,840 B = 21,477,457,920 B (20.0 GiB), which beside
    # 70,554,000,000 B (65.7 GiB) of weights exceeds the 79.19 GiB GPU: raising the budget was
    # advised and then refused; a shorter context alone is. At TP 4 it fits: both are advised
    base = {"model": "llama-3.1-70b", "gpu": "h100-80gb"}
    with pytest.raises(ValueError, match="max_model_len") as tp2:
        config_from_dict(base, {"parallel.tensor_parallel_size": 2, "cache.kv_cache_gib": 1})
    assert str(tp2.value).endswith("lower scheduler.max_model_len to at most 6,528")
    with pytest.raises(ValueError, match="max_model_len") as tp4:
        config_from_dict(base, {"parallel.tensor_parallel_size": 4, "cache.kv_cache_gib": 1})
    assert str(tp4.value).endswith(" or raise the KV budget")


def test_a_slab_above_the_pool_advises_a_budget_only_where_one_fits():
    # Llama-3.1-8B on an RTX 4090 (23.5 GiB), max_model_len 8,192, first_fit full_context: the
    # derived budget, 0.9 x 23.5 GiB less 14.96 GiB of weights and 2 GiB, holds one 8,192-token
    # request, but every slab is the trained context, 131,072 x 128 KiB = 16 GiB, which beside
    # the weights exceeds the GPU: raising the budget was advised and could not be followed
    with pytest.raises(ValueError, match=r"^cache\.reservation: ") as err:
        config_from_dict({"model": "llama-3.1-8b", "gpu": "rtx-4090"}, FULL_CONTEXT_8K)
    assert str(err.value).endswith("; choose another reservation")


def test_a_config_compares_equal_after_its_replicas_are_read():
    # every config has replica_configs ((itself,) without a fleet); cached, that tuple made a
    # config hold itself, and comparing two such configs recursed without end
    a, b = config_from_dict({}), config_from_dict({})
    assert len(a.replica_configs) == len(b.replica_configs) == 1
    assert a.num_gpus == 1
    assert a == b


def test_a_relative_trace_beside_the_config_but_not_here_says_where_it_is_read_from(
    tmp_path, monkeypatch, caplog, fresh_warnings
) -> None:
    """sub/c.toml names trace = "t.csv", which is sub/t.csv: run from tmp_path the path is read
    from tmp_path (as --set gives it), where there is none: the error names the file beside
    the config and the path to write; with a t.csv here too, that one is read, with a warning;
    run from sub/, nothing to say."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "t.csv").write_text("arrival_time_s,prompt_tokens,output_tokens\n0,100,10\n")
    (sub / "c.toml").write_text('model = "llama-3.1-8b"\n[workload]\ntrace = "t.csv"\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"c\.toml line 3: .*current folder .*sub/t\.csv"):
        load_config("sub/c.toml")
    (tmp_path / "t.csv").write_text("arrival_time_s,prompt_tokens,output_tokens\n0,200,10\n")
    with caplog.at_level(logging.WARNING):
        config = load_config("sub/c.toml")
    assert config.workload.trace == "t.csv"
    assert any("not the t.csv beside c.toml" in r.getMessage() for r in caplog.records)
    caplog.clear()
    monkeypatch.chdir(sub)
    with caplog.at_level(logging.WARNING):
        load_config("c.toml")
    assert not any("beside c.toml" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("table", "content"),
    [
        ('[workload]\nlengths = "table"\nlength_table = "f.csv"\n', "bin,side,q0,q1\n"),
        ('[cost]\ncalibration = "f.csv"\n', "device_name\n"),
        ('[pricing]\ntable = "f.csv"\n', ""),
        ('workload = "f.toml"\n', ""),  # (a workload preset file)
        ('[workload]\npreset = "f.toml"\n', ""),
    ],
)
def test_every_relative_path_beside_the_config_but_not_here_is_named(
    table: str, content: str, tmp_path, monkeypatch
) -> None:
    """A length table, calibration or price table, or workload preset named by a relative path
    is read from the current folder as the trace is: the file beside the config only is named
    in the error (each failed before with "no such file" and no word of it)."""
    name = "f.toml" if "f.toml" in table else "f.csv"
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / name).write_text(content)
    (sub / "c.toml").write_text(table)
    line = table.count("\n")  # the path is the file's last line
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=rf"c\.toml line {line}: .*current folder .*sub/{name}"):
        load_config("sub/c.toml")


def test_a_relative_path_the_set_replaces_is_not_checked(tmp_path, monkeypatch) -> None:
    """sub/c.toml's trace = "t.csv" (beside it only) is not read when --set replaces it, or its
    whole [workload] table: no error about it (the run reads what --set gives)."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "t.csv").write_text("prompt_tokens,output_tokens\n10,5\n")
    (sub / "c.toml").write_text('[workload]\ntrace = "t.csv"\n')
    monkeypatch.chdir(tmp_path)
    replaced = load_config("sub/c.toml", {"workload": "sharegpt_like"})
    assert replaced.workload.trace is None
    with pytest.raises(ValueError, match=r"c\.toml line 2: workload\.trace = 't\.csv'"):
        load_config("sub/c.toml")


def test_a_catalogued_trace_file_name_beside_the_config_is_read_from_the_data_folder(
    tmp_path, monkeypatch
) -> None:
    """trace = "azure_llm_2023_conv.csv" names a catalogued trace, read from KVSIM_DATA wherever
    the config is: a file of that name beside the config is no reason to refuse it."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "azure_llm_2023_conv.csv").write_text("arrival_time_s,prompt_tokens,output_tokens\n")
    (sub / "c.toml").write_text('[workload]\ntrace = "azure_llm_2023_conv.csv"\n')
    monkeypatch.chdir(tmp_path)
    assert load_config("sub/c.toml").workload.trace == "azure_llm_2023_conv.csv"


@pytest.mark.parametrize("trace", ["no-such-folder/t.csv", "."])
def test_a_missing_trace_file_is_named_with_the_config_line(trace: str, tmp_path) -> None:
    """trace = a missing file (or a folder) failed the run naming the trace only: the config
    file and its line 3 are named first; with fallback_synthetic the run decides (and draws)."""
    from kvsim.workload import DataNotFoundError

    config = tmp_path / "c.toml"
    config.write_text(f'model = "opt-13b"\n[workload]\ntrace = "{tmp_path / trace}"\n')
    with pytest.raises(DataNotFoundError, match=r"c\.toml line 3: workload\.trace: Trace "):
        load_config(config)
    fallback = "fallback_synthetic = true\nrate_per_s = 1.0\n"
    config.write_text(config.read_text() + fallback)
    assert load_config(config).workload.fallback_synthetic


@pytest.mark.usefixtures("fresh_warnings")
def test_a_set_table_that_replaces_the_files_says_which_fields_go(tmp_path, caplog) -> None:
    """--set workload=sharegpt_like replaces the file's [workload] table (documented): its
    rate_per_s = 5 went without a word (the run drew the preset's 2 req/s); num_requests, set
    again by --set, stays. A --set of a field alone replaces nothing: quiet."""
    config = tmp_path / "c.toml"
    config.write_text('model = "opt-13b"\n[workload]\nrate_per_s = 5.0\nnum_requests = 10\n')
    overrides = {"workload": "sharegpt_like", "workload.num_requests": 5}
    with caplog.at_level(logging.WARNING):
        loaded = load_config(config, overrides)
    assert loaded.workload.rate_per_s != 5.0
    assert loaded.workload.num_requests == 5
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        f"--set workload=sharegpt_like replaces {config}'s [workload] table: its rate_per_s is "
        "not used (--set workload.FIELD=... gives one again)"
    ]
    forget_warnings(caplog)
    with caplog.at_level(logging.WARNING):
        load_config(config, {"workload.num_requests": 5})
    assert not caplog.records


def test_a_value_error_keeps_a_number_its_message_only_happens_to_contain() -> None:
    """A kvsim message that names a string value quoted is not followed by it again; a number
    whose digits merely appear in the message ("16" holds "1") still is: the user's 1 is
    shown."""
    from pydantic_core import ValidationError

    from kvsim.config.sim import format_validation_error

    def error(loc: tuple[str, ...], value: object, message: str) -> str:
        details = {"type": "value_error", "loc": loc, "input": value}
        details["ctx"] = {"error": ValueError(message)}
        return format_validation_error(ValidationError.from_exception_data("SimConfig", [details]))

    assert error(("cache", "block_size_tokens"), 1, "must be a multiple of 16") == (
        "cache.block_size_tokens: must be a multiple of 16, got 1"
    )
    assert error(("workload",), "azure_x", "no workload preset 'azure_x'") == (
        "workload: no workload preset 'azure_x'"
    )
