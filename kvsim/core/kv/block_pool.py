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
  are evicted before its first ones. That is vLLM v0.20.0's order (``release``, kept for the
  ``vllm-v0`` profile); vLLM 0.34.0's ``BlockPool.free_blocks`` (``release_table``) sends only
  blocks with a cache key (full ones; all are unkeyed without prefix caching) to the back and
  the others to the *front*, where they are reused before any other free block;
- a cache hit on a free block (``touch``) takes it out of the queue wherever it sits;
- ``num_evictions`` counts the blocks taken that vLLM has hashed (``BlockPool.
  _maybe_evict_cached_block``): keyed ones, and those ``release_table`` freed full, which
  vLLM hashed as they filled though kvsim keys a block no other request can hit only when its
  request is preempted (``kvsim.core.kv.paged``);
- a full block whose key another block already caches is cached too, a *duplicate* (vLLM does
  not de-duplicate, so block tables never change): a lookup finds the key's oldest block, and
  when that one is evicted the next oldest is found instead (``BlockHashToBlockMap.pop``). That
  is vLLM 0.34.0 (``keep_duplicates``, the ``vllm-v1`` profile); otherwise a key is cached once.

    free queue:  front [7 3 9 ... 12] back     take(1) -> [7] (evicts 7's key)
                                              release([x]) -> [3 9 ... 12 x]
                                              release_table([k, u], 1) -> [u 3 9 ... 12 k]
                                              (k full or keyed, u partial and unkeyed)

The queue is an array with a moving head, and a stack of the blocks before its head (the front,
which holds no key, so no hit takes a block out of it: a vector and its count, taken from the
top); a block touched while free leaves a stale entry behind that ``take`` skips, so every
operation is O(1) amortised per block. A block's stale entries are its oldest ones in the queue
(each touch makes its one live entry stale, and a release appends a newer one), so counting them
per block (``_stale``) tells ``take`` which entries to skip without recording every block's
queue position; positions are recorded only for free blocks that keep a key
(``free_blocks_ahead`` asks only about cache hits).

Ref counts, keys, the queue, positions and the key-to-block map (open addressing, linear probing)
are ``librt.vecs.vec[i64]`` arrays (mypyc's packed vectors), and whether a block is keyed or was
freed full one byte a block (``_flags``, read once where a take or a release asks both):
compiled, an element is a machine integer, not a Python int object allocated, stored in a dict
and freed once per block, which was most of the work of keying, releasing and evicting a long
prompt's hundreds of blocks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from librt.vecs import append, extend, vec
from mypy_extensions import i64, u8

from kvsim.core.kv.keymap import (
    EMPTY,
    find_cell,
    probe_insert,
    remove_cell,
    warm_cells,
    warm_homes,
)

# a block's flags (``BlockPool._flags``): one byte a block, read once where both are asked
_KEYED: Final = 1  # it caches a key (its ``_key``)
_FULL: Final = 2  # free, and full when freed: vLLM has hashed it, so taking it is an eviction
_NOT_FULL: Final = 0xFF ^ _FULL
# up to this many blocks are appended one by one rather than copied through a slice (a new
# vector each: an allocation and a copy, dearer than a few appends)
_FEW: Final = 16

_COMPACT_AT: Final = 4096  # drop consumed queue entries once the head passes this many (and half)


class BlockPool:
    """``num_blocks`` blocks: ref counts, keys of cached full blocks, and the free queue.

    Invariants (``check``): a block is in the free queue iff its ref count is 0; the key map
    (``lookup``) holds each cached key once, pointing at the oldest block holding it, and
    ``key_of`` is its inverse; the key's other blocks are its duplicates, oldest first.

    Args:
        num_blocks: blocks in the pool (>= 1, >= 2 with the null block).
        reserve_null_block: take block 0 at start and never free it (vLLM v1).
        keep_duplicates: cache a full block whose key another block caches, as a duplicate
            (vLLM 0.34.0); off, such a block stays uncached (a key is cached once).

    Raises:
        ValueError: too few blocks.
    """

    def __init__(
        self, num_blocks: int, *, reserve_null_block: bool = False, keep_duplicates: bool = False
    ) -> None:
        if num_blocks < 1 + reserve_null_block:
            raise ValueError(f"num_blocks: must be >= {1 + reserve_null_block}, got {num_blocks}")
        self.num_blocks = num_blocks
        self.ref_cnt: vec[i64] = vec[i64]([0] * num_blocks)  # table entries per block
        self._key: vec[i64] = vec[i64]([0] * num_blocks)  # a keyed block's key
        self._flags: vec[u8] = vec[u8]([0] * num_blocks)  # _KEYED | _FULL bits
        self._num_keyed = 0
        capacity = 16
        while capacity < 4 * num_blocks:  # a quarter full at most (a block holds one key), so
            # a miss probes about 1.4 slots (linear probing, Knuth); removals leave no
            # tombstone (``remove_cell``), so the map never needs rebuilding
            capacity *= 2
        self._mask: i64 = capacity - 1
        # slot i: its key at 2i, its block (or EMPTY) at 2i + 1: one cache line a probe
        self._slots: vec[i64] = vec[i64]([EMPTY] * (2 * capacity))  # keys unread while empty
        # a block's slot in the map, -1 for one the map does not hold (unkeyed, a duplicate)
        self._slot_of: vec[i64] = vec[i64]([-1] * num_blocks)
        self.num_free = num_blocks
        self.num_evictions = 0
        self._queue: vec[i64] = vec[i64](range(num_blocks))
        self._pos: vec[i64] = vec[i64](range(num_blocks))  # absolute queue position of a free
        # block with a key (other entries are not kept up to date)
        self._head = 0  # index in _queue of the front entry
        self._base = 0  # absolute position of _queue[0]
        # per block: its stale entries still in _queue (packed: no int object a touch)
        self._stale: vec[i64] = vec[i64]([0] * num_blocks)
        self._num_stale = 0  # entries of touched blocks still in _queue before the head moves on
        # free blocks taken before the queue's head, a stack: its first ``_num_front`` entries,
        # the first taken last (entries past them are stale, overwritten as it grows)
        self._front: vec[i64] = vec[i64]()
        self._num_front: i64 = 0
        self._scratch: vec[i64] = vec[i64]()  # ``release_table``'s, reused
        self.keep_duplicates = keep_duplicates
        self._dups: dict[int, list[int]] = {}  # key -> its other keyed blocks, oldest first
        self._num_dups = 0  # keyed blocks not in the map (each in _dups)
        self._sink: i64 = 0  # what reads ahead of a probe read (``warm_homes``), kept
        self.null_block: int | None = None
        if reserve_null_block:  # vLLM v1: block 0 is a placeholder no request ever holds
            self.null_block = self.take(1)[0]

    # -- queries ----------------------------------------------------------------------------
    def ref(self, block_id: int) -> int:
        """Table entries pointing at ``block_id``."""
        return self.ref_cnt[block_id]

    def ref_counts(self) -> list[int]:
        """Every block's ref count, by block id (a copy)."""
        return list(self.ref_cnt)

    def key_of(self, block_id: int) -> int | None:
        """The key ``block_id`` caches, or ``None``."""
        return self._key[block_id] if self._flags[block_id] & _KEYED else None

    def free_order(self) -> list[int]:
        """Free block ids, front (taken next) first."""
        stale = self._stale[0 : len(self._stale)]  # (a copy: counted down below)
        front = self._front
        out: list[int] = [front[i] for i in range(self._num_front - 1, -1, -1)]
        queue = self._queue
        for i in range(self._head, len(queue)):
            b = queue[i]
            if stale[b]:  # one of b's oldest entries: stale
                stale[b] -= 1
            else:
                out.append(b)
        return out

    def free_blocks_ahead(self, block_id: int) -> int:
        """At least how many free blocks are taken before ``block_id`` (free, with a key) is
        evicted."""
        assert self._flags[block_id] & _KEYED, "positions are kept for keyed blocks only"
        ahead = self._pos[block_id] - self._base - self._head  # entries before it, stale included
        return max(0, ahead - self._num_stale) + self._num_front

    def lookup(self, key: i64) -> int | None:
        """The block caching ``key``, or ``None``."""
        slot = self._find(key)
        return self._slots[2 * slot + 1] if slot >= 0 else None

    def has(self, key: i64) -> bool:
        """Whether a block caches ``key`` (``lookup`` without boxing its answer)."""
        return self._find(key) >= 0

    def cached_run(self, keys: vec[i64]) -> list[int]:
        """The blocks a lookup finds for ``keys[0]``, ``keys[1]``, ... up to the first key not
        cached (a prompt's prefix-cache hit: one call, not a lookup a block)."""
        slots, mask = self._slots, self._mask
        out: list[int] = []
        for i in range(len(keys)):
            cell = find_cell(slots, mask, keys[i])
            if cell < 0:
                break
            out.append(slots[2 * cell + 1])
        return out

    def num_cached(self) -> int:
        """Blocks holding a cached key (in use or free), duplicates included."""
        return self._num_keyed + self._num_dups

    def cached_map(self) -> dict[int, int]:
        """Every cached key and the block a lookup finds for it (a copy)."""
        slots = self._slots
        return {
            slots[2 * i]: slots[2 * i + 1] for i in range(len(slots) // 2) if slots[2 * i + 1] >= 0
        }

    def duplicates(self) -> dict[int, list[int]]:
        """Each key cached by more than one block: its other blocks, oldest first (a copy)."""
        return {key: list(blocks) for key, blocks in self._dups.items()}

    def _find(self, key: i64) -> i64:
        """The map slot holding ``key``, or -1."""
        return find_cell(self._slots, self._mask, key)

    def _add(self, block_id: i64, key: i64) -> None:
        """Map ``key`` to ``block_id`` (holding no key), or, when another block caches it, key
        ``block_id`` as that key's newest duplicate (``keep_duplicates``; else leave it
        uncached): one probe sequence finds the key or the empty slot it goes in
        (``probe_insert``)."""
        slots = self._slots
        i, found = probe_insert(slots, self._mask, key)
        if found:  # cached elsewhere: found there first, this one after
            if not self.keep_duplicates:
                return
            self._key[block_id] = key
            self._flags[block_id] = self._flags[block_id] | _KEYED
            self._slot_of[block_id] = -1
            self._dups.setdefault(key, []).append(block_id)
            self._num_dups += 1
            return
        slots[2 * i] = key
        slots[2 * i + 1] = block_id
        self._slot_of[block_id] = i
        self._key[block_id] = key
        self._flags[block_id] = self._flags[block_id] | _KEYED
        self._num_keyed += 1

    # -- mutations --------------------------------------------------------------------------
    def take(self, count: int) -> vec[i64]:
        """``take_into`` a new vector: ``count`` blocks, front first."""
        return self.take_into(vec[i64](capacity=count), count)

    def take_into(self, out: vec[i64], count: int) -> vec[i64]:
        """Append ``count`` blocks from the front of the free queue to ``out`` (a block table:
        machine integers, no int object a block), each with ref count 1; a taken block that
        caches a key loses it (an eviction). Returns the grown ``out`` (``librt.vecs.append``
        may move it).

        Raises:
            ValueError: fewer than ``count`` blocks are free (callers check first).
        """
        if count > self.num_free:
            raise ValueError(f"take({count}): only {self.num_free} blocks free")
        if count <= 0:
            return out
        first: i64 = len(out)
        head: i64 = self._head
        queue, ref = self._queue, self.ref_cnt
        num_front = self._num_front
        n: i64 = min(count, num_front)
        front = self._front
        if n and n <= _FEW:  # blocks freed without a key come first, the last freed first
            for k in range(num_front - 1, num_front - n - 1, -1):
                out = append(out, front[k])
            self._num_front = num_front - n
        elif n:  # (many: the stack's top ``n`` copied in one go, then reversed in place)
            run = front[num_front - n : num_front]
            out = extend(out, run) if len(out) else run
            i: i64 = first
            j: i64 = first + n - 1
            while i < j:
                out[i], out[j] = out[j], out[i]
                i += 1
                j -= 1
            self._num_front = num_front - n
        end: i64 = first + count
        rest: i64 = end - len(out)  # from the queue
        if rest == 0:
            pass
        elif self._num_stale == 0 and rest <= _FEW:  # every entry from the head on is live
            for k in range(head, head + rest):
                out = append(out, queue[k])
            head += rest
        elif self._num_stale == 0:  # ... many of them: one copy
            run = queue[head : head + rest]
            out = extend(out, run) if len(out) else run  # (a new table: the slice, one copy)
            head += rest
        else:
            stale = self._stale
            while len(out) < end:
                b = queue[head]
                if stale[b]:  # one of b's oldest entries: stale
                    stale[b] -= 1
                    self._num_stale -= 1
                else:
                    out = append(out, b)
                head += 1
        self._head = head
        self.num_free -= count
        flags = self._flags
        if self._num_keyed:  # the cells of the keys it evicts read ahead (an unkeyed block's
            # ``_slot_of`` is -1: read no further)
            self._sink ^= warm_cells(self._slots, self._slot_of, out, first, end)
        unkeyed_full: i64 = 0
        for i in range(first, end):
            b = out[i]
            ref[b] = 1
            f = flags[b]
            if f:
                if f & _KEYED:
                    self._evict(b)
                elif f & _FULL:  # hashed in vLLM, keyed by nobody here: only counted
                    unkeyed_full += 1
                flags[b] = 0  # (a taken block keeps neither: ``_evict`` dropped its key)
        self.num_evictions += unkeyed_full
        if head > _COMPACT_AT and 2 * head > len(queue):
            self._queue = queue[head:]
            self._base += head
            self._head = 0
        return out

    def _evict(self, block_id: int) -> None:
        """``block_id``, being taken, loses its key (``take_into`` clears its flags). The key's
        oldest duplicate, if any, takes the evicted block's place in the map (vLLM 0.34.0
        ``BlockHashToBlockMap.pop``)."""
        key = self._key[block_id]
        self.num_evictions += 1
        slot = self._slot_of[block_id]
        dups = self._dups.get(key) if self._num_dups else None  # (no duplicates: no dict probe)
        if dups is not None:
            self._num_dups -= 1
        if slot < 0:  # a duplicate: the map still finds the key's first block
            assert dups is not None, f"block {block_id}: a duplicate of no key"
            dups.remove(block_id)
        elif dups is not None:  # its oldest duplicate is found from now on
            successor = dups.pop(0)
            self._slots[2 * slot + 1] = successor
            self._slot_of[successor] = slot
            self._slot_of[block_id] = -1
        else:
            remove_cell(self._slots, self._mask, slot, self._slot_of)
            self._slot_of[block_id] = -1
            self._num_keyed -= 1
        if dups is not None and not dups:
            del self._dups[key]

    def touch(self, blocks: list[int]) -> None:
        """One more table entry points at each block; a free one leaves the queue (a hit)."""
        ref, stale = self.ref_cnt, self._stale
        for b in blocks:
            if ref[b] == 0:  # its live entry goes stale
                stale[b] += 1
                self.num_free -= 1
                self._num_stale += 1
            ref[b] += 1

    def release(self, blocks: Iterable[int]) -> None:
        """One table entry fewer for each block, in the given order; a block reaching 0 joins the
        back of the free queue (pass a table reversed to free it tail first)."""
        ref, queue, flags, pos = self.ref_cnt, self._queue, self._flags, self._pos
        at: i64 = self._base + len(queue)
        freed = 0
        for b in blocks:
            r = ref[b] - 1
            ref[b] = r
            if r == 0:
                # (freed by ``release``: only a keyed block counts when taken)
                f = flags[b] & _NOT_FULL
                flags[b] = f
                queue = append(queue, b)
                if f & _KEYED:  # where it sits (free_blocks_ahead)
                    pos[b] = at
                at += 1
                freed += 1
            elif r < 0:
                self._queue = queue
                raise AssertionError(f"block {b}: negative ref count")
        self._queue = queue
        self.num_free += freed

    def release_table(self, table: vec[i64], num_full: i64, start: i64 = 0, stop: i64 = -1) -> None:
        """Release a block table tail first, as vLLM 0.34.0 does (``vllm/v1/core/block_pool.py``,
        ``BlockPool.free_blocks``): a block whose ref count drops to 0 joins the back of the queue
        if it keeps a key
        or is one of the table's first ``num_full`` blocks (full: vLLM has cached it), else the
        front, where it is taken before every other free block (LIFO, the tail block first).

        Args:
            table: the request's blocks in table order.
            num_full: leading blocks of ``table`` whose tokens are all written (0 when nothing
                is cached, as without prefix caching).
            start: release ``table[start:stop]`` only (the entries before it hold no block
                of this table's: a sliding window's null entries).
            stop: the end of that range (-1: the table's end).
        """
        ref, flags, pos = self.ref_cnt, self._flags, self._pos
        end: i64 = len(table) if stop < 0 else stop
        if len(self._scratch) < end - start:  # (room for every entry: written by index)
            self._scratch = vec[i64]([0] * (2 * (end - start)))
        # the queue's blocks from the scratch's start, the front's from its end backwards (so
        # that, copied in one go, the tail's block ends on the front's top)
        scratch = self._scratch
        top: i64 = len(scratch)
        at: i64 = self._base + len(self._queue)
        num_back: i64 = 0
        num_front: i64 = 0
        for i in range(end - 1, start - 1, -1):
            b = table[i]
            r = ref[b] - 1
            ref[b] = r
            if r == 0:
                f = flags[b]
                if f & _KEYED or i < num_full:
                    flags[b] = f | _FULL
                    scratch[num_back] = b
                    num_back += 1
                    if f & _KEYED:  # where it sits (free_blocks_ahead)
                        pos[b] = at
                    at += 1
                else:  # (no flag set: unkeyed, so taken since it was last freed, which
                    # cleared them; only a keyed block is hit while free)
                    num_front += 1
                    scratch[top - num_front] = b
            elif r < 0:
                raise AssertionError(f"block {b}: negative ref count")
        if num_back and num_back <= _FEW:
            queue = self._queue
            for k in range(num_back):
                queue = append(queue, scratch[k])
            self._queue = queue
        elif num_back:  # (many: one copy, not an append a block)
            self._queue = extend(self._queue, scratch[0:num_back])
        if num_front:  # onto the stack: by index where its stale entries make room
            front, at_front = self._front, self._num_front
            src: i64 = top - num_front
            room: i64 = min(num_front, len(front) - at_front)
            for i in range(room):
                front[at_front + i] = scratch[src + i]
            if room < num_front:
                front = extend(front, scratch[src + room : top])
            self._front, self._num_front = front, at_front + num_front
        self.num_free += num_back + num_front

    def register(self, block_id: int, key: i64) -> None:
        """Cache a full block under ``key`` (no-op if the block is already cached). Under
        ``keep_duplicates`` a key another block caches is kept as a duplicate, found once the
        blocks before it are evicted (vLLM 0.34.0 ``BlockPool._insert_block_hash``: vLLM does
        not de-duplicate cached blocks, so a block table never changes); else nothing happens."""
        if not self._flags[block_id] & _KEYED:
            self._add(block_id, key)

    def register_many(self, table: list[int], start: int, keys: vec[i64]) -> None:
        """``register`` ``table[start + i]`` under ``keys[i]`` for each key, in order."""
        flags = self._flags
        self._sink ^= warm_homes(self._slots, self._mask, keys, 0, len(keys))
        for i in range(len(keys)):
            block_id = table[start + i]
            if not flags[block_id] & _KEYED:
                self._add(block_id, keys[i])

    def register_entries(self, table: vec[i64], start: int, keys: vec[i64], skip: i64) -> None:
        """``register`` ``table[start + i]`` under ``keys[i]`` for each key, in order, but for
        entries holding block ``skip`` (a hybrid table's null block); the keys' home cells read
        ahead, as ``register_many`` does."""
        flags = self._flags
        self._sink ^= warm_homes(self._slots, self._mask, keys, 0, len(keys))
        for i in range(len(keys)):
            block_id = table[start + i]
            if block_id != skip and not flags[block_id] & _KEYED:
                self._add(block_id, keys[i])

    # -- one block at a time (kvsim.core.kv.groups.BlockSource)
    # -------------------------------------
    def take_one(self) -> int:
        """One block from the front of the free queue, ref count 1."""
        return self.take(1)[0]

    def incref(self, block_id: int) -> None:
        """``touch`` one block."""
        self.touch([block_id])

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
        live = 0
        for i in range(len(self._slots) // 2):
            b = self._slots[2 * i + 1]
            if b >= 0:
                key = self._slots[2 * i]
                assert self.key_of(b) == key, f"cached key {key} -> block {b} has {self.key_of(b)}"
                assert self._slot_of[b] == i, f"block {b}: its map slot drifted"
                assert self.lookup(key) == b, f"key {key}: not found where it sits"
                live += 1
        assert live == self._num_keyed, "stale block keys"
        keyed_blocks = {self._slots[2 * i + 1] for i in range(len(self._slots) // 2)}
        for b in range(self.num_blocks):
            assert self._slot_of[b] >= 0 or b not in keyed_blocks, f"block {b}: slot lost"
            assert self._slot_of[b] < 0 or b in keyed_blocks, f"block {b}: a slot out of the map"
        for key, dups in self._dups.items():
            assert dups, f"key {key}: an empty list of duplicates"
            assert self.lookup(key) is not None, f"key {key}: duplicates {dups} of no block"
            for b in dups:
                assert self.key_of(b) == key, f"duplicate {b} of {key} has {self.key_of(b)}"
                assert self._slot_of[b] < 0, f"duplicate {b} of {key} sits in the map"
        assert sum(f & _KEYED for f in self._flags) == live + self._num_dups, "stale duplicate keys"
        assert sum(len(d) for d in self._dups.values()) == self._num_dups, "duplicates miscounted"
        front = self._front
        assert not any(self._flags[front[i]] & _KEYED for i in range(self._num_front)), (
            "a keyed block at the front"
        )
