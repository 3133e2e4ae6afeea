"""The NumPy reference of the microkernel's maths against naive per-sequence softmax attention."""

from __future__ import annotations

import numpy as np
import pytest

from kvsim.calibrate.reference import (
    decode_attention_online,
    gather_from_pool,
    make_block_tables,
    naive_attention,
    paged_decode_attention,
    scatter_to_pool,
)


def test_two_token_case_by_hand() -> None:
    # q = [1, 0]; keys [1, 0], [0, 1]; scores [1, 0] / sqrt(2) = [0.70710678, 0]
    # softmax: e^0.70710678 = 2.02811498 -> weights 2.02811498 / 3.02811498 = 0.669762, 0.330238
    # out = 0.669762 * [1, 2] + 0.330238 * [3, 4] = [1.660476, 2.660476]
    q = np.array([[[1.0, 0.0]]])
    k = np.array([[[[1.0, 0.0]], [[0.0, 1.0]]]])
    v = np.array([[[[1.0, 2.0]], [[3.0, 4.0]]]])
    lens = np.array([2])
    want = [[[1.660476, 2.660476]]]
    np.testing.assert_allclose(naive_attention(q, k, v, lens), want, atol=1e-6)
    np.testing.assert_allclose(decode_attention_online(q, k, v, lens, num_warps=2), want, atol=1e-6)


@pytest.mark.parametrize(
    ("num_heads", "num_kv_heads", "num_warps"), [(4, 4, 1), (4, 2, 3), (8, 1, 8)]
)
def test_online_matches_naive(num_heads: int, num_kv_heads: int, num_warps: int) -> None:
    rng = np.random.default_rng(7)
    batch, max_ctx, head_dim = 3, 24, 8
    q = rng.standard_normal((batch, num_heads, head_dim)).astype(np.float16)
    k = rng.standard_normal((batch, max_ctx, num_kv_heads, head_dim)).astype(np.float16)
    v = rng.standard_normal((batch, max_ctx, num_kv_heads, head_dim)).astype(np.float16)
    lens = np.array([24, 5, 1])  # ragged, including a single-token context
    got = decode_attention_online(q, k, v, lens, num_warps)
    np.testing.assert_allclose(got, naive_attention(q, k, v, lens), atol=2e-5)


def test_paged_layout_gives_the_same_answer() -> None:
    rng = np.random.default_rng(3)
    batch, max_ctx, kv_heads, head_dim, block = 2, 16, 2, 8, 4
    q = rng.standard_normal((batch, 4, head_dim)).astype(np.float32)
    k = rng.standard_normal((batch, max_ctx, kv_heads, head_dim)).astype(np.float32)
    v = rng.standard_normal((batch, max_ctx, kv_heads, head_dim)).astype(np.float32)
    tables = make_block_tables(rng, batch, max_ctx, block)
    k_pool, v_pool = scatter_to_pool(k, tables, block), scatter_to_pool(v, tables, block)
    lens = np.array([16, 9])
    got = paged_decode_attention(q, k_pool, v_pool, tables, lens, num_warps=4)
    np.testing.assert_allclose(got, naive_attention(q, k, v, lens), atol=2e-5)


def test_block_tables_shuffle_every_block_once() -> None:
    rng = np.random.default_rng(0)
    tables = make_block_tables(rng, 3, 10, 4)  # cdiv(10, 4) = 3 blocks per sequence
    assert tables.shape == (3, 3)
    assert sorted(tables.ravel().tolist()) == list(range(9))
    assert tables.ravel().tolist() != list(range(9))  # shuffled


def test_scatter_gather_round_trip() -> None:
    rng = np.random.default_rng(1)
    cache = rng.standard_normal((2, 8, 1, 2))
    tables = make_block_tables(rng, 2, 8, 2)
    pool = scatter_to_pool(cache, tables, 2)
    # token 5 of sequence 1 lives in block tables[1, 5 // 2], slot 5 % 2
    np.testing.assert_array_equal(pool[tables[1, 2], 1], cache[1, 5])
    np.testing.assert_array_equal(gather_from_pool(pool, tables), cache)
