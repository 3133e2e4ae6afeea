"""vAttention (ASPLOS'25): page geometry, demand-mapped page rows, the page tail, layout factor 1.

Every expected number is worked out by hand below from vAttention's rules
(microsoft/vattention ``vattention/vattention.cu`` ``init_kv_block_size``: ``tokens_per_page =
page_size / (num_kv_heads * head_size * bytes_per_elem)``, integer division; ``utils.h``
``tokens_to_pages`` and ``get_num_phys_blocks``: pages rounded down to whole rows of
``2 * num_layers``).
"""

from __future__ import annotations

import logging

import pytest

from kvsim.base.units import GiB, KiB, MiB
from kvsim.config import config_from_dict
from kvsim.config.allocators import vattention_pages
from kvsim.core.kv import make_allocator
from kvsim.engine import simulate
from kvsim.engine.build import build_parts
from kvsim.workload.request import Request
from tests.conftest import forget_warnings, make_request

LLAMA_8B_TOKEN = 2 * 32 * 8 * 128 * 2  # K and V x 32 layers x 8 KV heads x 128 dims x fp16
OPT_13B_TOKEN = 2 * 40 * 40 * 128 * 2  # 819,200 bytes (800 KiB), the paper's figure


def test_page_geometry_llama_and_opt():
    # Llama-3.1-8B: one tensor's token is 8 x 128 x 2 = 2,048 bytes; 64 tensors (2 x 32 layers).
    # 2 MiB pages hold 2,097,152 / 2,048 = 1,024 tokens; 16 GiB (131,072 tokens of 128 KiB) make
    # 16 GiB / (2 MiB x 64) = 128 page rows = 128 x 1,024 = 131,072 slots: no remainder.
    assert vattention_pages(16 * GiB, LLAMA_8B_TOKEN, 2 * MiB, 64) == (1024, 128)
    # 64 KiB pages: 65,536 / 2,048 = 32 tokens, 16 GiB / (64 KiB x 64) = 4,096 rows
    assert vattention_pages(16 * GiB, LLAMA_8B_TOKEN, 64 * KiB, 64) == (32, 4096)
    # OPT-13B: one tensor's token is 40 x 128 x 2 = 10,240 bytes; 64 KiB / 10,240 = 6.4 -> 6
    # tokens a page. 12 GiB = 12,884,901,888 bytes make 12,884,901,888 // (65,536 x 80) =
    # 2,457 rows (2,457.6).
    assert vattention_pages(12 * GiB, OPT_13B_TOKEN, 64 * KiB, 80) == (6, 2457)
    # 2 MiB: 2,097,152 / 10,240 = 204.8 -> 204 tokens; 12 GiB // (2 MiB x 80) = 76 rows (76.8)
    assert vattention_pages(12 * GiB, OPT_13B_TOKEN, 2 * MiB, 80) == (204, 76)


def test_page_rows_divide_the_kv_bytes_not_the_whole_tokens():
    """vAttention sizes its pool from the KV bytes over the page size (``get_num_phys_blocks``).
    OPT-13B with 64 KiB pages: a row is 80 x 64 KiB = 5 MiB. 20 MiB is 4 rows of 6 tokens, 24
    slots; rounded down to whole tokens first (20 MiB // 819,200 = 25 slots = 20,000 KiB) it
    read 3 rows (20,000 KiB // 5,120 KiB). 5 GiB is 1,024 rows (it read 1,023)."""
    assert vattention_pages(20 * MiB, OPT_13B_TOKEN, 64 * KiB, 80) == (6, 4)
    assert vattention_pages(5 * GiB, OPT_13B_TOKEN, 64 * KiB, 80) == (6, 1024)
    # the run: one request of 10 prompt + 2 output tokens holds 11 slots in 2 pages of 6 (12):
    # kv_cache_usage_perc 12 / 24 = 0.5 at its only step
    config = config_from_dict(
        {
            "model": "opt-13b",
            "cache": {"allocator": "vattention", "page_size_bytes": 64 * KiB},
            "scheduler": {"max_model_len": 18},
        },
        {"cache.kv_cache_bytes": 20 * MiB},
    )
    summary = simulate(config, [Request(0, 0.0, 10, 2, 2)]).summary
    assert summary["num_gpu_blocks"] == 4
    assert summary["kv_cache_usage_perc"] == pytest.approx(0.5)


def test_a_page_smaller_than_one_token_is_an_error():
    with pytest.raises(ValueError, match=r"page_size_bytes: a 1,024-byte page holds no token"):
        vattention_pages(100, OPT_13B_TOKEN, 1024, 80)  # 1,024 < 10,240 bytes


def opt_pool(page_size_bytes: int):
    return make_allocator(
        "vattention",
        capacity_tokens=15_728,
        bytes_per_token=OPT_13B_TOKEN,
        page_size_bytes=page_size_bytes,
        num_kv_tensors=80,
    )


def test_opt_pool_sub_token_page_tails_are_overhead():
    pool = opt_pool(64 * KiB)
    # 2,457 rows of 6 slots = 14,742 usable; the other 15,728 - 14,742 = 986 slots are the
    # 0.4-token tail of every page plus the pool's remainder: overhead, held by nobody
    assert (pool.block_size_tokens, pool.num_gpu_blocks) == (6, 2457)
    assert pool.usable_capacity_tokens == 14_742
    assert pool.stats().overhead_slots == 986
    assert pool.num_free_tokens == 14_742
    pool.check_invariants()


def test_rows_are_mapped_on_demand_and_the_last_page_tail_is_internal():
    # Llama-8B on 64 KiB pages (32 tokens a row), a 1,000-token request (prompt 900, 101 out:
    # final KV 900 + 101 - 1 = 1,000 tokens)
    pool = make_allocator(
        "vattention",
        capacity_tokens=131_072,
        bytes_per_token=LLAMA_8B_TOKEN,
        page_size_bytes=64 * KiB,
        num_kv_tensors=64,
    )
    req = make_request(900, 101)
    # prefill: cdiv(900, 32) = 29 rows = 928 slots (28 x 32 = 896 < 900)
    result = pool.allocate(req, 900)
    assert result is not None
    assert (result.num_new_blocks, pool.held_slots(req.req_id)) == (29, 928)
    # decoding to token 928 needs nothing; token 929 maps row 30
    assert pool.allocate(req, 928).num_new_blocks == 0
    assert pool.allocate(req, 929).num_new_blocks == 1
    # at its final 1,000 tokens: cdiv(1,000, 32) = 32 rows = 1,024 slots; 24 of them are the
    # last page's tail beyond the final length (internal fragmentation)
    pool.allocate(req, 1000)
    assert pool.held_slots(req.req_id) == 1024
    held, token, internal, _ = pool.request_slots(req, 1000)
    assert (held, token, internal) == (1024, 1000, 24)
    pool.free(req.req_id)
    assert pool.num_free_tokens == 131_072
    pool.check_invariants()


def test_two_mib_pages_hold_a_short_request_in_one_row():
    # the same request on 2 MiB pages: one row of 1,024 tokens from the first token on
    pool = make_allocator(
        "vattention",
        capacity_tokens=131_072,
        bytes_per_token=LLAMA_8B_TOKEN,
        page_size_bytes=2 * MiB,
        num_kv_tensors=64,
    )
    req = make_request(10, 5)
    assert pool.allocate(req, 10).num_new_slots == 1024
    # final KV 10 + 5 - 1 = 14 tokens: 1,024 - 14 = 1,010 slots of internal fragmentation
    assert pool.request_slots(req, 14)[2] == 1010


def config(**cache):
    return config_from_dict(
        {
            "model": "opt-13b",
            "gpu": "a100-40gb",
            "cost": "lean",  # the analytic paged/contiguous factor (the fitted default reads 1)
            "cache": {"kv_cache_gib": 12.0, **cache},
            "scheduler": {"engine": "vllm-v0", "max_model_len": 2048},
            "workload": {"num_requests": 5},
        }
    )


def test_no_block_table_means_layout_factor_one():
    # paged at B = 16: the analytic paged/contiguous factor 1.23 (kvsim.calibrate.table, the
    # paper's "20-26 % slower" kernel); vAttention reads a contiguous virtual range: 1.0
    paged = build_parts(config(allocator="paged"), [], pooled=True)
    vatt = build_parts(config(allocator="vattention", page_size_bytes=65536), [], pooled=True)
    assert paged.cost.layout_factor == pytest.approx(1.23)
    assert vatt.cost.layout_factor == 1.0
    assert vatt.allocator.block_size_tokens == 6
    assert vatt.allocator.num_gpu_blocks == 2457


def test_config_refuses_what_vattention_does_not_do():
    with pytest.raises(ValueError, match=r"page_size_bytes: vAttention maps pages of a power"):
        config(allocator="vattention", page_size_bytes=100_000)
    with pytest.raises(ValueError, match=r"greater than or equal to 65536"):
        config(allocator="vattention", page_size_bytes=4096)
    with pytest.raises(ValueError, match=r"'vattention' maps each request its own pages"):
        config(allocator="vattention", enable_prefix_caching=True)
    with pytest.raises(ValueError, match=r"'vattention' serves single sequences"):
        config_from_dict(
            {
                "cache": {"allocator": "vattention", "kv_cache_gib": 12.0},
                "scheduler": {"engine": "vllm-v0"},
                "workload": {"n": 2, "num_requests": 5},
            }
        )


def test_page_size_on_another_policy_is_warned_about(caplog):
    with caplog.at_level(logging.WARNING):
        config(allocator="paged", page_size_bytes=65536)
    assert "cache.page_size_bytes = 65536 has no effect" in caplog.text
    # and its default leaves a config's canonical hash as before the field existed
    assert "page_size_bytes" not in config(allocator="paged").canonical_json()


@pytest.mark.parametrize("page", [512 * KiB, 1 * MiB])
def test_a_page_size_vattention_does_not_map_is_warned_about(page, caplog, monkeypatch):
    # vAttention maps 64, 128 and 256 KiB pages through its UVM driver and 2 MiB ones through
    # CUDA (Prabhu et al., ASPLOS'25); 512 KiB and 1 MiB are powers of two in range it lacks
    from kvsim.base import say_once

    monkeypatch.setattr(say_once, "SAID", set())
    with caplog.at_level(logging.WARNING):
        config(allocator="vattention", page_size_bytes=64 * KiB)
        config(allocator="vattention", page_size_bytes=2 * MiB)
    assert "what-if" not in caplog.text
    with caplog.at_level(logging.WARNING):
        config(allocator="vattention", page_size_bytes=page)
    assert f"cache.page_size_bytes = {page:,}" in caplog.text
    assert "what-if no vAttention build offers" in caplog.text
    forget_warnings(caplog)
    monkeypatch.setattr(say_once, "SAID", set())
    with caplog.at_level(logging.WARNING):  # another pool ignores the size, and says only so
        config(allocator="paged", page_size_bytes=page)
    assert "what-if" not in caplog.text
    assert "page_size_bytes" in caplog.text
