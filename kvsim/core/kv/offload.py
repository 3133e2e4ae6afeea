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

_COMPACT_SLACK: Final = 4096  # log entries allowed beyond twice the held keys


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

    Layout: each held key has a *slot* (``_slot_of``, the one dict probe per key); a slot's key,
    ready time and recency live in packed vectors, so a block costs no Python object. The LRU
    order is a log of slots (``_order``), appended at every store and touch; a slot's live entry
    is its latest (``_stamp[slot]`` is that entry's index, -1 for a free slot), and older ones
    are stale, skipped by eviction and dropped when the log is compacted (at most about twice
    the held blocks plus ``_COMPACT_SLACK``, so every operation is O(1) amortised per block).
    Live entries, in log order, are exactly vLLM's ``OrderedDict`` order: a touch or a store
    moves a key to the most recent end, an eviction removes it and leaves the rest in place.

        _order:  [s3 s1 s3' s2 s1']   live: s3' s2 s1' (stamps 2, 3, 4) -> LRU order k3 k2 k1
                  ^stale ^stale       (s3 and s1 were touched again later)

    Invariants (``check_invariants``): ``free + storing + stored + loading == num_blocks`` at any
    time; a loading block is stored (ready) and its reference count is positive.

    Args:
        num_blocks: blocks the tier holds (``kvsim.config.offload.cpu_tier_blocks``).
    """

    def __init__(self, *, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks: a CPU tier holds one block at least, got {num_blocks}")
        self.num_blocks = num_blocks
        self._slot_of: dict[int, int] = {}  # held key -> its slot
        self._key: vec[i64] = vec[i64]()  # slot -> key (slots grow up to num_blocks)
        self._ready_s: vec[float] = vec[float]()  # slot -> when its store completes (seconds)
        self._stamp: vec[i64] = vec[i64]()  # slot -> index of its live entry in _order, or -1
        self._free_slots: vec[i64] = vec[i64]()  # slots given back by evictions
        self._order: vec[i64] = vec[i64]()  # slots, least recent first; stale entries skipped
        self._head = 0  # entries of _order before it are all stale
        self._ref_cnt: dict[int, int] = {}  # slot -> loads reading it (loading slots only)
        self._pending: deque[tuple[float, int]] = deque()  # (ready_s, blocks) of stores
        self._num_storing = 0
        self.lru_version = 0  # bumped when a touch or store may reorder or add blocks
        self.num_stored_blocks = 0  # cumulative: blocks whose store was prepared
        self.num_evicted_blocks = 0  # cumulative

    # -- queries ------------------------------------------------------------------------------
    def __contains__(self, key: int) -> bool:
        return key in self._slot_of

    def __len__(self) -> int:
        return len(self._slot_of)

    def lru_order(self) -> list[int]:
        """Keys, least recently used first (the eviction order)."""
        order, stamp, key = self._order, self._stamp, self._key
        return [key[order[i]] for i in range(self._head, len(order)) if stamp[order[i]] == i]

    def lookup(self, keys: list[int], now_s: float, start: int = 0) -> int:
        """How many of ``keys``, from ``keys[start]``, are held and stored by ``now_s`` (vLLM
        ``OffloadingManager.lookup``: stops at the first miss or block not ready)."""
        slot_of, ready_s = self._slot_of, self._ready_s
        found = 0
        for i in range(start, len(keys)):
            slot = slot_of.get(keys[i], -1)
            if slot < 0 or ready_s[slot] > now_s:
                break
            found += 1
        return found

    def occupancy(self, now_s: float) -> tuple[int, int, int, int]:
        """``(stored, storing, loading, free)`` blocks at ``now_s``: every block in one."""
        self._settle(now_s)
        held = len(self._slot_of)
        loading = len(self._ref_cnt)
        stored = held - self._num_storing - loading
        return stored, self._num_storing, loading, self.num_blocks - held

    # -- mutations ----------------------------------------------------------------------------
    def touch(self, keys: list[int]) -> None:
        """Mark held ``keys`` most recently used, the last first (so ``keys[0]`` ends most
        recent: vLLM ``LRUOffloadingManager.touch`` walks them reversed)."""
        slot_of, stamp, order = self._slot_of, self._stamp, self._order
        for i in range(len(keys) - 1, -1, -1):
            slot = slot_of.get(keys[i], -1)
            if slot >= 0:
                stamp[slot] = len(order)
                order = append(order, slot)
        self._order = order
        self.lru_version += 1
        self._compact_if_stale()

    def prepare_store(self, keys: list[int], now_s: float) -> list[int] | None:
        """Make room for the ``keys`` the tier lacks, evicting least recently used blocks that
        are stored, not loading and not among ``keys``; ``None`` (nothing changes) when that
        cannot free enough. Returns the keys to copy; ``complete_store`` adds them."""
        self._settle(now_s)
        slot_of = self._slot_of
        new: list[int] = []
        protected: set[int] = set()  # slots of the held keys among ``keys``
        for key in dict.fromkeys(keys):  # (a key offered twice is copied once)
            slot = slot_of.get(key, -1)
            if slot < 0:
                new.append(key)
            else:
                protected.add(slot)
        need = len(new) - (self.num_blocks - len(slot_of))
        if need <= 0:
            return new
        victims = self._victims(need, protected, now_s)
        if victims is None:
            return None
        key_of, stamp, free_slots = self._key, self._stamp, self._free_slots
        for slot in victims:
            del slot_of[key_of[slot]]
            stamp[slot] = -1  # its log entry is stale now
            free_slots = append(free_slots, slot)
        self._free_slots = free_slots
        self.num_evicted_blocks += need
        return new

    def _victims(self, need: int, protected: set[int], now_s: float) -> list[int] | None:
        """The ``need`` least recently used slots that are stored, not loading and not
        ``protected``, or ``None`` when fewer are. Moves the log's head past stale entries."""
        order, stamp, ready_s, ref_cnt = self._order, self._stamp, self._ready_s, self._ref_cnt
        victims: list[int] = []
        head = self._head
        for i in range(head, len(order)):
            slot = order[i]
            if stamp[slot] != i:  # stale: the slot was touched again, or evicted
                if i == head:
                    head += 1
            elif (
                ready_s[slot] <= now_s
                and (not ref_cnt or slot not in ref_cnt)
                and (not protected or slot not in protected)
            ):
                victims.append(slot)
                if len(victims) == need:
                    break
        self._head = head
        return victims if len(victims) == need else None

    def complete_store(self, keys: list[int], ready_s: float) -> None:
        """Add ``keys`` (from ``prepare_store``) as most recent, stored from ``ready_s`` on
        (storing until then). Stores are submitted in time order, so ``ready_s`` never
        decreases from one call to the next (``TransferLink`` is first come first served)."""
        if not keys:
            return
        slot_of, order, free_slots = self._slot_of, self._order, self._free_slots
        key_of, ready, stamp = self._key, self._ready_s, self._stamp
        for key in keys:
            if len(free_slots):
                free_slots, slot = pop(free_slots)
                key_of[slot] = key
                ready[slot] = ready_s
                stamp[slot] = len(order)
            else:  # a slot never used yet
                slot = len(key_of)
                key_of = append(key_of, key)
                ready = append(ready, ready_s)
                stamp = append(stamp, len(order))
            slot_of[key] = slot
            order = append(order, slot)
        self._order, self._free_slots = order, free_slots
        self._key, self._ready_s, self._stamp = key_of, ready, stamp
        self._pending.append((ready_s, len(keys)))
        self._num_storing += len(keys)
        self.num_stored_blocks += len(keys)
        self.lru_version += 1
        self._compact_if_stale()

    def prepare_load(self, keys: list[int]) -> None:
        """Hold ``keys`` (stored blocks) while a load reads them."""
        slot_of, ref_cnt = self._slot_of, self._ref_cnt
        for key in keys:
            slot = slot_of[key]
            ref_cnt[slot] = ref_cnt.get(slot, 0) + 1

    def complete_load(self, keys: list[int]) -> None:
        """Release ``keys`` held by ``prepare_load``."""
        slot_of, ref_cnt = self._slot_of, self._ref_cnt
        for key in keys:
            slot = slot_of[key]
            left = ref_cnt[slot] - 1
            if left:
                ref_cnt[slot] = left
            else:
                del ref_cnt[slot]

    def _settle(self, now_s: float) -> None:
        """Count the stores that completed by ``now_s`` as stored."""
        pending = self._pending
        while pending and pending[0][0] <= now_s:
            self._num_storing -= pending.popleft()[1]

    def _compact_if_stale(self) -> None:
        """Drop the log's stale entries once they outnumber the live ones (plus a slack),
        renumbering the live ones' stamps: O(1) amortised per appended entry."""
        order = self._order
        if len(order) < 2 * len(self._slot_of) + _COMPACT_SLACK:
            return
        stamp = self._stamp
        kept = vec[i64](capacity=len(self._slot_of))
        for i in range(self._head, len(order)):
            slot = order[i]
            if stamp[slot] == i:
                stamp[slot] = len(kept)
                kept = append(kept, slot)
        self._order, self._head = kept, 0

    def check_invariants(self, now_s: float) -> None:
        """Assert that every block is in exactly one category, the counters agree with a
        recount of the slots, and the log holds one live entry per held key."""
        stored, storing, loading, free = self.occupancy(now_s)
        assert stored + storing + loading + free == self.num_blocks, (
            f"CPU tier: {stored} stored + {storing} storing + {loading} loading + {free} free "
            f"!= {self.num_blocks} blocks"
        )
        assert min(stored, storing, loading, free) >= 0, (stored, storing, loading, free)
        slots = list(self._slot_of.values())
        recount_storing = sum(self._ready_s[s] > now_s for s in slots)
        assert recount_storing == storing, f"storing {storing} != recount {recount_storing}"
        assert all(n > 0 for n in self._ref_cnt.values()), "non-positive reference count"
        assert all(self._ready_s[s] <= now_s for s in self._ref_cnt), "loading unstored"
        assert set(self._ref_cnt) <= set(slots), "a loading slot is not held"
        for key, slot in self._slot_of.items():
            assert self._key[slot] == key, f"slot {slot}: key {self._key[slot]} != {key}"
            assert self._order[self._stamp[slot]] == slot, f"slot {slot}: no live log entry"
        live = len(self.lru_order())
        assert live == len(slots), f"{live} live log entries != {len(slots)} held keys"
        assert len(self._free_slots) + len(slots) == len(self._key), "a slot leaked"
