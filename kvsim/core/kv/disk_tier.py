"""A disk tier of KV blocks below the CPU tier, as vLLM 0.34.0's tiered offloading runs one.

vLLM's ``TieringOffloadingManager`` (``vllm/v1/kv_offload/tiering/manager.py``) keeps the CPU
tier (``kvsim.core.kv.offload.CpuTier``) as the only one the GPU reads or writes, and below it
secondary tiers such as the file-system tier (``tiering/fs/manager.py``,
``FileSystemTierManager``, one file a block). kvsim models one such disk:

- **Cascade.** Every block newly stored in the CPU tier is written on to the disk once its
  GPU->CPU copy ends (``complete_store`` cascades to every secondary tier), over the disk's
  write link, first come first served; the CPU tier holds the block unevictable until the write
  ends (``prepare_read``). A block the disk holds already is written again (vLLM writes what it
  is given) and stays readable meanwhile (the file is replaced only when the new one is whole).
- **Readable once written.** The file-system tier writes a temporary file and renames it at
  the end, so a block whose write has not ended is a miss.
- **Promotion.** On a CPU miss the disk is asked; a hit takes a CPU slot at once (evicting
  there), the block crosses the disk's read link into the CPU tier, and the request waits
  (``HIT_PENDING``) until it lands, then loads it to the GPU as any CPU block
  (``_initiate_promotion``; ``kvsim.core.scheduler.offload``).
- **Eviction.** vLLM's file-system tier never deletes a file. A size bounds this tier, with
  least-recently-used eviction (as LMCache's local disk backend evicts): a write or a
  promotion makes a block the most recent. A size above what a run writes models vLLM's.

Every block of the tier is in exactly one of: stored (readable), writing, free
(``occupancy``, checked by ``check_invariants``). No SimPy here: times are plain seconds.

Layout: packed ``librt.vecs`` vectors and no Python object a block, as ``CpuTier``: each held key
has a *slot*, keys map to slots by open addressing (``kvsim.core.kv.keymap``), and the recency
order is a doubly linked list threaded through the slots (an eviction, a write and a read are
O(1) a block). As in the CPU tier, a request's *private* blocks (past the tokens another request
may share) are held outside the key map, their slots noted in the request's
``TierAccess.disk_slots``, and mapped when it is preempted (``map_private``): only it can look
them up, and only after a preemption. The same blocks are held, in the same recency order; a
write neither probes the map for them nor inserts them, and an eviction removes nothing.
"""

from __future__ import annotations

from typing import Final

from librt.vecs import append, extend, vec
from mypy_extensions import i64

from kvsim.core.kv.grow import filled, grown
from kvsim.core.kv.keymap import EMPTY, empty_cells, find_cell, insert_new, remove_cell, warm_homes
from kvsim.core.kv.offload import UNMAPPED, TierAccess

_LIST: Final = 0  # slot 0: the recency list's head (``_next[0]`` least recent, ``_prev[0]`` most)


class DiskTier:
    """Least-recently-used disk tier of ``num_blocks`` blocks keyed by prefix-cache hash (see
    the module docstring).

    Args:
        num_blocks: blocks the tier holds (``kvsim.config.offload.disk_tier_blocks``).

    Raises:
        ValueError: ``num_blocks`` below 1.
    """

    def __init__(self, *, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks: a disk tier holds one block at least, got {num_blocks}")
        self.num_blocks: i64 = num_blocks
        self._num_held: i64 = 0
        self._num_mapped: i64 = 0  # held keys in the key map (held blocks less private ones)
        self._cells: vec[i64] = empty_cells(0)  # cell i: key at 2i, slot at 2i+1
        self._mask: i64 = len(self._cells) // 2 - 1  # (cells - 1, at most half full)
        # per slot (slot 0 the list's head; slots 1.. up to num_blocks, the first
        # ``_num_slots`` used, the vectors grown by doubling): its key, its key's cell (EMPTY:
        # free; UNMAPPED: a private block), when its
        # write ends (s), the write making it (an index into the write queue, while writing),
        # its neighbours in the recency list
        self._num_slots: i64 = 1
        self._key: vec[i64] = vec[i64]([0])
        self._cell: vec[i64] = vec[i64]([EMPTY])
        self._ready: vec[float] = vec[float]([0.0])
        self._write_of: vec[i64] = vec[i64]([0])
        self._prev: vec[i64] = vec[i64]([_LIST])
        self._next: vec[i64] = vec[i64]([_LIST])
        # writes not settled, one entry a ``write`` call with new blocks, in the order they
        # end: when, and how many of its blocks are still held
        self._write_end: vec[float] = vec[float]()
        self._write_count: vec[i64] = vec[i64]()
        self._write_head: i64 = 0  # entries before it are settled
        self._write_base: i64 = 0  # the queue index of ``_write_end[0]`` (the settled dropped)
        self._settled_s = -1.0  # the latest ``now_s`` settled: entries ending by it are gone
        self._num_writing: i64 = 0  # held blocks whose write had not ended at ``_settled_s``
        self.num_written_blocks = 0  # cumulative: blocks written (rewrites included)
        self.num_evicted_blocks = 0  # cumulative
        self.num_read_blocks = 0  # cumulative: blocks promoted into the CPU tier
        self._sink: i64 = 0  # what reads ahead of a probe read (``warm_homes``), kept

    def __contains__(self, key: int) -> bool:
        """Whether the tier holds ``key`` (readable or still writing; mapped or private, found
        by a scan: for queries, not the engine's path)."""
        if self._find(key) >= 0:
            return True
        cell, key_of = self._cell, self._key
        return any(cell[s] == UNMAPPED and key_of[s] == key for s in range(1, self._num_slots))

    def __len__(self) -> int:
        return self._num_held

    def _find(self, key: i64) -> i64:
        """The slot holding ``key``, or -1."""
        i = find_cell(self._cells, self._mask, key)
        if i < 0:  # (an if, not a conditional expression: that boxes its value)
            return -1
        return self._cells[2 * i + 1]

    def readable(self, key: i64, now_s: float) -> bool:
        """Whether ``key``'s write had ended by ``now_s`` (a lookup's hit; a private block is
        found once its request is preempted: ``map_private``)."""
        slot = self._find(key)
        return slot >= 0 and self._ready[slot] <= now_s

    def warm(self, keys: vec[i64], start: i64, stop: i64) -> None:
        """Read the map cells of ``keys[start:stop]`` ahead of looking them up one by one
        (``kvsim.core.kv.keymap.warm_homes``: the map of a large disk is mostly out of cache)."""
        self._sink ^= warm_homes(self._cells, self._mask, keys, start, stop)

    def recency_order(self) -> list[int]:
        """The held keys, least recent (the next evicted) first."""
        order, nxt, slot = [], self._next, self._next[_LIST]
        while slot != _LIST:
            order.append(int(self._key[slot]))
            slot = nxt[slot]
        return order

    def write(
        self,
        keys: vec[i64],
        ready_s: float,
        access: TierAccess | None = None,
        private_index: i64 = 0,
        num_private: i64 = 0,
    ) -> None:
        """Write ``keys`` (blocks newly stored in the CPU tier), the write ending at
        ``ready_s``: a key held already becomes the most recent and stays readable; a new one
        is held, writing until ``ready_s``, after evicting the least recent blocks it needs
        room for (of one write larger than the tier, its last ``num_blocks`` keys stay).
        Writes end in the order they are made (one link, first come first served), so
        ``ready_s`` never decreases from one call to the next. It may be no later than an
        earlier query's ``now_s`` (the engine stores a span's steps after it has run them): the
        blocks are readable from then on.

        The last ``num_private`` keys are private blocks ``private_index`` on of the request
        ``access`` (not held: nobody else can have written them, and it writes each once): held
        outside the key map, their slots noted in ``access.disk_slots``."""
        num_mapped_keys: i64 = len(keys) - num_private
        if num_private:
            assert access is not None, "private blocks written for no request"
            access.disk_slots = grown(access.disk_slots, private_index + num_private, -1)
        self.num_written_blocks += len(keys)
        self._sink ^= warm_homes(self._cells, self._mask, keys, 0, num_mapped_keys)
        self._sink ^= self._warm_victims(len(keys) - (self.num_blocks - self._num_held))
        # this write's entry, made first: one of its blocks may be evicted by a later one (none
        # for a store made for an earlier step of a span: written already)
        write: i64 = self._write_base + len(self._write_end)
        writing = ready_s > self._settled_s
        if writing:
            self._write_end = append(self._write_end, ready_s)
            self._write_count = append(self._write_count, 0)
        num_new: i64 = 0
        for n in range(len(keys)):
            key = keys[n]
            if n < num_mapped_keys:
                slot = self._find(key)
                if slot >= 0:
                    self._unlink(slot)
                    self._link_last(slot)  # (the most recent now)
                    continue
                if 2 * (self._num_mapped + 1) > self._mask + 1:  # (before a slot is taken:
                    # the rebuild maps the held slots' keys)
                    self._rehash(self._num_mapped + 1)
            if self._num_held >= self.num_blocks:
                slot = self._evict_least_recent()
            else:
                slot = self._new_slot()
            self._key[slot] = key
            if n < num_mapped_keys:
                self._cell[slot] = insert_new(self._cells, self._mask, key, slot)
                self._num_mapped += 1
            else:
                assert access is not None
                self._cell[slot] = UNMAPPED
                access.disk_slots[private_index + n - num_mapped_keys] = slot
            self._ready[slot] = ready_s
            self._write_of[slot] = write
            self._link_last(slot)
            self._num_held += 1
            num_new += 1
        if writing:  # (those of its blocks it evicted itself were taken off already)
            self._num_writing += num_new
            self._write_count[write - self._write_base] += num_new

    def _new_slot(self) -> i64:
        """A slot never used yet (the vectors doubled, in one copy each, when full)."""
        slot = self._num_slots
        if slot == len(self._key):
            more = min(len(self._key), self.num_blocks + 1 - len(self._key))
            zeros = filled(0, more)
            self._key = extend(self._key, zeros)
            self._cell = extend(self._cell, zeros)
            self._ready = extend(self._ready, vec[float]([0.0] * more))
            self._write_of = extend(self._write_of, zeros)
            self._prev = extend(self._prev, zeros)
            self._next = extend(self._next, zeros)
        self._num_slots = slot + 1
        return slot

    def _warm_victims(self, count: i64) -> i64:
        """Read the key map cells of the ``count`` least recent blocks, those a write of new
        keys evicts, ahead of removing them one by one (``warm_homes``'s reason); returns a
        sum nothing uses."""
        cells, cell, nxt = self._cells, self._cell, self._next
        total: i64 = 0
        slot = nxt[_LIST]
        while count > 0 and slot != _LIST:
            if cell[slot] >= 0:  # (a private block has no cell)
                total += cells[2 * cell[slot] + 1]
            slot = nxt[slot]
            count -= 1
        return total

    def _evict_least_recent(self) -> i64:
        """Free the least recent block; returns its slot."""
        slot = self._next[_LIST]
        self._unlink(slot)
        if self._cell[slot] >= 0:  # (a private block is in no cell)
            remove_cell(self._cells, self._mask, self._cell[slot], self._cell)
            self._num_mapped -= 1
        self._cell[slot] = EMPTY
        if self._ready[slot] > self._settled_s:  # (still writing: uncounted now, and by its write)
            self._num_writing -= 1
            write = self._write_of[slot] - self._write_base
            self._write_count[write] -= 1
        self._num_held -= 1
        self.num_evicted_blocks += 1
        return slot

    def _unlink(self, slot: i64) -> None:
        prev, nxt = self._prev, self._next
        before, after = prev[slot], nxt[slot]
        nxt[before] = after
        prev[after] = before

    def _link_last(self, slot: i64) -> None:
        prev, nxt = self._prev, self._next
        last = prev[_LIST]
        nxt[last] = slot
        prev[slot] = last
        nxt[slot] = _LIST
        prev[_LIST] = slot

    def _rehash(self, num_keys: i64) -> None:
        """Rebuild the key map with room for ``num_keys`` keys (``empty_cells``)."""
        self._cells = empty_cells(num_keys)
        self._mask = len(self._cells) // 2 - 1
        cells, cell_of, key_of = self._cells, self._cell, self._key
        for slot in range(1, self._num_slots):
            if cell_of[slot] >= 0:  # (mapped: not free, not private)
                cell_of[slot] = insert_new(cells, self._mask, key_of[slot], slot)

    def map_private(self, access: TierAccess) -> None:
        """The request was preempted: its private blocks the tier still holds join the key
        map, so that its lookups find them (``CpuTier.map_private``'s rule; a slot whose key
        is no longer the block's was evicted and reused)."""
        hints, keys = access.disk_slots, access.keys
        key_of, cell = self._key, self._cell
        for index in range(min(len(hints), len(keys))):
            slot = hints[index]
            if slot >= 0 and cell[slot] == UNMAPPED and key_of[slot] == keys[index]:
                if 2 * (self._num_mapped + 1) > self._mask + 1:
                    self._rehash(self._num_mapped + 1)
                cell[slot] = insert_new(self._cells, self._mask, keys[index], slot)
                self._num_mapped += 1
        access.disk_slots = vec[i64]()

    def read(self, keys: vec[i64]) -> None:
        """``keys`` (readable) are promoted into the CPU tier: each is the most recent now.

        Raises:
            KeyError: a key the tier does not hold."""
        for key in keys:
            slot = self._find(key)
            if slot < 0:
                raise KeyError(f"disk tier: block {key} read but not held")
            self._unlink(slot)
            self._link_last(slot)
        self.num_read_blocks += len(keys)

    def occupancy(self, now_s: float) -> tuple[int, int, int]:
        """``(stored, writing, free)`` blocks at ``now_s``: every block in one."""
        self._settle(now_s)
        held, writing = self._num_held, self._num_writing
        return held - writing, writing, self.num_blocks - held

    def _settle(self, now_s: float) -> None:
        """The writes that ended by ``now_s`` leave their blocks readable (a block evicted
        while writing was uncounted then)."""
        if now_s <= self._settled_s:
            return
        self._settled_s = now_s
        head, end, count = self._write_head, self._write_end, self._write_count
        while head < len(end) and end[head] <= now_s:
            self._num_writing -= count[head]
            head += 1
        if head >= 4096 and 2 * head >= len(end):  # drop the settled half: one copy
            self._write_end = end[head:]
            self._write_count = count[head:]
            self._write_base += head
            head = 0
        self._write_head = head

    def check_invariants(self, now_s: float) -> None:
        """Assert that every block is in exactly one category, the recency list holds every
        held block once, the key map finds each mapped one (and nothing else), and the writing
        count agrees with a recount."""
        stored, writing, free = self.occupancy(now_s)
        assert stored + writing + free == self.num_blocks, (stored, writing, free)
        assert min(stored, writing, free) >= 0, (stored, writing, free)
        order = self.recency_order()
        assert len(order) == len(set(order)) == self._num_held, (len(order), self._num_held)
        slots, slot, recount, mapped = [], self._next[_LIST], 0, 0
        while slot != _LIST:
            slots.append(slot)
            key, cell = self._key[slot], self._cell[slot]
            if cell == UNMAPPED:
                assert self._find(key) < 0, f"disk tier: private key {key} mapped"
            else:
                assert self._find(key) == slot, f"disk tier: key {key} not mapped to its slot"
                mapped += 1
            recount += self._ready[slot] > now_s
            slot = self._next[slot]
        assert len(set(slots)) == len(slots) == self._num_held, "disk tier: recency list"
        assert mapped == self._num_mapped, f"disk tier: {mapped} mapped != {self._num_mapped}"
        cells = self._cells
        in_map = sum(1 for i in range(len(cells) // 2) if cells[2 * i + 1] != EMPTY)
        assert in_map == mapped, f"disk tier: {in_map} keys in the map, {mapped} mapped"
        assert recount == writing, f"disk tier: writing {writing} != recount {recount}"
