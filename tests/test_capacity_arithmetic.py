"""Capacity arithmetic done by hand (how many blocks or sequences a KV budget holds), reproduced
with kvsim's own allocators and configs; experiments/reservation-24gib.toml keeps the estimates.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.base.units import GB, GiB, MiB
from kvsim.config import config_from_dict
from kvsim.core.kv import make_allocator
from kvsim.workload.request import Request


def fill(alloc, make, limit=10_000):
    """Admit requests from ``make(i) -> (request, num_tokens)`` until the first refusal."""
    for i in range(limit):
        req, num_tokens = make(i)
        if alloc.allocate(req, num_tokens) is None:
            return i
    raise AssertionError("never refused")


def test_50_gb_in_2_mib_blocks_is_about_23800():
    cfg = config_from_dict(
        {"model": "llama-3.1-8b", "gpu": "h100-80gb", "cache": {"kv_cache_bytes": 50 * GB}}
    )
    alloc = make_allocator("paged", capacity_tokens=cfg.capacity_tokens, block_size_tokens=16)
    # 16 x 128 KiB = 2 MiB per block; 50e9 / 2**21 = 23,841.9 -> 23,841 blocks
    assert 16 * cfg.model.bytes_per_token == 2 * 2**20
    assert alloc.num_blocks == 23_841


def test_8192_token_slabs_of_1_gib_fit_46_requests_in_50_gb():
    cfg = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "cache": {"kv_cache_bytes": 50 * GB},
            "scheduler": {"max_model_len": 8192},
        }
    )
    alloc = make_allocator(
        "first_fit", capacity_tokens=cfg.capacity_tokens, reservation="max", max_model_len=8192
    )
    assert 8192 * cfg.model.bytes_per_token == GiB
    # 50e9 / 2**30 = 46.6 -> 46 slabs
    assert fill(alloc, lambda i: (Request(i, 0.0, 100, 50, 2048), 101)) == 46


def test_24_gib_holds_62_slabs_24_contexts_or_about_159_paged_sequences():
    cfg = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "cache": {"kv_cache_gib": 24},
            "scheduler": {"max_model_len": 8192},
        }
    )
    capacity = cfg.capacity_tokens
    assert capacity == 196_608
    # prompt + max_tokens: 1,100 + 2,048 = 3,148-slot slabs -> 196,608 / 3,148 = 62.5 -> 62
    slabs = make_allocator(
        "first_fit", capacity_tokens=capacity, reservation="prompt_max_tokens", max_model_len=8192
    )
    assert fill(slabs, lambda i: (Request(i, 0.0, 1100, 250, 2048), 1101)) == 62
    # the full 8,192-token context: 196,608 / 8,192 = 24
    full = make_allocator(
        "first_fit",
        capacity_tokens=capacity,
        reservation="full_context",
        max_model_len=8192,
        full_context_tokens=8192,
    )
    assert fill(full, lambda i: (Request(i, 0.0, 1100, 250, 2048), 1101)) == 24
    # paged: sequences spread evenly over their life hold 1,100 + 125 tokens on average plus
    # half a 16-token block of tail: 196,608 / (1,225 + 8) = 159.5 -> about 159
    paged = make_allocator("paged", capacity_tokens=capacity, block_size_tokens=16)

    def live(i):
        return Request(i, 0.0, 1100, 250, 2048), 1100 + (i * 37) % 251  # lengths cycle 1100..1350

    n = fill(paged, live)
    assert 155 <= n <= 163


def test_contiguous_prompt_plus_2048_slab_is_43_percent_used_at_the_end():
    # a ~3,150-token slab holds ~1,350 real tokens at the end: 43 %
    assert round(100 * (1100 + 250) / (1100 + 2048)) == 43


def test_a_drafters_weights_come_out_of_the_derived_kv_budget():
    """vLLM loads the drafter beside the target before it sizes the KV cache: 1e9 drafter
    parameters in bf16 (2 bytes) take 2e9 bytes at TP 1 and 1e9 bytes on each GPU at TP 2 (the
    drafter split as the target is over the tensor-parallel GPUs); over 2 pipeline stages all
    2e9 bytes sit on the last one (vLLM builds the speculator on the last stage alone), whose
    smaller budget every stage takes. An explicit budget is not moved, and without speculative
    tokens the drafter is not loaded."""
    base = {"model": "llama-3.1-8b", "gpu": "h100-80gb", "scheduler": {"max_model_len": 8192}}
    spec = {"num_speculative_tokens": 3, "acceptance_rate": 0.7, "draft_num_params": 10**9}
    for tp, pp, per_gpu in ((1, 1, 2 * 10**9), (2, 1, 10**9), (1, 2, 2 * 10**9)):
        parallel = {"tensor_parallel_size": tp, "pipeline_parallel_size": pp}
        plain = config_from_dict({**base, "parallel": parallel})
        drafted = config_from_dict({**base, "parallel": parallel, "speculative": spec})
        assert drafted.weight_bytes_per_gpu - plain.weight_bytes_per_gpu == per_gpu
        assert plain.kv_cache_bytes - drafted.kv_cache_bytes == per_gpu
    explicit = {**base, "cache": {"kv_cache_gib": 4}}
    assert (
        config_from_dict({**explicit, "speculative": spec}).kv_cache_bytes
        == config_from_dict(explicit).kv_cache_bytes
        == 4 * GiB
    )
    off = config_from_dict({**base, "speculative": {"draft_num_params": 10**9}})
    assert off.weight_bytes_per_gpu == config_from_dict(base).weight_bytes_per_gpu


def test_a_kv_budget_as_the_gpu_memory_utilization_that_derives_it():
    """(4 GiB of KV + 8.03e9 x 2 B of weights + 2 GiB of headroom) / 81,089 MiB = 22,502,450,944
    / 85,027,979,264 = 0.26465 of an H100, up to 0.265; vLLM's own derivation at 0.265 gives
    0.265 x 81,089 MiB - 16.06e9 B - 2 GiB = 4.028 GiB, at 0.264 3.949 GiB."""
    from kvsim.config.memory import utilization_for_budget

    base = {"model": "llama-3.1-8b", "gpu": "h100-80gb", "scheduler": {"max_model_len": 8192}}
    assert utilization_for_budget(config_from_dict({**base, "cache": {"kv_cache_gib": 4}})) == 0.265
    for share, holds in ((0.265, True), (0.264, False)):
        derived = config_from_dict({**base, "cache": {"gpu_memory_utilization": share}})
        assert (derived.kv_cache_bytes >= 4 * GiB) is holds
    # a budget beside the weights that leaves no room for the headroom: above 1
    big = config_from_dict({**base, "cache": {"kv_cache_gib": 64}})
    assert utilization_for_budget(big) == pytest.approx(
        ((64 + 2) * GiB + 16.06e9) / (81_089 * MiB), abs=1e-3
    )  # 1.0223
    assert utilization_for_budget(big) > 1


@settings(max_examples=60, deadline=None)
@given(
    memory=st.sampled_from([141_000_000_000, 80 * GiB, 48_000_000_000, 100_000_000_000]),
    kv_gib=st.floats(0.3, 20.0),
)
def test_the_share_is_the_least_whose_derived_budget_holds_the_kv(memory, kv_gib):
    # the definition, read through the config's own derivation: at the share the derived budget
    # holds the KV, at 0.001 less it does not (a float's last bit once left it one byte short)
    from kvsim.config.memory import utilization_for_budget

    def config(**cache):
        table = {"model": "llama-3.1-8b", "gpu": {"preset": "h200", "memory_bytes": memory}}
        return config_from_dict({**table, "cache": cache, "scheduler": {"max_model_len": 1024}})

    try:
        given = config(kv_cache_gib=kv_gib)
    except ValueError:  # (more than the GPU holds beside the weights)
        return
    share = utilization_for_budget(given)
    if share > 1:
        return
    assert config(gpu_memory_utilization=share).kv_cache_bytes >= given.kv_cache_bytes
    less = round(share - 0.001, 3)
    if less > 0:
        assert config(gpu_memory_utilization=less).kv_cache_bytes < given.kv_cache_bytes


def test_a_share_a_float_would_leave_one_byte_short_is_raised():
    """An H200 given its datasheet 141e9 B (the preset's CUDA total, 150,109,880,320 B, has no
    such share: k/1000 x it is whole only for k a multiple of 25, and none of those falls short)
    with Llama-3.1-8B: 16,060,000,000 B of weights + 2 GiB of headroom = 18,207,483,648 B; a KV
    budget of 24,252,000,000 - that = 6,044,516,352 B needs exactly 0.172 of the GPU, but 0.172 x
    141e9 is 24,251,999,999.999996 in floating point, so the derived budget would be
    6,044,516,351 B: one byte short. The share is 0.173."""
    from kvsim.config.memory import utilization_for_budget

    gpu = {"preset": "h200", "memory_bytes": 141_000_000_000}
    base = {"model": "llama-3.1-8b", "gpu": gpu, "scheduler": {"max_model_len": 1024}}
    given = config_from_dict({**base, "cache": {"kv_cache_bytes": 6_044_516_352}})
    assert utilization_for_budget(given) == 0.173
    at = config_from_dict({**base, "cache": {"gpu_memory_utilization": 0.172}})
    assert at.kv_cache_bytes == 6_044_516_351  # (the float's shortfall itself)


def test_a_drafters_kv_layers_share_every_slot():
    """vLLM gives a drafter's attention layers KV in the same pool (vLLM 0.34.0
    ``vllm/v1/worker/gpu/attn_utils.py`` ``get_kv_cache_spec`` collects every attention layer of
    the config, the drafter's included), so a slot holds the target's layers and the drafter's.
    Llama-3.1-8B, bf16: one layer's K and V of one token are 2 x 8 heads x 128 x 2 B = 4,096 B;
    32 layers 131,072 B per token."""
    base = {
        "model": "llama-3.1-8b",
        "gpu": "h100-80gb",
        "cache": {"kv_cache_gib": 4},
        "scheduler": {"max_model_len": 8192},
    }

    def slots(spec: dict, **parallel) -> tuple[int, int]:
        cfg = config_from_dict({**base, "speculative": spec, "parallel": parallel})
        return cfg.bytes_per_token, cfg.capacity_tokens

    eagle = {"num_speculative_tokens": 3, "acceptance_rate": 0.7}
    # no drafter: 4 GiB / 131,072 B = 32,768 slots
    assert slots({}) == (131_072, 32_768)
    # an EAGLE head's one layer by default: 33 x 4,096 = 135,168 B;
    # 4,294,967,296 / 135,168 = 31,775.03 -> 31,775 slots
    assert slots(eagle) == (135_168, 31_775)
    # a 2-layer drafter: 34 x 4,096 = 139,264 B; 4 GiB / 139,264 = 30,840.5 -> 30,840
    assert slots({**eagle, "draft_num_kv_layers": 2}) == (139_264, 30_840)
    # n-gram lookup runs no layer, and a drafter of 0 KV layers keeps none
    assert slots({**eagle, "method": "ngram"}) == (131_072, 32_768)
    assert slots({**eagle, "draft_num_kv_layers": 0}) == (131_072, 32_768)
    # k = 0 loads no drafter
    assert slots({"num_speculative_tokens": 0, "draft_num_kv_layers": 1}) == (131_072, 32_768)
    # TP 2 halves every layer's heads, the drafter's too: 33 x 2 x 4 x 128 x 2 = 67,584 B
    assert slots(eagle, tensor_parallel_size=2)[0] == 67_584


def test_a_drafters_layer_joins_the_full_attention_groups():
    """vLLM leaves ``is_draft`` out of a spec's equality (vLLM 0.34.0
    ``vllm/v1/kv_cache_interface.py``), so an EAGLE-3 head's full-attention layer is grouped with
    the target's full layers and the group size follows the new counts
    (``kvsim.config.layers``: g = fewest, or most when most < 1.5 x fewest)."""
    spec = {"num_speculative_tokens": 3, "acceptance_rate": 0.7}

    def groups(model: str):
        cfg = config_from_dict(
            {
                "model": model,
                "gpu": "h100-80gb",
                "cache": {"kv_cache_gib": 20},
                "scheduler": {"max_model_len": 8192},
                "speculative": spec,
            }
        )
        g = cfg.kv_groups
        assert g is not None
        return g.kinds, [x.num_real_layers for x in g.groups], g.slot_bytes

    # gpt-oss-20b: 12 full + 1 drafter = 13 full, 12 sliding; 13 < 1.5 x 12 so g = 13: one full
    # group of 13 and one sliding group of 12 (+1 padding). A layer: 2 x 8 x 64 x 2 = 2,048 B;
    # a slot 13 x 2,048 = 26,624 B (12 x 2,048 = 24,576 without the drafter). The groups in the
    # layers' order: gpt-oss's layer 0 slides, so the sliding group first (the drafter's layer,
    # registered last, joins the full group where it stands)
    assert groups("gpt-oss-20b") == (("sliding", "full"), [12, 13], 26_624)
    # Gemma-3-27B: 10 full + 1 = 11, 52 sliding >= 1.5 x 11, so g = 11: one full group,
    # cdiv(52, 11) = 5 sliding groups dealt round robin (11, 11, 10, 10, 10), 3 padding layers;
    # a slot 11 x 8,192 = 90,112 B. Without the drafter: 7 groups of 10 (8 padding): the drafter's
    # layer takes 6 x 11 = 66 layer-slots a token where the target alone took 7 x 10 = 70
    assert groups("gemma-3-27b") == (
        ("sliding",) * 5 + ("full",),
        [11, 11, 10, 10, 10, 11],
        90_112,
    )


def test_vattention_keeps_a_k_and_a_v_tensor_per_layer_with_kv():
    """vAttention keeps a K and a V virtual tensor per layer that has KV: Llama-3.1-8B's 32
    layers hold 8 KV heads of 128 dims: 2 x 8 x 128 x 2 B = 4,096 B a layer, 131,072 B a token
    over 64 tensors, 2,048 B a tensor: a 64 KiB page holds 65,536 / 2,048 = 32 tokens. An EAGLE
    head's layer adds 2 tensors of the same 2,048 B (135,168 B over 66). A model with state
    layers has no vAttention pool: its per-request state is modelled in vLLM v1's hybrid KV
    cache groups only (refused, not left out)."""
    from kvsim.config.allocators import vattention_pages

    base = {
        "model": "llama-3.1-8b",
        "gpu": "h100-80gb",
        "cache": {"kv_cache_gib": 8, "allocator": "vattention", "page_size_bytes": 65536},
        "scheduler": {"max_model_len": 8192},
    }
    spec = {"num_speculative_tokens": 3, "acceptance_rate": 0.7}
    for speculative, per_token, tensors in (({}, 131_072, 64), (spec, 135_168, 66)):
        cfg = config_from_dict({**base, "speculative": speculative})
        assert (cfg.bytes_per_token, cfg.num_kv_tensors) == (per_token, tensors)
        assert vattention_pages(0, per_token, 65536, tensors)[0] == 32
    with pytest.raises(ValueError, match=r"cache\.allocator: qwen3-next-80b-a3b's 36 state"):
        config_from_dict(
            {**base, "model": "qwen3-next-80b-a3b", "parallel": {"tensor_parallel_size": 4}}
        )


def test_a_model_whose_every_layer_slides_serves_any_length_once_its_window_fits():
    # Mistral-7B-v0.1: 32 layers, all sliding with a 4,096-token window; 8 KV heads x 128 dims x
    # K and V x 2 bytes = 4,096 bytes per token and layer, so one KV cache group of 32 layers
    # and 16-token blocks of 16 x 32 x 4,096 = 2 MiB. vLLM's need for a request of any length
    # (SlidingWindowSpec.max_memory_usage_bytes): cdiv(4,096 - 1 + 8,192, 16) + 1 = 769 blocks.
    # 2 GiB = 1,024 blocks, 1,023 beside the null block >= 769: a 32,768-token context fits.
    base = {"model": "mistral-7b-v0.1", "gpu": "h100-80gb"}
    assert config_from_dict({**base, "cache": {"kv_cache_gib": 2.0}}).max_model_len == 32_768
    # 1 GiB = 512 blocks, 511 usable < 769: a request of L tokens holds min(cdiv(L, 16), 769)
    # blocks, so at most 511 x 16 = 8,176 tokens; 32,768 tokens need (769 + the null block)
    # x 2 MiB = 1.504 GiB, "1.51" rounded up
    with pytest.raises(ValueError, match=r"needs 1\.51 GiB.*at most 8,176"):
        config_from_dict({**base, "cache": {"kv_cache_gib": 1.0}})


def test_vllms_startup_figures_by_hand() -> None:
    """vLLM 0.34.0 logs "GPU KV cache size: N tokens, Maximum concurrency for L tokens per
    request: X x", X = the pool's blocks / one L-token request's blocks, N = int(X * L).

    Llama-3.1-8B, 4 GiB of KV at 128 KiB a token: 32,768 slots, 2,048 blocks of 16 (the null
    block among them); L = 8,000 needs cdiv(8,000, 16) = 500: X = 4.096, N = 32,768.
    Gemma-3-27B's 7 groups of 10 layers, a slot 10 x 2 x 16 heads x 128 x 2 B = 81,920 B:
    9,175,040,000 B hold 7,000 blocks; L = 16,384 needs 1,024 blocks in the full group and
    cdiv(1,023 + 8,192, 16) + 1 = 577 in each of the 6 sliding ones (a chunk of the H100's
    8,192 batched tokens beside the window): 4,486; X = 7,000 / 4,486 = 1.5604, N = 25,565.
    vLLM v0 logs its block count only."""
    from kvsim.config.memory import startup_capacity

    llama = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "cache": {"kv_cache_gib": 4},
            "scheduler": {"max_model_len": 8000},
        }
    )
    assert startup_capacity(llama) == (32_768, pytest.approx(4.096))
    gemma = config_from_dict(
        {
            "model": "gemma-3-27b",
            "gpu": "h100-80gb",
            "cache": {"kv_cache_bytes": 9_175_040_000},
            "scheduler": {"max_model_len": 16384},
        }
    )
    assert startup_capacity(gemma) == (25_565, pytest.approx(7000 / 4486))
    # gpt-oss-20b at L = 4,096, below W - 1 + 8,192 = 8,319: a slot is 12 layers x 2 x 8 heads x
    # 64 x 2 B = 24,576 B, 403,439,616 B hold 1,026 blocks; the full group needs 256 blocks
    # and the sliding one cdiv(min(8,319, 4,096), 16) + 1 = 257 (a block above the 256 its
    # admission gate asks): 513, X = 2.0, N = 8,192
    oss = config_from_dict(
        {
            "model": "gpt-oss-20b",
            "gpu": "h100-80gb",
            "cache": {"kv_cache_bytes": 403_439_616},
            "scheduler": {"max_model_len": 4096},
        }
    )
    assert startup_capacity(oss) == (8_192, pytest.approx(2.0))
    # async scheduling keeps two steps' tokens in flight: Gemma's sliding groups at L = 16,384
    # need cdiv(min(1,023 + 16,384, 16,384), 16) + 1 = 1,025 each: 1,024 + 6 x 1,025 = 7,174;
    # 8,000 blocks (10,485,760,000 B): X = 1.1151, N = int(8,000 / 7,174 x 16,384) = 18,270
    gemma_async = config_from_dict(
        {
            "model": "gemma-3-27b",
            "gpu": "h100-80gb",
            "cache": {"kv_cache_bytes": 10_485_760_000},
            "scheduler": {"max_model_len": 16384, "async_scheduling": True},
        }
    )
    assert startup_capacity(gemma_async) == (18_270, pytest.approx(8000 / 7174))
    # state layers: vLLM counts their blocks by its mamba cache mode, which kvsim does not
    # model, so no figure is given
    qwen = {"model": "qwen3-next-80b-a3b", "gpu": "h200", "parallel": {"tensor_parallel_size": 2}}
    qwen["scheduler"] = {"max_model_len": 8192}
    assert startup_capacity(config_from_dict(qwen)) is None
    # ... and its admission gate too: at 7,000 blocks (6,999 usable) an L = 16,384 request
    # needs 1,024 in every group, 7,168, where without async 4,486 fit
    with pytest.raises(ValueError, match="at most 15,984"):
        config_from_dict(
            {
                "model": "gemma-3-27b",
                "gpu": "h100-80gb",
                "cache": {"kv_cache_bytes": 9_175_040_000},
                "scheduler": {"max_model_len": 16384, "async_scheduling": True},
            }
        )
    v0 = {
        "model": "llama-3.1-8b",
        "cache": {"kv_cache_gib": 4},
        "scheduler": {"max_model_len": 8000, "engine": "vllm-v0"},
    }
    assert startup_capacity(config_from_dict(v0)) is None


def test_grace_superchips_hold_what_nvidia_smi_reports():
    # nvidia-smi's totals on a GH200 480GB and a GB200 (published captures): 97,871 MiB and
    # 189,471 MiB. Llama-3.1-8B (8.03e9 parameters, 16.06e9 bytes; 128 KiB of KV a token) at
    # 0.9 with 2 GiB of headroom: 0.9 x 97,871 MiB - 16.06e9 B - 2 GiB = 74,155,179,878 B,
    # 565,759 slots of 131,072 B; on the GB200, 0.9 x 189,471 MiB: 160,599,785,318 B, 1,225,279
    # slots. Read as 96e9 and 186e9 bytes, as the datasheets' "GB" were, they held 7-8 % less
    for gpu, budget, slots in (
        ("gh200", 74_155_179_878, 565_759),
        ("gb200", 160_599_785_318, 1_225_279),
    ):
        cfg = config_from_dict({"model": "llama-3.1-8b", "gpu": gpu})
        assert abs(cfg.kv_cache_bytes - budget) <= 1, gpu
        assert cfg.kv_cache_bytes // 131_072 == slots, gpu
