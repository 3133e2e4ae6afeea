"""NumPy reference of the calibration microkernel's maths, and the block-table helpers it shares.

The kernel (``kernel.py``) computes single-token decode attention with grouped-query heads: for
each sequence ``b`` and query head ``h`` (KV head ``h // group``),

    out[b, h] = softmax(scale * K_b[:ctx_b] @ q[b, h]) @ V_b[:ctx_b],    scale = 1 / sqrt(head_dim)

streaming over tokens with an online softmax: token ``t`` goes to partial ``t % num_warps`` (one
warp each), every partial keeps a running max ``m``, sum ``l`` and accumulator ``acc``, and the
partials are merged at the end. ``decode_attention_online`` does exactly that in float32;
``naive_attention`` is the textbook per-sequence softmax in float64 that both are checked against.

Layouts (fp16 in the kernel; any float dtype here):

    contiguous  k[b, t, kv_head, d]                      (one buffer region per sequence)
    paged       pool[block_tables[b, t // B], t % B, kv_head, d]   (blocks shuffled in the pool)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.floating[Any]]
IntArray = npt.NDArray[np.integer[Any]]


def make_block_tables(
    rng: np.random.Generator, batch_size: int, context_tokens: int, block_size_tokens: int
) -> npt.NDArray[np.int32]:
    """Block tables of ``batch_size`` sequences over a shuffled pool of exactly the blocks needed.

    Returns:
        int32[batch_size, cdiv(context_tokens, block_size_tokens)]; each pool block once.
    """
    blocks_per_seq = -(context_tokens // -block_size_tokens)
    perm = rng.permutation(batch_size * blocks_per_seq).astype(np.int32)
    return perm.reshape(batch_size, blocks_per_seq)


def scatter_to_pool(cache: Any, block_tables: Any, block_size_tokens: int, xp: Any = np) -> Any:
    """Copy a contiguous cache into a block pool through block tables (NumPy or CuPy via ``xp``).

    Args:
        cache: [batch, max_ctx, num_kv_heads, head_dim], ``max_ctx`` a multiple of B.
        block_tables: int32[batch, max_ctx // block_size_tokens].

    Returns:
        pool [block_tables.size, block_size_tokens, num_kv_heads, head_dim].
    """
    batch, max_ctx, kv_heads, head_dim = cache.shape
    per_seq = max_ctx // block_size_tokens
    assert per_seq * block_size_tokens == max_ctx, (
        f"{max_ctx} not a multiple of {block_size_tokens}"
    )
    pool = xp.empty((block_tables.size, block_size_tokens, kv_heads, head_dim), dtype=cache.dtype)
    pool[block_tables.reshape(-1)] = cache.reshape(
        batch * per_seq, block_size_tokens, kv_heads, head_dim
    )
    return pool


def gather_from_pool(pool: FloatArray, block_tables: IntArray) -> FloatArray:
    """Inverse of ``scatter_to_pool``: [batch, blocks_per_seq * B, num_kv_heads, head_dim]."""
    batch, per_seq = block_tables.shape
    _, block, kv_heads, head_dim = pool.shape
    return pool[block_tables.reshape(-1)].reshape(batch, per_seq * block, kv_heads, head_dim)


def decode_attention_online(
    q: FloatArray, k: FloatArray, v: FloatArray, context_lens: IntArray, num_warps: int = 8
) -> npt.NDArray[np.float32]:
    """The kernel's maths in float32: striped online softmax over tokens, partials merged.

    Args:
        q: [batch, num_heads, head_dim] query of the one decoded token per sequence.
        k, v: [batch, max_ctx, num_kv_heads, head_dim] contiguous caches.
        context_lens: int[batch] tokens each sequence attends to (1 <= ctx <= max_ctx).
        num_warps: partials the tokens are striped over (the kernel's ``NUM_WARPS``).

    Returns:
        float32[batch, num_heads, head_dim].
    """
    batch, num_heads, head_dim = q.shape
    kv_heads = k.shape[2]
    group = num_heads // kv_heads
    scale = np.float32(1.0 / np.sqrt(head_dim))
    qg = q.astype(np.float32).reshape(batch, kv_heads, group, head_dim)
    m = np.full((num_warps, batch, kv_heads, group), -np.inf, np.float32)
    l_sum = np.zeros_like(m)
    acc = np.zeros((num_warps, batch, kv_heads, group, head_dim), np.float32)
    lens = np.asarray(context_lens)
    for t in range(int(lens.max())):
        w = t % num_warps
        live = (t < lens)[:, None, None]  # [batch, 1, 1]
        kt = k[:, t].astype(np.float32)  # [batch, kv_heads, d]
        vt = v[:, t].astype(np.float32)
        s = np.einsum("bhgd,bhd->bhg", qg, kt) * scale
        m_new = np.where(live, np.maximum(m[w], s), m[w])
        with np.errstate(invalid="ignore"):
            alpha = np.where(np.isneginf(m[w]), 0.0, np.exp(m[w] - m_new)).astype(np.float32)
        p = np.where(live, np.exp(s - m_new), 0.0).astype(np.float32)
        alpha = np.where(live, alpha, 1.0).astype(np.float32)
        l_sum[w] = l_sum[w] * alpha + p
        acc[w] = acc[w] * alpha[..., None] + p[..., None] * vt[:, :, None, :]
        m[w] = m_new
    big_m = m.max(axis=0)
    with np.errstate(invalid="ignore"):
        weight = np.where(np.isneginf(m), 0.0, np.exp(m - big_m)).astype(np.float32)
    total = (l_sum * weight).sum(axis=0)
    out = (acc * weight[..., None]).sum(axis=0) / total[..., None]
    result: npt.NDArray[np.float32] = out.reshape(batch, num_heads, head_dim).astype(np.float32)
    return result


def paged_decode_attention(
    q: FloatArray,
    k_pool: FloatArray,
    v_pool: FloatArray,
    block_tables: IntArray,
    context_lens: IntArray,
    num_warps: int = 8,
) -> npt.NDArray[np.float32]:
    """``decode_attention_online`` reading K/V through block tables from a pool.

    Args:
        k_pool, v_pool: [num_blocks, block_size, num_kv_heads, head_dim].
        block_tables: int[batch, blocks_per_seq] physical block of each logical block.
    """
    return decode_attention_online(
        q,
        gather_from_pool(k_pool, block_tables),
        gather_from_pool(v_pool, block_tables),
        context_lens,
        num_warps,
    )


def naive_attention(
    q: FloatArray, k: FloatArray, v: FloatArray, context_lens: IntArray
) -> npt.NDArray[np.float64]:
    """Textbook softmax attention, one sequence and one head at a time, in float64.

    Args:
        q: [batch, num_heads, head_dim]; k, v: [batch, max_ctx, num_kv_heads, head_dim].
        context_lens: int[batch].

    Returns:
        float64[batch, num_heads, head_dim].
    """
    batch, num_heads, head_dim = q.shape
    group = num_heads // k.shape[2]
    out = np.zeros((batch, num_heads, head_dim), np.float64)
    for b in range(batch):
        ctx = int(context_lens[b])
        for h in range(num_heads):
            keys = k[b, :ctx, h // group].astype(np.float64)
            vals = v[b, :ctx, h // group].astype(np.float64)
            scores = keys @ q[b, h].astype(np.float64) / np.sqrt(head_dim)
            weights = np.exp(scores - scores.max())
            out[b, h] = (weights / weights.sum()) @ vals
    return out
