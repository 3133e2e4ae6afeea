"""``CountedFreeQueue`` (block positions from counts) against ``BlockPool`` (real block ids) under
random takes, releases with cached keys and cache hits: the same hits, guards and evictions."""

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
    for op, a, c in ops:
        if op == "take" and a <= pool.num_free:
            held.append((pool.take(a), []))
        elif op == "release" and held:
            blocks, keys = held.pop(a % len(held))
            keep = min(len(blocks), max(len(keys), c))  # its first `keep` blocks are cached
            for block in blocks[len(keys) : keep]:
                pool.register(block, next_key)
                keys.append(next_key)
                next_key += 1
            pool.release(reversed(blocks))
            released.append((keys, queue.release(len(blocks), keep)))
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
    queue.head(pool.num_free)
    assert queue.num_evictions == pool.num_evictions
    pool.check()


def test_a_hand_worked_queue() -> None:
    # 6 blocks, block 0 the null block: free queue [1 2 3 4 5], head at position 1
    pool_free = 5
    queue = CountedFreeQueue(6)
    pool_free -= 3  # blocks 1 2 3 taken
    table = queue.release(3, 2)  # released tail first: 3 at 6, 2 at 7, 1 at 8; 1 and 2 keyed
    pool_free += 3
    assert (table.last, table.num_keyed) == (8, 2)
    assert queue.head(pool_free) == 4  # queue [4 5 3 2 1] from position 4
    assert queue.num_hits(table, 5, pool_free) == 2
    assert queue.blocks_before_evicting(table, 2, pool_free) == 3  # 4 5 3 before block 2
    pool_free -= 4  # takes 4 5 3 2: block 2's key is evicted
    assert queue.num_hits(table, 5, pool_free) == 1
    assert queue.num_evictions == 1
