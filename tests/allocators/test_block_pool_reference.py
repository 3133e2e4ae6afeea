"""``BlockPool`` (packed vectors, an open-addressing key map, a queue with stale entries and a
front) against a naive pool written from vLLM v1's rules (a plain list for the free queue, a dict
for the keys), under random takes, releases (all to the back, or vLLM 0.34.0's way), registrations,
cache hits and lookups: the same blocks taken, the same free order, the same hits and evictions,
the same duplicate cached blocks.
Small pools and many evictions, so the key map fills, wraps around and shifts entries back."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from librt.vecs import vec
from mypy_extensions import i64

from kvsim.core.kv.block_pool import BlockPool


class NaivePool:
    """vLLM v1's rules, one block at a time: take from the front (a taken block loses its key),
    release to the back (``release``) or, vLLM 0.34.0's ``BlockPool.free_blocks``
    (``release_table``), a block that reaches ref count 0 to the back if it holds a key or is
    full, else to the front, those of one call in their order; a hit leaves the queue wherever
    it sits; a key cached by several blocks keeps them all, in caching order, and a lookup finds
    the first (vLLM 0.34.0 ``BlockHashToBlockMap``), or, without ``keep_duplicates``, a key is
    cached once. Taking a block with a hash is an eviction (``_maybe_evict_cached_block``): a
    keyed one, or one of the ``num_full`` full blocks a ``release_table`` freed (vLLM hashed
    them as they filled; kvsim keys only those another request could hit)."""

    def __init__(self, num_blocks: int, keep_duplicates: bool) -> None:
        self.keep_duplicates = keep_duplicates
        self.ref = [0] * num_blocks
        self.free = list(range(num_blocks))
        self.blocks_of: dict[int, list[int]] = {}  # key -> its blocks, first cached first
        self.key_of: dict[int, int] = {}
        self.hashed: set[int] = set()  # free, freed full by release_table
        self.evictions = 0

    @property
    def cached(self) -> dict[int, int]:
        return {key: blocks[0] for key, blocks in self.blocks_of.items()}

    def take(self, count: int) -> list[int]:
        taken, self.free = self.free[:count], self.free[count:]
        for b in taken:
            self.ref[b] = 1
            key = self.key_of.pop(b, None)
            if key is not None:
                self.blocks_of[key].remove(b)
                if not self.blocks_of[key]:
                    del self.blocks_of[key]
            if key is not None or b in self.hashed:
                self.evictions += 1
            self.hashed.discard(b)
        return taken

    def release(self, blocks: list[int]) -> None:
        for b in blocks:
            self.ref[b] -= 1
            if self.ref[b] == 0:
                self.free.append(b)
                self.hashed.discard(b)

    def release_table(self, table: list[int], num_full: int) -> None:
        front, back = [], []
        for i in reversed(range(len(table))):
            b = table[i]
            self.ref[b] -= 1
            if self.ref[b] == 0:
                (back if b in self.key_of or i < num_full else front).append(b)
                if i < num_full:
                    self.hashed.add(b)
        self.free = front + self.free + back

    def touch(self, blocks: list[int]) -> None:
        for b in blocks:
            if self.ref[b] == 0:
                self.free.remove(b)
            self.ref[b] += 1

    def register(self, block: int, key: int) -> None:
        if block not in self.key_of and (self.keep_duplicates or key not in self.blocks_of):
            self.key_of[block] = key
            self.blocks_of.setdefault(key, []).append(block)


OPS = st.lists(
    st.tuples(
        st.sampled_from(
            ["take", "take_into", "release", "release_table", "release_range", "register", "hit"]
        ),
        # blocks a take asks for: few, or more than ``block_pool._FEW`` (copied in one go
        # rather than appended one by one)
        st.one_of(st.integers(0, 7), st.integers(17, 40)),
        st.integers(0, 40),  # a key: few values, so keys repeat and are cached elsewhere
    ),
    max_size=150,
)


@settings(max_examples=300, deadline=None)
@given(num_blocks=st.integers(2, 64), ops=OPS, keep_duplicates=st.booleans())
def test_the_pool_follows_the_naive_rules(num_blocks, ops, keep_duplicates) -> None:
    pool = BlockPool(num_blocks, keep_duplicates=keep_duplicates)
    naive = NaivePool(num_blocks, keep_duplicates)
    tables: list[list[int]] = []
    for op, a, key in ops:
        if op == "take" and a <= len(naive.free):
            table = naive.take(a)
            assert list(pool.take(a)) == table
            tables.append(table)
        elif op == "take_into" and a <= len(naive.free):
            # appended after what the table already holds (here key % 3 placeholders)
            held = [-1] * (key % 3)
            table = naive.take(a)
            assert list(pool.take_into(vec[i64](held), a)) == held + table
            tables.append(table)
        elif op == "release" and tables:
            table = tables.pop(a % len(tables))
            naive.release(table[::-1])
            pool.release(reversed(table))
        elif op == "release_table" and tables:
            table = tables.pop(a % len(tables))
            num_full = key % (len(table) + 1)
            naive.release_table(table, num_full)
            pool.release_table(vec[i64](table), num_full)
        elif op == "release_range" and tables:
            # table[start:stop] released in place (num_full: an index into the whole table);
            # the naive pool releases that slice, its full blocks those before num_full
            table = tables.pop(a % len(tables))
            start = key % (len(table) + 1)
            stop = start + a % (len(table) - start + 1)
            num_full = (a + key) % (len(table) + 1)
            naive.release_table(table[start:stop], max(0, min(num_full, stop) - start))
            pool.release_table(vec[i64](table), num_full, start, stop)
            if table[:start] + table[stop:]:
                tables.append(table[:start] + table[stop:])
        elif op == "register" and tables and tables[a % len(tables)]:
            table = tables[a % len(tables)]
            block = table[key % len(table)]
            naive.register(block, key)
            pool.register(block, key)
        elif op == "hit":
            block = naive.cached.get(key)
            assert pool.lookup(key) == block
            if block is not None:
                naive.touch([block])
                pool.touch([block])
                tables.append([block])
        assert pool.free_order() == naive.free
        assert pool.num_free == len(naive.free)
        assert pool.num_evictions == naive.evictions
        assert pool.cached_map() == naive.cached
        dups = {key: blocks[1:] for key, blocks in naive.blocks_of.items() if len(blocks) > 1}
        assert pool.duplicates() == dups
        assert pool.num_cached() == len(naive.key_of)
    pool.check()


def test_the_key_map_is_rebuilt_and_keeps_every_live_key() -> None:
    # 4 blocks, a map of 16 slots: register and evict 200 keys, every one a new slot
    pool = BlockPool(4)
    for key in range(200):
        (block,) = pool.take(1)
        pool.register(block, key * 16)  # all on one home slot: probes wrap around
        pool.release([block])
        assert pool.lookup(key * 16) == block
        assert pool.num_cached() <= 4
    assert pool.num_evictions == 196  # each key evicted when its block was taken again
    pool.check()
