"""vLLM v1's hybrid KV cache groups (``kvsim.core.kv.hybrid``), worked by hand.

Rules (``vllm/v1/core/single_type_kv_cache_manager.py``, ``kv_cache_coordinator.py``): a full
group holds ``cdiv(tokens, B)`` blocks; a sliding group frees, before each allocation, the blocks
whose tokens all precede ``computed - W + 1``; a state group holds one block; a prefix hit counts
as far as every group hits.
"""

from __future__ import annotations

import pytest

from kvsim.base.units import cdiv
from kvsim.config import SimConfig
from kvsim.config.layers import (
    AttentionLayers,
    KVCacheGroup,
    KVCacheGroups,
    kv_cache_groups,
    request_blocks,
)
from kvsim.core.kv.hybrid import HybridPagedAllocator, group_key
from kvsim.core.kv.paged import PagedAllocator
from kvsim.engine.build import allocator_from_config
from kvsim.workload.request import Request
from tests.conftest import make_request

FULL = KVCacheGroup("full", 1)


def groups(*kinds: KVCacheGroup, block: int = 16) -> KVCacheGroups:
    """Groups of one layer each (one slot = one token of one group), ``block`` tokens a block."""
    return KVCacheGroups(tuple(kinds), 1, block, 1)


def three_group_pool(num_blocks: int) -> HybridPagedAllocator:
    """Full + sliding window 1,024 + state, 16-token blocks."""
    kinds = groups(FULL, KVCacheGroup("sliding", 1, 1024), KVCacheGroup("state", 1))
    return HybridPagedAllocator(capacity_tokens=num_blocks * 16, kv_groups=kinds)


def test_5000_token_request_per_group_after_prefill_and_1000_decodes():
    alloc = three_group_pool(1000)
    r = make_request(5000, 2000)
    # prefill, 5,000 tokens in one step, nothing computed yet (nothing skipped):
    #   full    cdiv(5000, 16) = 313 blocks (312.5 -> 313)
    #   sliding cdiv(5000, 16) = 313 blocks: the step's attention reads the whole prompt
    #   state   1 block
    alloc.allocate(r, 5000)
    assert alloc.group_held_blocks(r.req_id) == [313, 313, 1]
    # the first decode step (5,000 computed, room for token 5,001): the sliding group first
    # frees the blocks whose tokens all precede 5000 - 1024 + 1 = 3977: 3977 // 16 = 248 blocks
    # (0..247), so it holds 313 - 248 = 65; the full group still fits in 313 (cdiv(5001, 16))
    r.num_computed_tokens = 5000
    alloc.allocate(r, 5001)
    assert alloc.group_held_blocks(r.req_id) == [313, 65, 1]
    table = alloc.group_tables(r.req_id)[1]
    assert table[:248] == [alloc.null_block] * 248
    assert alloc.null_block not in table[248:]
    # 1,000 decode steps: the last computes token 6,000 (5,999 computed before it)
    #   full    cdiv(6000, 16) = 375 blocks
    #   sliding skipped (5999 - 1024 + 1) // 16 = 4976 // 16 = 311 -> 375 - 311 = 64 blocks
    #   state   still 1 block
    for step in range(1, 1000):
        r.num_computed_tokens = 5000 + step
        alloc.allocate(r, 5001 + step)
    assert alloc.group_held_blocks(r.req_id) == [375, 64, 1]
    assert alloc.held_slots(r.req_id) == (375 + 64 + 1) * 16
    alloc.check_invariants()
    # per group at 6,000 tokens, final length 5000 + 2000 - 1 = 6,999 (no internal waste yet):
    # the sliding group's 64 blocks cover tokens 311 * 16 = 4976 .. 6000 (1,024 token states),
    # of which the 6000 - 1024 - 4976 = 0 before the window: none kept outside it
    held, token, outside, internal = alloc.group_slots(r, 6000)[1]
    assert (held, token, outside, internal) == (64 * 16, 6000 - 4976, 0, 0)
    alloc.free(r.req_id)
    assert alloc.pool.num_free == 999  # all but the null block
    alloc.check_invariants()


def test_sliding_block_partly_inside_the_window_is_kept():
    # W = 1024, B = 16, 1,030 computed: skipped (1030 - 1023) // 16 = 0 blocks; the first block
    # holds tokens 0..15, of which 0..5 lie before the window (1030 - 1024 = 6): "outside" = 6
    alloc = three_group_pool(300)
    r = make_request(1030, 10)
    alloc.allocate(r, 1030)
    r.num_computed_tokens = 1030
    alloc.allocate(r, 1031)
    assert alloc.group_held_blocks(r.req_id) == [65, 65, 1]  # cdiv(1031, 16) = 65
    held, token, outside, _ = alloc.group_slots(r, 1031)[1]
    assert (held, token, outside) == (65 * 16, 1031, 1031 - 1024)


def shared(req_id: int, segs: tuple[tuple[object, int], ...], output: int = 4) -> Request:
    prompt = sum(n for _, n in segs)
    return Request(req_id, 0.0, prompt, output, output, token_segments=segs)


def test_prefix_hits_the_full_group_but_not_the_window_group():
    # full + sliding W = 32, B = 4: a sliding hit needs cdiv(31, 4) = 8 cached blocks ending it.
    # 35 blocks: null (0) + 34.
    kinds = groups(FULL, KVCacheGroup("sliding", 1, 32), block=4)
    alloc = HybridPagedAllocator(
        capacity_tokens=35 * 4, kv_groups=kinds, enable_prefix_caching=True
    )
    a = shared(1, (("doc", 64),))
    alloc.allocate(a, 64)  # 16 full blocks (ids 1..16) + 16 sliding (17..32), all cached
    a.num_computed_tokens = 64
    # a's first decode: the sliding group frees (64 - 32 + 1) // 4 = 8 blocks (ids 17..24,
    # released tail first to the back of the queue, keys kept); both groups take 1 block for
    # token 65 from the front (ids 33, 34): the free queue is then [24, 23, ..., 17]
    alloc.allocate(a, 65)
    assert alloc.group_held_blocks(a.req_id) == [17, 9]
    assert alloc.pool.free_order() == list(range(24, 16, -1))
    b = shared(2, (("doc", 32), ("b", 40)))  # shares a's first 32 tokens = 8 blocks
    # now: full hit = 8 blocks (a's live ids 1..8); the sliding group's blocks 0..7 are free
    # but still cached: 8 in a row end at block 8 -> a hit of 8 blocks = 32 tokens
    hit = alloc.find_cached_prefix(b)
    assert hit.num_tokens == 32
    assert hit.blocks == (*range(1, 9), *range(17, 25))
    # a private request of 16 tokens takes 4 + 4 = 8 blocks: ids 24..17, evicting their keys
    c = make_request(16, 4)
    alloc.allocate(c, 16)
    keys = alloc._stream_keys(b)
    full_hits = [alloc.pool.lookup(group_key(keys.key(i), 0)) for i in range(8)]
    assert full_hits == list(range(1, 9))  # the full group alone still hits 32 tokens
    assert alloc.find_cached_prefix(b).num_tokens == 0  # the window group misses: no hit
    alloc.check_invariants()


def test_state_group_gets_no_prefix_hits():
    # vLLM's MambaManager keeps no prefix states in its default mode: no hit for the model
    kinds = groups(FULL, KVCacheGroup("state", 1), block=4)
    alloc = HybridPagedAllocator(
        capacity_tokens=40 * 4, kv_groups=kinds, enable_prefix_caching=True
    )
    a = shared(1, (("doc", 32),))
    alloc.allocate(a, 32)
    assert alloc.group_held_blocks(a.req_id) == [8, 1]
    assert alloc.find_cached_prefix(shared(2, (("doc", 32), ("x", 8)))).num_tokens == 0


def test_failed_allocation_changes_nothing():
    alloc = three_group_pool(10)  # 9 usable blocks
    r = make_request(64, 4)
    assert alloc.allocate(r, 64) is not None  # 4 + 4 + 1 = 9 blocks
    before = (alloc.pool.num_free, alloc.group_tables(r.req_id))
    r.num_computed_tokens = 64
    assert alloc.allocate(r, 65) is None  # 1 + 1 more, nothing free, nothing skipped
    assert (alloc.pool.num_free, alloc.group_tables(r.req_id)) == before
    with pytest.raises(KeyError, match="unknown req_id"):
        alloc.free(12345)


def gemma(hybrid: bool) -> SimConfig:
    return SimConfig.model_validate(
        {
            "model": {
                "preset": "gemma-3-27b",
                "attention": {
                    "num_sliding_layers": 52,
                    "sliding_window_tokens": 1024,
                    "hybrid_kv_cache": hybrid,
                },
            },
            "gpu": "h100-80gb",
            "cache": {"kv_cache_gib": 20.0},
            "scheduler": {"max_model_len": 8192},
        }
    )


def test_gemma_3_27b_groups_as_vllm_forms_them():
    # 62 layers, 10 global (every 6th): 52 sliding + 10 full. Group size = 10 (52 >= 1.5 x 10);
    # full: 1 group of 10; sliding: cdiv(52, 10) = 6 groups dealt round robin (9,9,9,9,8,8),
    # 60 - 52 = 8 padding layers; layer 0 slides, so the sliding groups come first (vLLM forms
    # the groups in the order the layers register)
    g = gemma(True).kv_groups
    assert g is not None
    assert g.kinds == ("sliding",) * 6 + ("full",)
    assert [x.num_real_layers for x in g.groups] == [9, 9, 9, 9, 8, 8, 10]
    assert (g.layers_per_group, g.num_padding_layers) == (10, 8)
    # one layer's K and V of one token: 2 x 16 heads x 128 x 2 bytes = 8,192 bytes
    assert g.slot_bytes == 10 * 8192
    assert g.block_bytes == 16 * 10 * 8192  # 1.25 MiB


def test_gemma_3_27b_capacity_hybrid_vs_every_layer_full():
    # 20 GiB = 21,474,836,480 bytes of KV.
    # hybrid: blocks of 1.25 MiB (1,310,720 B): 16,384 blocks, 16,383 usable (null block)
    # all-full: blocks of 16 x 62 x 8,192 = 8,126,464 B: 2,642 blocks (2,643 would need
    #   21,478,244,352 B), 2,641 usable
    hybrid, full = allocator_from_config(gemma(True)), allocator_from_config(gemma(False))
    assert isinstance(hybrid, HybridPagedAllocator)
    assert isinstance(full, PagedAllocator)
    assert (hybrid.num_blocks, full.num_blocks) == (16_384, 2_642)
    # an 8,192-token prompt decoding its first token (room for 8,193):
    #   hybrid: full 513 blocks + 6 sliding x (513 - (8192 - 1023) // 16 = 513 - 448 = 65) = 903
    #   all-full: 513 blocks
    # its whole-prompt prefill needs 7 x 512 = 3,584 blocks (hybrid) or 512 (all-full) free.
    # hybrid: k decoders leave 16,383 - 903 k >= 3,584 for k <= 14, so a 15th is admitted and a
    #   16th is not (16,383 - 15 x 903 = 2,838 < 3,584): 15 requests;
    # all-full: 2,641 - 513 k >= 512 for k <= 4: 5 requests (2,641 - 2,565 = 76 left).
    # (in steady decode alone: 16,383 // 903 = 18 vs 2,641 // 513 = 5)
    counts = []
    for alloc in (hybrid, full):
        n = 0
        while True:
            r = make_request(8192, 100)
            if alloc.allocate(r, 8192) is None:
                break
            r.num_computed_tokens = 8192
            assert alloc.allocate(r, 8193) is not None
            n += 1
        counts.append(n)
        if isinstance(alloc, HybridPagedAllocator):
            assert alloc.held_slots(r.req_id - 1) == 903 * 16
    assert counts == [15, 5]


def test_hybrid_off_or_other_policies_fall_back_to_full_attention():
    assert gemma(False).kv_groups is None
    assert gemma(False).bytes_per_token == 62 * 8192
    cfg = gemma(True).model_copy()
    slab = SimConfig.model_validate(
        {**cfg.model_dump(), "cache": {"allocator": "first_fit", "kv_cache_gib": 20.0}}
    )
    assert slab.kv_groups is None  # warned: every attention layer kept whole


def test_state_layers_raise_the_block_size_and_cannot_be_turned_full():
    # Qwen3-Next: 12 full + 36 Gated DeltaNet layers; 1,097,728 state bytes per layer; a
    # token's K and V in one layer 2 x 2 heads x 256 x 2 = 2,048 bytes: a page must hold
    # cdiv(1097728, 2048) = 536 tokens -> 544 (multiple of 16); group size 12: 1 full + 3 state
    attention = AttentionLayers(num_state_layers=36, state_bytes_per_layer=1_097_728)
    g = kv_cache_groups(48, attention, 2048, 16)
    assert g.kinds == ("full", "state", "state", "state")
    assert (g.block_size_tokens, g.layers_per_group) == (544, 12)
    # vLLM aligns to max(16, block_size) tokens (_align_hybrid_block_size): at block 64 a page
    # of 64 x cdiv(1097728, 64 x 2048) = 64 x 9 = 576 tokens (a multiple of 16 alone: 544); at
    # block 32, 32 x cdiv(1097728, 65536) = 32 x 17 = 544; a block above the need stays
    assert kv_cache_groups(48, attention, 2048, 64).block_size_tokens == 576
    assert kv_cache_groups(48, attention, 2048, 32).block_size_tokens == 544
    assert kv_cache_groups(48, attention, 2048, 1024).block_size_tokens == 1024
    with pytest.raises(ValueError, match="hybrid_kv_cache: false cannot treat 36 state"):
        AttentionLayers(num_state_layers=36, state_bytes_per_layer=1, hybrid_kv_cache=False)
    with pytest.raises(ValueError, match="num_sliding_layers and sliding_window_tokens"):
        AttentionLayers(num_sliding_layers=4)


def test_a_state_group_holds_a_block_per_draft_under_speculative_decoding():
    # vLLM 0.34.0: a Mamba layer's spec has num_speculative_blocks = num_speculative_tokens
    # (mamba/abstract.py); in mamba_cache_mode "none" MambaManager asks for
    # num_tokens + block_size * k tokens of blocks whose block_size is max_model_len, so a
    # request holds 1 + k blocks of each state group from admission. k = 3, 16-token blocks,
    # a full and a state group of one layer each:
    kinds = KVCacheGroups((FULL, KVCacheGroup("state", 1)), 1, 16, 1, state_blocks_per_request=4)
    alloc = HybridPagedAllocator(capacity_tokens=100 * 16, kv_groups=kinds)
    r = make_request(100, 50)
    # admission with 3 lookahead slots: 103 tokens -> full cdiv(103, 16) = 7, state 1 + 3 = 4
    alloc.allocate(r, 103)
    assert alloc.group_held_blocks(r.req_id) == [7, 4]
    # its decode steps take nothing more in the state group: at 150 tokens, full cdiv(150, 16)
    r.num_computed_tokens = 146
    alloc.allocate(r, 150)
    assert alloc.group_held_blocks(r.req_id) == [10, 4]
    # the state group's slots: 4 blocks held, one block (16 slots) of state, 48 reserved
    held, token, outside, internal = alloc.group_slots(r, 147)[1]
    assert (held, token, outside, internal) == (64, 16, 0, 0)
    alloc.free(r.req_id)
    assert alloc.pool.num_free == 99
    alloc.check_invariants()
    # the groups of a config: Qwen3-Next's state groups under EAGLE k = 3 hold 4 blocks each;
    # one max_model_len request at startup: 1 full group cdiv(L, B) + 3 state groups x 4
    attention = AttentionLayers(num_state_layers=36, state_bytes_per_layer=1_097_728)
    g = kv_cache_groups(48, attention, 2048, 16, num_speculative_tokens=3)
    assert g.state_blocks_per_request == 4
    assert request_blocks(g, 8192, 8192, startup=True) == cdiv(8192, 544) + 3 * 4
    assert kv_cache_groups(48, attention, 2048, 16).state_blocks_per_request == 1


def test_block_leaving_the_window_but_shared_frees_nothing():
    # full + sliding W = 8, B = 4 (a sliding hit needs cdiv(7, 4) = 2 blocks); 12 blocks: null + 11
    kinds = groups(FULL, KVCacheGroup("sliding", 1, 8), block=4)
    alloc = HybridPagedAllocator(
        capacity_tokens=12 * 4, kv_groups=kinds, enable_prefix_caching=True
    )
    a = shared(1, (("doc", 16),), output=20)
    alloc.allocate(a, 16)  # full 1..4, sliding 5..8
    b = shared(2, (("doc", 16), ("b", 4)))
    hit = alloc.find_cached_prefix(b)  # 16 tokens: full 1..4, sliding [null, null, 7, 8]
    assert hit.blocks[4:] == (alloc.null_block, alloc.null_block, 7, 8)
    alloc.allocate(b, 20, hit)  # 1 new block in each group (9, 10): 10 blocks used
    a.num_computed_tokens = 16
    alloc.allocate(a, 17)  # skip (16 - 7) // 4 = 2: frees 5, 6; takes 1 + 1: 10 used, 1 free
    assert alloc.pool.num_free == 1
    # a computes tokens 17..20 in one chunk: skip (20 - 7) // 4 = 3 puts block 7 out of a's
    # window, but b still holds it, so it frees nothing; the chunk needs 1 full + 1 sliding
    # block (cdiv(21, 4) = 6 > 5): 2 > 1 free -> refused. As in vLLM, block 7 has left a's
    # table first (ref count 2 -> 1, b's), and nothing was taken.
    a.num_computed_tokens = 20
    full, sliding = alloc.group_tables(a.req_id)
    assert not alloc.can_allocate(a, 21)
    assert alloc.allocate(a, 21) is None
    assert alloc.group_tables(a.req_id) == [full, [*sliding[:2], alloc.null_block, *sliding[3:]]]
    assert (alloc.pool.num_free, alloc.pool.ref(7)) == (1, 1)
    alloc.check_invariants()


@pytest.mark.parametrize("caching", [True, False])
def test_blocks_two_windows_free_go_back_group_by_group(caching):
    # full + two sliding groups (W = 8), B = 4; 20 blocks: the null block and 19 free, taken
    # from the front in group order (vLLM allocates group by group)
    kinds = groups(FULL, KVCacheGroup("sliding", 1, 8), KVCacheGroup("sliding", 1, 8), block=4)
    alloc = HybridPagedAllocator(
        capacity_tokens=20 * 4, kv_groups=kinds, enable_prefix_caching=caching
    )
    assert alloc.pool.free_order() == list(range(1, 20))
    r = make_request(16, 8)
    alloc.allocate(r, 16)  # cdiv(16, 4) = 4 blocks a group: 1..4, 5..8, 9..12
    assert alloc.group_tables(r.req_id) == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
    # first decode (16 computed): each window skips (16 - 8 + 1) // 4 = 2 blocks, freed group
    # by group, each table tail first (vLLM remove_skipped_blocks per manager), then each group
    # takes cdiv(17, 4) - 4 = 1 block
    r.num_computed_tokens = 16
    alloc.allocate(r, 17)
    null = alloc.null_block
    full, first, second = alloc.group_tables(r.req_id)
    assert first[:2] == second[:2] == [null, null]
    if caching:
        # full blocks go to the back: 6, 5 (first window), then 10, 9 (second); the three
        # new blocks come from the front: 13, 14, 15
        assert (full[-1], first[-1], second[-1]) == (13, 14, 15)
        assert alloc.pool.free_order() == [16, 17, 18, 19, 6, 5, 10, 9]
    else:
        # uncached blocks go to the front, the last freed first: 10, 9, 6, 5 are taken next,
        # so the full group gets 10, the first window 9 and the second 6
        assert (full[-1], first[-1], second[-1]) == (10, 9, 6)
        assert alloc.pool.free_order() == [5, *range(13, 20)]
    alloc.check_invariants()


def test_a_request_whose_windows_fit_is_run_not_rejected_at_intake():
    """Gemma-3-27B on 6 GiB: blocks of 16 tokens x 81,920 B a group token = 1.25 MiB, so
    6 GiB / 1.25 MiB = 4,915 blocks, 4,914 beside the null block. A 16,100-token request
    holds cdiv(16,100, 16) = 1,007 blocks in the full group and, at its peak, each sliding
    group cdiv(1,024 - 1 + 8,192, 16) + 1 = 577 (the window plus an H100 step's 8,192
    tokens): 1,007 + 6 x 577 = 4,469 <= 4,914, so it runs (vLLM's startup check counts a
    max_model_len request the same way). Counted as 7 x 1,007 = 7,049 blocks it was rejected."""
    from kvsim.engine import simulate

    config = SimConfig.model_validate(
        {
            "model": "gemma-3-27b",
            "gpu": "h100-80gb",
            "cache": {"kv_cache_gib": 6},
            "scheduler": {"max_model_len": 16_500},
            "workload": {
                "lengths": "fixed",
                "fixed_prompt_tokens": 16_000,
                "fixed_output_tokens": 100,
                "num_requests": 3,
            },
        }
    )
    assert allocator_from_config(config).pool.num_blocks == 4_915
    summary = simulate(config).summary
    assert summary["num_requests_rejected"] == 0
    assert summary["num_requests"] == 3


def test_bytes_a_prefix_hit_saves_count_every_layer():
    """A hit skips the prefill of its tokens in all 62 of Gemma-3-27B's layers: 62 x 8,192 B =
    507,904 bytes a token (padding layers write nothing), not one 10-layer group's 81,920."""
    from kvsim.engine import simulate

    config = SimConfig.model_validate(
        {
            "model": "gemma-3-27b",
            "gpu": "h100-80gb",
            "scheduler": {"max_model_len": 8192},
            "workload": {"preset": "shared_system_prompt", "num_requests": 40},
        }
    )
    summary = simulate(config).summary
    hits = summary["prefix_cache_hits"] + summary["prefix_cache_preempted_hits"]
    assert hits > 0
    assert summary["prefix_cache_saved_bytes"] == hits * 62 * 8192
