"""Ref-counted KV blocks with an LRU free queue that keeps cached contents (vLLM v1 BlockPool).

Ordering contract (tested exactly):

- a block whose ref count drops to 0 joins the *back* of the free queue, keeping its key, so it is
  still a cache hit until something takes it;
- new blocks are taken from the *front* (least recently freed first), and only then is the old
  key dropped from the cache map;
- a cache hit on a free block (ref 0) removes it from the queue wherever it sits.

    free queue:  front [7 3 9 ... 12] back      take() -> 7 (evict 7's key), decref(x) -> ... x]
"""

from __future__ import annotations

from collections import OrderedDict


class BlockPool:
    """``num_blocks`` blocks: ref counts, keys of cached full blocks, and the free queue.

    Invariants: a block is in the free queue iff its ref count is 0; ``cached`` maps each key to
    the one block holding it and ``block_key`` is its inverse; cached blocks are evictable
    (ref 0) or protected (ref > 0), never both.
    """

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.ref_cnt = [0] * num_blocks
        self.block_key: list[int | None] = [None] * num_blocks
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self.cached: dict[int, int] = {}
        self.num_evictions = 0

    @property
    def num_free(self) -> int:
        """Blocks with ref count 0 (cached or empty)."""
        return len(self.free_queue)

    def free_order(self) -> list[int]:
        """Free block ids, front (taken next) first."""
        return list(self.free_queue)

    def ref(self, block_id: int) -> int:
        return self.ref_cnt[block_id]

    def take(self) -> int:
        """Take the front free block, evicting its cached key; it leaves with ref count 1."""
        block_id, _ = self.free_queue.popitem(last=False)
        key = self.block_key[block_id]
        if key is not None:
            del self.cached[key]
            self.block_key[block_id] = None
            self.num_evictions += 1
        self.ref_cnt[block_id] = 1
        return block_id

    def incref(self, block_id: int) -> None:
        """One more table entry points at the block (a cache hit revives a free one)."""
        if self.ref_cnt[block_id] == 0:
            del self.free_queue[block_id]
        self.ref_cnt[block_id] += 1

    def decref(self, block_id: int) -> None:
        """One table entry fewer; at 0 the block goes to the back of the free queue."""
        self.ref_cnt[block_id] -= 1
        assert self.ref_cnt[block_id] >= 0, f"block {block_id}: negative ref count"
        if self.ref_cnt[block_id] == 0:
            self.free_queue[block_id] = None

    def lookup(self, key: int) -> int | None:
        """The block caching ``key``, or ``None``."""
        return self.cached.get(key)

    def register(self, block_id: int, key: int) -> None:
        """Cache a full block under ``key`` (no-op if the key or the block is already cached)."""
        if key in self.cached or self.block_key[block_id] is not None:
            return
        self.cached[key] = block_id
        self.block_key[block_id] = key

    def cache_split(self) -> tuple[int, int]:
        """``(evictable, protected)`` cached blocks: ref count 0 and > 0."""
        evictable = sum(1 for b in self.cached.values() if self.ref_cnt[b] == 0)
        return evictable, len(self.cached) - evictable

    def check(self) -> None:
        """Assert the pool's invariants (see the class docstring)."""
        for b in range(self.num_blocks):
            in_queue = b in self.free_queue
            assert in_queue == (self.ref_cnt[b] == 0), (
                f"block {b}: ref {self.ref_cnt[b]} but {'in' if in_queue else 'not in'} free queue"
            )
        for key, b in self.cached.items():
            assert self.block_key[b] == key, (
                f"cached key {key} -> block {b} has key {self.block_key[b]}"
            )
        assert sum(k is not None for k in self.block_key) == len(self.cached), "stale block keys"
        evictable, protected = self.cache_split()
        assert evictable + protected == len(self.cached), (
            f"evictable {evictable} + protected {protected} != cached {len(self.cached)}"
        )
