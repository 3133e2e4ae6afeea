"""Small pools the hand-worked allocator tests share."""

from __future__ import annotations

from kvsim.core.kv import make_allocator


def v1_pool(caching: bool = True):
    """vLLM v1's pool: 9 blocks of 4 tokens, block 0 the null block, so 1..8 are handed out;
    prefix caching on unless ``caching`` is false."""
    return make_allocator(
        "paged",
        capacity_tokens=4 * 9,
        block_size_tokens=4,
        enable_prefix_caching=caching,
        reserve_null_block=True,
    )
