"""Ref-counted KV blocks, the LRU free queue and the prefix-cache map (vLLM v1 ``BlockPool``).

The one block pool under every paged policy (``paged`` with or without prefix caching and
sequence-group sharing). It follows vLLM v1's ``vllm/v1/core/block_pool.py`` and
``kv_cache_utils.FreeKVCacheBlockQueue``:

- blocks start in the free queue in id order (0 first); under vLLM v1 block 0 is the null block,
  taken at start and never freed, so requests get ids from 1;
- new blocks are taken from the *front* of the queue; a taken block that still caches a full
  block's contents loses its key then (eviction);
- a block whose ref count drops to 0 joins the *back* of the queue and keeps its key, so it is
  still a cache hit until something takes it. Callers release a request's blocks tail first
  (vLLM's ``KVCacheManager.free`` walks the block table in reverse), so a request's last blocks
  are evicted before its first ones;
- a cache hit on a free block (``touch``) takes it out of the queue wherever it sits.

    free queue:  front [7 3 9 ... 12] back     take(1) -> [7] (evicts 7's key)
                                              release([x]) -> [3 9 ... 12 x]

The queue is a list with a moving head; a block touched while free leaves a stale entry behind
that ``take`` skips, so every operation is O(1) amortised per block. A block's stale entries are
its oldest ones in the queue (each touch makes its one live entry stale, and a release appends a
newer one), so counting them per block (``_stale``) tells ``take`` which entries to skip without
recording every block's queue position; positions are recorded only for free blocks that keep a
key (``free_blocks_ahead`` asks only about cache hits).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

_COMPACT_AT = 4096  # drop consumed queue entries once the head passes this many (and half)


class BlockPool:
    """``num_blocks`` blocks: ref counts, keys of cached full blocks, and the free queue.

    Invariants (``check``): a block is in the free queue iff its ref count is 0; ``cached`` maps
    each key to the one block holding it and ``block_key`` is its inverse.

    Args:
        num_blocks: blocks in the pool (>= 1).
    """

    def __init__(self, num_blocks: int, *, reserve_null_block: bool = False) -> None:
        if num_blocks < 1 + reserve_null_block:
            raise ValueError(f"num_blocks: must be >= {1 + reserve_null_block}, got {num_blocks}")
        self.num_blocks = num_blocks
        self.ref_cnt = [0] * num_blocks
        self.block_key: list[int | None] = [None] * num_blocks
        self.cached: dict[int, int] = {}
        self.num_free = num_blocks
        self.num_evictions = 0
        self._queue: list[int] = list(range(num_blocks))
        self._pos: list[int] = list(range(num_blocks))  # absolute queue position of a free
        # block with a key (other entries are not kept up to date)
        self._head = 0  # index in _queue of the front entry
        self._base = 0  # absolute position of _queue[0]
        self._stale: dict[int, int] = {}  # block -> its stale entries still in _queue
        self._num_stale = 0  # entries of touched blocks still in _queue before the head moves on
        self.null_block: int | None = None
        if reserve_null_block:  # vLLM v1: block 0 is a placeholder no request ever holds
            self.null_block = self.take(1)[0]

    # -- queries ----------------------------------------------------------------------------
    def ref(self, block_id: int) -> int:
        """Table entries pointing at ``block_id``."""
        return self.ref_cnt[block_id]

    def free_order(self) -> list[int]:
        """Free block ids, front (taken next) first."""
        stale = dict(self._stale)
        out: list[int] = []
        for b in self._queue[self._head :]:
            skip = stale.get(b)
            if skip:  # one of b's oldest entries: stale
                stale[b] = skip - 1
            else:
                out.append(b)
        return out

    def free_blocks_ahead(self, block_id: int) -> int:
        """At least how many free blocks are taken before ``block_id`` (free, with a key) is
        evicted."""
        assert self.block_key[block_id] is not None, "positions are kept for keyed blocks only"
        ahead = self._pos[block_id] - self._base - self._head  # entries before it, stale included
        return max(0, ahead - self._num_stale)

    def lookup(self, key: int) -> int | None:
        """The block caching ``key``, or ``None``."""
        return self.cached.get(key)

    def num_cached(self) -> int:
        """Blocks holding a cached key (in use or free)."""
        return len(self.cached)

    # -- mutations --------------------------------------------------------------------------
    def take(self, count: int) -> list[int]:
        """Take ``count`` blocks from the front of the free queue, each with ref count 1.

        Raises:
            ValueError: fewer than ``count`` blocks are free (callers check first).
        """
        if count > self.num_free:
            raise ValueError(f"take({count}): only {self.num_free} blocks free")
        if count <= 0:
            return []
        head = self._head
        if self._num_stale == 0:  # fast path: every entry from the head on is live
            taken = self._queue[head : head + count]
            head += count
        else:
            taken = []
            queue, stale = self._queue, self._stale
            while len(taken) < count:
                b = queue[head]
                skip = stale.get(b)
                if skip:  # one of b's oldest entries: stale
                    if skip == 1:
                        del stale[b]
                    else:
                        stale[b] = skip - 1
                    self._num_stale -= 1
                else:
                    taken.append(b)
                head += 1
        self._head = head
        self.num_free -= count
        ref = self.ref_cnt
        for b in taken:
            ref[b] = 1
        if self.cached:
            self._evict(taken)
        if head > _COMPACT_AT and 2 * head > len(self._queue):
            del self._queue[:head]
            self._base += head
            self._head = 0
        return taken

    def _evict(self, taken: Sequence[int]) -> None:
        keys = self.block_key
        for b in taken:
            key = keys[b]
            if key is not None:
                del self.cached[key]
                keys[b] = None
                self.num_evictions += 1

    def touch(self, blocks: Iterable[int]) -> None:
        """One more table entry points at each block; a free one leaves the queue (a hit)."""
        ref, stale = self.ref_cnt, self._stale
        for b in blocks:
            if ref[b] == 0:  # its live entry goes stale
                stale[b] = stale.get(b, 0) + 1
                self.num_free -= 1
                self._num_stale += 1
            ref[b] += 1

    def release(self, blocks: Iterable[int]) -> None:
        """One table entry fewer for each block, in the given order; a block reaching 0 joins the
        back of the free queue (pass a table reversed to free it tail first)."""
        ref, queue = self.ref_cnt, self._queue
        start = len(queue)
        for b in blocks:
            r = ref[b] - 1
            ref[b] = r
            if r == 0:
                queue.append(b)
            elif r < 0:
                raise AssertionError(f"block {b}: negative ref count")
        freed = len(queue) - start
        if not freed:
            return
        self.num_free += freed
        if self.cached:  # where the keyed ones sit (free_blocks_ahead)
            keys, pos = self.block_key, self._pos
            for i, b in enumerate(queue[start:], self._base + start):
                if keys[b] is not None:
                    pos[b] = i

    def register(self, block_id: int, key: int) -> None:
        """Cache a full block under ``key`` (no-op if the key or the block is already cached)."""
        if key in self.cached or self.block_key[block_id] is not None:
            return
        self.cached[key] = block_id
        self.block_key[block_id] = key

    # -- one block at a time (kvsim.groups.BlockSource) -------------------------------------
    def take_one(self) -> int:
        """One block from the front of the free queue, ref count 1."""
        return self.take(1)[0]

    def incref(self, block_id: int) -> None:
        """``touch`` one block."""
        self.touch((block_id,))

    def decref(self, block_id: int) -> None:
        """``release`` one block."""
        self.release((block_id,))

    # -- invariants -------------------------------------------------------------------------
    def check(self) -> None:
        """Assert the pool's invariants (see the class docstring)."""
        free = self.free_order()
        assert len(free) == len(set(free)) == self.num_free, (
            f"free queue: {len(free)} live entries ({len(set(free))} distinct), "
            f"num_free {self.num_free}"
        )
        in_queue = set(free)
        for b in range(self.num_blocks):
            if b == self.null_block:
                assert b not in in_queue, "null block in the free queue"
                assert self.ref_cnt[b] == 1, "null block's ref count changed"
                continue
            assert (b in in_queue) == (self.ref_cnt[b] == 0), (
                f"block {b}: ref {self.ref_cnt[b]} but {'in' if b in in_queue else 'not in'} "
                "the free queue"
            )
        for key, b in self.cached.items():
            assert self.block_key[b] == key, (
                f"cached key {key} -> block {b} has {self.block_key[b]}"
            )
        assert sum(k is not None for k in self.block_key) == len(self.cached), "stale block keys"
