"""A CPU tier of KV blocks with LRU eviction, and the one-way link its transfers cross.

The tier follows vLLM's native offloading (``vllm/v1/kv_offload/``): the CPU backend holds a
fixed number of blocks of the GPU's block size (``cpu.py``, ``CPUBackend``), keyed by the GPU
prefix cache's block hash; the LRU manager (``lru_manager.py``, ``LRUOffloadingManager``)
decides what to store and what to evict. A block is *storing* from ``prepare_store`` until its
GPU->CPU copy completes (vLLM's ``BlockStatus`` not ready yet: lookups skip it, eviction skips
it), then *stored*; a load (``prepare_load``) holds it (reference count > 0, *loading*) until its
CPU->GPU copy completes. Every slot of the tier is in exactly one of: free, storing, stored,
loading (``occupancy``, checked by ``check_invariants``).

LRU order (``LRUOffloadingManager``: an ``OrderedDict``; here a log of slots in the same order,
see ``CpuTier``), least recent first. A lookup ``touch``es the request's blocks from its last
to its first, so a prefix's first block ends most recent and a prefix is evicted from its tail,
as on the GPU. ``prepare_store`` adds the
blocks the tier lacks at the most recent end, evicting from the least recent end blocks that are
neither storing, loading, nor among the blocks being stored; if that cannot make room it stores
nothing (vLLM returns ``None``).

Copies are timed by ``TransferLink``: one direction of the GPU-CPU link, first come first
served (vLLM's ``CpuGpuOffloadingHandler``, ``vllm/v1/kv_offload/worker/cpu_gpu.py``, runs each
direction's copies on one CUDA stream). No SimPy here: times are plain seconds handed in.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final

from librt.vecs import append, pop, vec
from mypy_extensions import i64

from kvsim.core.kv.keymap import EMPTY, find_cell, probe_insert, remove_cell

_COMPACT_SLACK: Final = 4096  # log entries allowed beyond twice the held keys


def distinct(keys: vec[i64]) -> vec[i64]:
    """``keys`` without repeats, first occurrences in order (``dict.fromkeys``), by open
    addressing in a local vector (a store's keys are distinct but for a 64-bit collision, so
    this is one probe a key, all in cache, and no int object)."""
    if len(keys) < 2:
        return keys
    num_cells = 16
    while num_cells < 2 * len(keys):
        num_cells *= 2
    mask: i64 = num_cells - 1
    seen = vec[i64]([0] * num_cells)  # 1 + index in ``keys`` of the key a cell holds, 0: empty
    out = vec[i64](capacity=len(keys))
    for n in range(len(keys)):
        key = keys[n]
        i = (key ^ (key >> 32)) & mask
        while seen[i] and keys[seen[i] - 1] != key:
            i = (i + 1) & mask
        if not seen[i]:
            seen[i] = n + 1
            out = append(out, key)
    return out


@dataclass(slots=True)
class TransferLink:
    """One direction of a link, serving copies in submission order.

    Attributes:
        bandwidth_bytes_per_s: bytes/s one direction carries.
        busy_until_s: when the last copy submitted ends (simulated seconds).
        num_bytes: bytes carried so far (cumulative).
        busy_s: seconds spent copying so far (cumulative).
    """

    bandwidth_bytes_per_s: float
    busy_until_s: float = 0.0
    num_bytes: int = 0
    busy_s: float = 0.0

    def submit(self, num_bytes: int, now_s: float) -> float:
        """Queue a copy of ``num_bytes`` bytes at ``now_s``; returns when it ends: it starts
        when the link is free (``max(now_s, busy_until_s)``) and takes
        ``num_bytes / bandwidth_bytes_per_s`` seconds."""
        seconds = num_bytes / self.bandwidth_bytes_per_s
        self.busy_until_s = max(now_s, self.busy_until_s) + seconds
        self.num_bytes += num_bytes
        self.busy_s += seconds
        return self.busy_until_s


class CpuTier:
    """LRU tier of ``num_blocks`` blocks keyed by prefix-cache hash (see the module docstring).

    Layout (packed ``librt.vecs`` vectors, no Python object per block, as ``BlockPool``): each
    held key has a *slot*; a slot's key, ready time, recency stamp and reference count are
    vector entries. Keys map to slots by open addressing with linear probing (``_cells``: key
    and slot side by side, one cache line a probe; at most half full; an evicted key leaves no
    tombstone, ``remove_cell``).
    The LRU order is a log of slots (``_order``) appended at every store and touch; a slot's
    live entry is its latest (``_stamp[slot]`` is its index, -1 for a free slot), older ones
    are stale, skipped by eviction and dropped when the log is compacted (at most about twice
    the held keys plus ``_COMPACT_SLACK``, so every operation is O(1) amortised per block).
    Live entries, in log order, are exactly vLLM's ``OrderedDict`` order: a touch or a store
    moves a key to the most recent end, an eviction removes it and leaves the rest in place.

        _order:  [s3 s1 s3 s2 s1]   live: entries 2, 3, 4 -> LRU order k3 k2 k1
                  ^stale ^stale     (s3 and s1 were touched again later)

    Invariants (``check_invariants``): ``free + storing + stored + loading == num_blocks`` at any
    time; a loading block is stored (ready) and its reference count is positive.

    Args:
        num_blocks: blocks the tier holds (``kvsim.config.offload.cpu_tier_blocks``).
    """

    def __init__(self, *, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks: a CPU tier holds one block at least, got {num_blocks}")
        self.num_blocks = num_blocks
        self._num_held = 0
        self._mask: i64 = 15  # key-map cells - 1 (a power of two; grows with the held keys)
        self._cells: vec[i64] = vec[i64]([EMPTY] * 32)  # cell i: key at 2i, slot at 2i+1
        self._key: vec[i64] = vec[i64]()  # slot -> key (slots grow up to num_blocks)
        self._cell: vec[i64] = vec[i64]()  # slot -> its key's cell
        self._ready_s: vec[float] = vec[float]()  # slot -> when its store completes (seconds)
        self._stamp: vec[i64] = vec[i64]()  # slot -> index of its live entry in _order, or -1
        self._free_slots: vec[i64] = vec[i64]()  # slots given back by evictions
        self._order: vec[i64] = vec[i64]()  # slots, least recent first; stale entries skipped
        self._head = 0  # entries of _order before it are all stale
        self._ref_cnt: vec[i64] = vec[i64]()  # slot -> loads reading it
        self._num_loading = 0  # slots with loads reading them
        self._offered: vec[i64] = vec[i64]()  # slot -> the last prepare_store offering its key
        self._num_prepares = 0  # prepare_store calls so far (numbers them from 1)
        self._pending: deque[tuple[float, int]] = deque()  # (ready_s, blocks) of stores
        self._num_storing = 0
        self.lru_version = 0  # bumped when a touch or store may reorder or add blocks
        self.num_stored_blocks = 0  # cumulative: blocks whose store was prepared
        self.num_evicted_blocks = 0  # cumulative

    # -- queries ------------------------------------------------------------------------------
    def __contains__(self, key: int) -> bool:
        return self._find(key) >= 0

    def __len__(self) -> int:
        return self._num_held

    def lru_order(self) -> list[int]:
        """Keys, least recently used first (the eviction order)."""
        order, stamp, key = self._order, self._stamp, self._key
        return [key[order[i]] for i in range(self._head, len(order)) if stamp[order[i]] == i]

    def lookup(self, keys: vec[i64], now_s: float, start: int = 0) -> int:
        """How many of ``keys``, from ``keys[start]``, are held and stored by ``now_s`` (vLLM
        ``OffloadingManager.lookup``: stops at the first miss or block not ready)."""
        ready_s = self._ready_s
        found = 0
        for i in range(start, len(keys)):
            slot = self._find(keys[i])
            if slot < 0 or ready_s[slot] > now_s:
                break
            found += 1
        return found

    def any_loading(self, keys: vec[i64], start: int, stop: int) -> bool:
        """Whether a load reads any of ``keys[start:stop]`` (held keys: ``prepare_load``)."""
        ref_cnt = self._ref_cnt
        for i in range(start, stop):
            slot = self._find(keys[i])
            if slot >= 0 and ref_cnt[slot] > 0:
                return True
        return False

    def occupancy(self, now_s: float) -> tuple[int, int, int, int]:
        """``(stored, storing, loading, free)`` blocks at ``now_s``: every block in one."""
        self._settle(now_s)
        held = self._num_held
        loading = self._num_loading
        stored = held - self._num_storing - loading
        return stored, self._num_storing, loading, self.num_blocks - held

    def _find(self, key: i64) -> i64:
        """The slot holding ``key``, or -1."""
        cells = self._cells
        i = find_cell(cells, self._mask, key)
        return cells[2 * i + 1] if i >= 0 else -1

    # -- mutations ----------------------------------------------------------------------------
    def touch(self, keys: vec[i64]) -> None:
        """Mark held ``keys`` most recently used, the last first (so ``keys[0]`` ends most
        recent: vLLM ``LRUOffloadingManager.touch`` walks them reversed)."""
        stamp, order = self._stamp, self._order
        for i in range(len(keys) - 1, -1, -1):
            slot = self._find(keys[i])
            if slot >= 0:
                stamp[slot] = len(order)
                order = append(order, slot)
        self._order = order
        self.lru_version += 1
        self._compact_if_stale()

    def prepare_store(self, keys: vec[i64], now_s: float) -> vec[i64] | None:
        """Make room for the ``keys`` the tier lacks, evicting least recently used blocks that
        are stored, not loading and not among ``keys``; ``None`` (nothing changes) when that
        cannot free enough. Returns the keys to copy; ``complete_store`` adds them."""
        self._settle(now_s)
        new = vec[i64]()
        self._num_prepares += 1
        offered, this = self._offered, self._num_prepares
        for key in keys:
            slot = self._find(key)
            if slot < 0:
                new = append(new, key)
            else:
                offered[slot] = this  # among the keys being stored: not evictable now
        new = distinct(new)  # a key offered twice is copied once
        need = len(new) - (self.num_blocks - self._num_held)
        if need <= 0:
            return new
        victims = self._victims(need, now_s)
        if victims is None:
            return None
        cells, mask, cell = self._cells, self._mask, self._cell
        stamp, free_slots = self._stamp, self._free_slots
        for slot in victims:
            remove_cell(cells, mask, cell[slot], cell)
            stamp[slot] = -1  # its log entry is stale now
            free_slots = append(free_slots, slot)
        self._free_slots = free_slots
        self._num_held -= need
        self.num_evicted_blocks += need
        return new

    def _victims(self, need: int, now_s: float) -> vec[i64] | None:
        """The ``need`` least recently used slots that are stored, not loading and not offered
        to this store, or ``None`` when fewer are. Moves the log's head past stale entries."""
        order, stamp, ready_s, ref_cnt = self._order, self._stamp, self._ready_s, self._ref_cnt
        offered, this = self._offered, self._num_prepares
        victims = vec[i64]()
        head = self._head
        for i in range(head, len(order)):
            slot = order[i]
            if stamp[slot] != i:  # stale: the slot was touched again, or evicted
                if i == head:
                    head += 1
            elif ready_s[slot] <= now_s and ref_cnt[slot] == 0 and offered[slot] != this:
                victims = append(victims, slot)
                if len(victims) == need:
                    break
        self._head = head
        return victims if len(victims) == need else None

    def complete_store(self, keys: vec[i64], ready_s: float) -> None:
        """Add ``keys`` (from ``prepare_store``: not held) as most recent, stored from
        ``ready_s`` on (storing until then). Stores are submitted in time order, so ``ready_s``
        never decreases from one call to the next (``TransferLink`` is first come first
        served)."""
        if not len(keys):
            return
        if 2 * (self._num_held + len(keys)) > self._mask + 1:
            self._rehash(self._num_held + len(keys))
        order, free_slots = self._order, self._free_slots
        key_of, cell, ready, stamp = self._key, self._cell, self._ready_s, self._stamp
        for key in keys:
            if len(free_slots):
                free_slots, slot = pop(free_slots)
                key_of[slot] = key
                ready[slot] = ready_s
                stamp[slot] = len(order)
            else:  # a slot never used yet
                slot = len(key_of)
                key_of = append(key_of, key)
                cell = append(cell, 0)
                self._ref_cnt = append(self._ref_cnt, 0)
                self._offered = append(self._offered, 0)
                ready = append(ready, ready_s)
                stamp = append(stamp, len(order))
            cell[slot] = self._insert(key, slot)
            order = append(order, slot)
        self._order, self._free_slots = order, free_slots
        self._key, self._cell, self._ready_s, self._stamp = key_of, cell, ready, stamp
        self._num_held += len(keys)
        self._pending.append((ready_s, len(keys)))
        self._num_storing += len(keys)
        self.num_stored_blocks += len(keys)
        self.lru_version += 1
        self._compact_if_stale()

    def _insert(self, key: i64, slot: i64) -> i64:
        """Map ``key`` (not held) to ``slot``; returns its cell (``probe_insert``)."""
        cells = self._cells
        i, found = probe_insert(cells, self._mask, key)
        if found:
            raise RuntimeError(f"CPU tier invariant violated: key {key} stored twice")
        cells[2 * i] = key
        cells[2 * i + 1] = slot
        return i

    def _rehash(self, num_keys: int) -> None:
        """Rebuild the key map with room for ``num_keys`` keys at a quarter full (so about as
        many again fit before the next rebuild)."""
        num_cells = 16
        while num_cells < 4 * num_keys:
            num_cells *= 2
        self._cells = vec[i64]([EMPTY] * (2 * num_cells))  # (keys unread while empty)
        self._mask = num_cells - 1
        stamp, key_of, cell = self._stamp, self._key, self._cell
        for slot in range(len(key_of)):
            if stamp[slot] >= 0:  # held
                cell[slot] = self._insert(key_of[slot], slot)

    def prepare_load(self, keys: vec[i64]) -> None:
        """Hold ``keys`` (stored blocks) while a load reads them."""
        ref_cnt = self._ref_cnt
        for key in keys:
            slot = self._find(key)
            assert slot >= 0, f"load of a block the tier does not hold: {key}"
            if ref_cnt[slot] == 0:
                self._num_loading += 1
            ref_cnt[slot] += 1

    def complete_load(self, keys: vec[i64]) -> None:
        """Release ``keys`` held by ``prepare_load``."""
        ref_cnt = self._ref_cnt
        for key in keys:
            slot = self._find(key)
            ref_cnt[slot] -= 1
            if ref_cnt[slot] == 0:
                self._num_loading -= 1

    def _settle(self, now_s: float) -> None:
        """Count the stores that completed by ``now_s`` as stored."""
        pending = self._pending
        while pending and pending[0][0] <= now_s:
            self._num_storing -= pending.popleft()[1]

    def _compact_if_stale(self) -> None:
        """Drop the log's stale entries once they outnumber the live ones (plus a slack),
        renumbering the live ones' stamps: O(1) amortised per appended entry."""
        order = self._order
        if len(order) < 2 * self._num_held + _COMPACT_SLACK:
            return
        stamp = self._stamp
        kept = vec[i64](capacity=self._num_held)
        for i in range(self._head, len(order)):
            slot = order[i]
            if stamp[slot] == i:
                stamp[slot] = len(kept)
                kept = append(kept, slot)
        self._order, self._head = kept, 0

    def check_invariants(self, now_s: float) -> None:
        """Assert that every block is in exactly one category, the counters agree with a
        recount of the slots, the key map finds every held key, and the log holds one live
        entry per held key."""
        stored, storing, loading, free = self.occupancy(now_s)
        assert stored + storing + loading + free == self.num_blocks, (
            f"CPU tier: {stored} stored + {storing} storing + {loading} loading + {free} free "
            f"!= {self.num_blocks} blocks"
        )
        assert min(stored, storing, loading, free) >= 0, (stored, storing, loading, free)
        slots = [s for s in range(len(self._key)) if self._stamp[s] >= 0]
        assert len(slots) == self._num_held, f"{len(slots)} held slots != {self._num_held}"
        recount_storing = sum(self._ready_s[s] > now_s for s in slots)
        assert recount_storing == storing, f"storing {storing} != recount {recount_storing}"
        ref_cnt = self._ref_cnt
        recount_loading = sum(ref_cnt[s] > 0 for s in slots)
        assert recount_loading == loading, f"loading {loading} != recount {recount_loading}"
        assert all(n >= 0 for n in ref_cnt), "negative reference count"
        assert all(ref_cnt[s] == 0 or self._ready_s[s] <= now_s for s in slots), "loading unstored"
        assert all(ref_cnt[s] == 0 for s in self._free_slots), "a free slot is loading"
        for slot in slots:
            key = self._key[slot]
            assert self._find(key) == slot, f"slot {slot}: key {key} maps to {self._find(key)}"
            assert self._order[self._stamp[slot]] == slot, f"slot {slot}: no live log entry"
        live = len(self.lru_order())
        assert live == len(slots), f"{live} live log entries != {len(slots)} held keys"
        assert len(self._free_slots) + len(slots) == len(self._key), "a slot leaked"
        cells = self._cells
        mapped = sum(cells[i] != EMPTY for i in range(1, len(cells), 2))
        assert mapped == len(slots), f"{mapped} mapped cells != {len(slots)} held keys"
