"""``CountedFreeQueue`` (block positions from counts) against ``BlockPool`` (real block ids) under
random takes, releases with cached keys and partial blocks (``BlockPool.release_table``) and cache
hits: the same hits, guards and evictions."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.allocators.block_pool import BlockPool
from kvsim.allocators.counted_queue import CountedFreeQueue, ReleasedTable

OPS = st.lists(
    st.tuples(
        st.sampled_from(["take", "release", "hit"]),
        st.integers(0, 10),  # blocks to take / which table / blocks taken after the hits
        st.integers(0, 12),  # blocks that keep a key / the lookup's cap
        st.integers(0, 3),  # blocks past the keyed ones that are full too
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(num_blocks=st.integers(2, 32), ops=OPS)
def test_positions_from_counts_give_the_pools_hits_guards_and_evictions(num_blocks, ops) -> None:
    pool = BlockPool(num_blocks, reserve_null_block=True)
    queue = CountedFreeQueue(num_blocks)
    held: list[tuple[list[int], list[int]]] = []  # tables in use: blocks, keys of the first
    released: list[tuple[list[int], ReleasedTable]] = []  # freed tables, keys of the first
    next_key = 0
    for op, a, c, d in ops:
        if op == "take" and a <= pool.num_free:
            held.append((pool.take(a), []))
            queue.take(a)
        elif op == "release" and held:
            blocks, keys = held.pop(a % len(held))
            keep = min(len(blocks), max(len(keys), c))  # its first `keep` blocks are cached
            for block in blocks[len(keys) : keep]:
                pool.register(block, next_key)
                keys.append(next_key)
                next_key += 1
            full = min(len(blocks), keep + d)  # the rest, partial, go to the front
            pool.release_table(blocks, full)
            released.append((keys, queue.release(len(blocks), full, keep)))
        elif op == "hit" and released:
            keys, table = released.pop(a % len(released))
            hits = []
            for key in keys[:c]:  # the lookup stops at the first evicted block
                block = pool.lookup(key)
                if block is None:
                    break
                hits.append(block)
            assert queue.num_hits(table, c, pool.num_free) == len(hits)
            if hits:
                ahead = min(pool.free_blocks_ahead(block) for block in hits)
                assert queue.blocks_before_evicting(table, len(hits), pool.num_free) == ahead
            pool.touch(hits)
            queue.touch(table, len(hits))
            extra = min(a % 5, pool.num_free)
            held.append((hits + pool.take(extra), keys[: len(hits)]))
            queue.take(extra)
    queue.head(pool.num_free)
    assert queue.num_evictions == pool.num_evictions
    pool.check()


def test_a_hand_worked_queue() -> None:
    # 6 blocks, block 0 the null block: free queue [1 2 3 4 5], head at position 1
    pool_free = 5
    queue = CountedFreeQueue(6)
    pool_free -= 3  # blocks 1 2 3 taken
    queue.take(3)
    table = queue.release(3, 3, 2)  # all full, tail first: 3 at 6, 2 at 7, 1 at 8; 1, 2 keyed
    pool_free += 3
    assert (table.last, table.num_keyed) == (8, 2)
    assert queue.head(pool_free) == 4  # queue [4 5 3 2 1] from position 4
    assert queue.num_hits(table, 5, pool_free) == 2
    assert queue.blocks_before_evicting(table, 2, pool_free) == 3  # 4 5 3 before block 2
    pool_free -= 4  # takes 4 5 3 2: block 2's key is evicted
    queue.take(4)
    assert queue.num_hits(table, 5, pool_free) == 1
    assert queue.num_evictions == 1


def test_a_partial_block_goes_to_the_front() -> None:
    # 6 blocks, block 0 the null block: free queue [1 2 3 4 5], head at position 1. A table
    # 1 2 3 whose blocks 1, 2 are full and keyed and 3 partial is released: 3 to the front,
    # 2 at position 6, 1 at 7 (BlockPool.release_table): queue [3 | 4 5 | 2 1]
    pool_free = 5 - 3
    queue = CountedFreeQueue(6)
    queue.take(3)
    table = queue.release(3, 2, 2)
    pool_free += 3
    assert (table.last, queue.front) == (7, 1)
    assert queue.head(pool_free) == 4  # 5 free: 1 at the front, 4 5 2 1 from position 4
    assert queue.blocks_before_evicting(table, 2, pool_free) == 3  # 3 4 5 before block 2
    pool_free -= 3  # takes 3 (the front), 4, 5: no key evicted yet
    queue.take(3)
    assert (queue.front, queue.head(pool_free)) == (0, 6)
    assert queue.num_hits(table, 5, pool_free) == 2
    assert queue.num_evictions == 0
