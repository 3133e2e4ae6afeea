"""vLLM's own hybrid KV cache manager tests, replayed on kvsim's hybrid groups one by one.

Each test names the vLLM test it follows (``tests/v1/core/test_single_type_kv_cache_manager.py``,
``test_prefix_caching.py``, ``test_kv_cache_utils.py``); the scenarios are described in our own
words and every expected number is vLLM's, worked out by hand in the comments from its rules:

- a sliding group of window W frees the blocks whose tokens all precede ``computed - W + 1``,
  tail first, the null block taking their place (``SlidingWindowManager.remove_skipped_blocks``);
- a sliding group's hit ends at the first run, from the right, of ``cdiv(W - 1, B)`` cached
  blocks, or is the cached run from the start (``SlidingWindowManager.find_longest_cache_hit``);
- layers of each kind split into groups of the fewest layers of any kind, or of the most when
  every kind has fewer than 1.5x the fewest (``_get_kv_cache_groups_uniform_page_size``).
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings
from librt.vecs import vec
from mypy_extensions import i64

from kvsim.config.layers import AttentionLayers, KVCacheGroup, KVCacheGroups, kv_cache_groups
from kvsim.core.kv.hybrid import HybridPagedAllocator, group_key
from kvsim.workload.request import Request


def sliding_pool(window: int, block: int, num_blocks: int) -> HybridPagedAllocator:
    """One sliding-window group of one layer (vLLM's ``get_sliding_window_manager``)."""
    kinds = KVCacheGroups((KVCacheGroup("sliding", 1, window),), 1, block, 1)
    return HybridPagedAllocator(
        capacity_tokens=num_blocks * block, kv_groups=kinds, enable_prefix_caching=True
    )


def test_sliding_window_remove_skipped_blocks():
    # vLLM test_single_type_kv_cache_manager.py::test_sliding_window_remove_skipped_blocks:
    # block size 2, window 4, a request holding 11 blocks (22 tokens; here ids 1..11)
    alloc = sliding_pool(4, 2, 20)
    req = Request(1, 0.0, 22, 4, 4)
    alloc.allocate(req, 22)
    null = alloc.null_block
    ids = list(range(1, 12))

    def after(computed: int) -> list[int]:
        req.num_computed_tokens = computed
        alloc.allocate(req, 22)  # nothing new: only the skipped blocks are freed
        return alloc.group_tables(req.req_id)[0]

    assert after(0) == ids
    # 4 computed: skip 4 - 4 + 1 = 1 token: block 0 still holds token 1, inside the window
    assert after(4) == ids
    # 5 computed: tokens 0, 1 skipped -> block 0 freed
    assert after(5) == [null, *ids[1:]]
    # 6 computed: tokens 0..2: block 1 still holds token 3
    assert after(6) == [null, *ids[1:]]
    # 7 computed: tokens 0..3 -> block 1 freed too
    assert after(7) == [null] * 2 + ids[2:]
    free_before = alloc.pool.free_order()
    # 11 computed: tokens 0..7 -> blocks 2 and 3 freed, the later one first (it stands for the
    # longer prefix, so it should be evicted first): the free queue gets [4, 3] (ids of blocks
    # 3 and 2) at its back
    assert after(11) == [null] * 4 + ids[4:]
    assert alloc.pool.free_order() == [*free_before, 4, 3]
    alloc.check_invariants()


def _key(i: int) -> int:
    """Block ``i``'s key: 1, 2, 3, ... (vLLM's test hashes ``str(i)``)."""
    return i + 1


def test_sliding_window_possible_cached_prefix():
    # vLLM test_single_type_kv_cache_manager.py::test_sliding_window_possible_cached_prefix:
    # block size 2, window 4: a hit needs cdiv(4 - 1, 2) = 2 cached blocks in a row at its end
    cases = [
        ([False] * 10, 0),
        ([True], 1),
        ([True, False], 1),
        ([True, True], 2),
        ([True, True, False], 2),
        ([True, True, True], 3),
        ([True, True, True, False], 3),
        ([True, True, False, True, False, False, True, True, False, True, True, True], 12),
        ([True, True, False, True, False, False, True, True, False, False, False], 8),
        # a lone cached block at the end starts no run of 2: the run ending at block 7 wins
        ([True, True, False, True, False, False, True, True, False, False, False, True], 8),
    ]
    for cached, expected in cases:
        alloc = sliding_pool(4, 2, 40)
        for i, is_cached in enumerate(cached):
            if is_cached:  # block i + 10 caches block i's key, as vLLM's mock does
                alloc.pool.register(i + 10, group_key(_key(i), 0))
        keys = vec[i64]([_key(i) for i in range(len(cached))])
        assert alloc._sliding_hit(keys, 0, len(cached)) == expected, cached


def _naive_sliding_hit(cached: list[bool], need: int) -> int:
    """The rule, block by block: the rightmost ``need`` cached blocks in a row end the hit;
    without such a run, the cached blocks from the start."""
    for i in range(len(cached) - need, -1, -1):
        if all(cached[i : i + need]):
            return i + need
    lead = 0
    while lead < len(cached) and cached[lead]:
        lead += 1
    return lead


@settings(max_examples=300, deadline=None)
@given(
    cached=st.lists(st.booleans(), max_size=60),
    block=st.integers(1, 4),
    window=st.integers(2, 24),
)
def test_sliding_hit_probing_finds_what_a_scan_of_every_block_finds(
    cached: list[bool], block: int, window: int
) -> None:
    # _sliding_hit probes every need-th block; the answer must be the naive rule's (need =
    # cdiv(window - 1, block) cached blocks in a row)
    alloc = sliding_pool(window, block, 80)
    for i, is_cached in enumerate(cached):
        if is_cached:
            alloc.pool.register(i + 10, group_key(_key(i), 0))
    keys = vec[i64]([_key(i) for i in range(len(cached))])
    need = -(-(window - 1) // block)
    assert alloc._sliding_hit(keys, 0, len(cached)) == _naive_sliding_hit(cached, need)


def test_prefill_hybrid_model_hit_only_where_every_group_hits():
    # vLLM test_prefix_caching.py::test_prefill_hybrid_model (full + sliding groups): a second
    # request with the same prompt hits the blocks every group still caches. Block size 4,
    # window 8: a sliding hit needs cdiv(7, 4) = 2 blocks ending it.
    kinds = KVCacheGroups((KVCacheGroup("full", 1), KVCacheGroup("sliding", 1, 8)), 1, 4, 1)
    alloc = HybridPagedAllocator(
        capacity_tokens=60 * 4, kv_groups=kinds, enable_prefix_caching=True
    )
    a = Request(1, 0.0, 28, 4, 4, token_segments=(("p", 28),))
    alloc.allocate(a, 28)  # 7 full blocks (ids 1..7) and 7 sliding blocks (ids 8..14), cached
    b = Request(2, 0.0, 28, 4, 4, token_segments=(("p", 28),))
    hit = alloc.find_cached_prefix(b)
    # at most (28 - 1) // 4 = 6 blocks; the full group hits 6; the sliding group's blocks 4, 5
    # end a cached run of 2 -> hit 6 blocks, blocks 0..3 of the sliding table are null
    null = alloc.null_block
    assert hit.num_tokens == 24
    assert hit.blocks == (1, 2, 3, 4, 5, 6, null, null, null, null, 12, 13)
    alloc.allocate(b, 28, hit)
    b.num_computed_tokens = 24
    assert alloc.group_held_blocks(b.req_id) == [7, 3]  # 6 hits + 1; 2 hits + 1 new
    alloc.check_invariants()


def test_get_kv_cache_groups_uniform_page_size():
    # vLLM test_kv_cache_utils.py (hybrid cases of get_kv_cache_config / the grouping helper)
    # 2 full + 4 sliding: group size 2, the sliding layers dealt round robin into 2 groups
    g = kv_cache_groups(6, AttentionLayers(num_sliding_layers=4, sliding_window_tokens=4), 8, 16)
    assert g.kinds == ("full", "sliding", "sliding")
    assert g.layers_per_group == 2
    # 13 full + 12 sliding (vLLM's gpt-oss-20b + EAGLE comment): 13 < 1.5 x 12, so groups of
    # 13 with one padding layer, not 12 + 2 x 12 full
    g = kv_cache_groups(
        25, AttentionLayers(num_sliding_layers=12, sliding_window_tokens=128), 8, 16
    )
    assert g.kinds == ("full", "sliding")
    assert (g.layers_per_group, g.num_padding_layers) == (13, 1)
    # every layer sliding (Mistral-7B-v0.1): one group of all 32
    g = kv_cache_groups(
        32, AttentionLayers(num_sliding_layers=32, sliding_window_tokens=4096), 8, 16
    )
    assert (g.kinds, g.layers_per_group) == (("sliding",), 32)
