"""A CPU tier of KV blocks with vLLM's request-ranked LRU eviction, and the one-way link its
transfers cross.

The tier follows vLLM 0.34.0's native offloading (``vllm/v1/kv_offload/``): the CPU manager
(``cpu/manager.py``, ``CPUOffloadingManager``) holds a fixed number of blocks of the GPU's block
size, keyed by the GPU prefix cache's block hash, and its LRU policy (``cpu/policies/lru.py``,
``LRUCachePolicy``) decides what to evict. A block is *storing* from ``prepare_store`` until its
GPU->CPU copy completes (vLLM: ``ref_cnt`` -1, not ready: a lookup answers ``HIT_PENDING``,
eviction skips it), then *stored*; a load (``prepare_load``) holds it (reference count > 0,
*loading*) until its CPU->GPU copy completes. With a disk tier below (``kvsim.core.kv.
disk_tier``) a stored block is also held from the end of its store until its write on to the
disk ends (``CASCADING``; vLLM ``prepare_read``), counted as loading. Every slot of the tier is in
exactly one of: free, storing, stored, loading (``occupancy``, checked by ``check_invariants``).

**Recency is ranked per request** (``LRUCachePolicy``). Each block has a rank, a pair
``(r, -p)`` compared in order; eviction takes the stored, unloaded block of least rank that the
store being made room for does not offer. A request gets its own number ``r`` from a counter the
first time it records an access (``TierAccess``); a block it stores, or first accesses, at
position ``p`` (its last token's end, here in blocks) is ranked ``(r, -p)`` unless ranked higher
already, so within a running request tails go before heads. A request records a block once: when
it loads it, or offers it to a store (to copy, or held and stored: one still storing is not
recorded; ``CPUOffloadingManager._record_request_cache_access``). A lookup records nothing, so a
waiting request looked up again step after step changes no rank. When the request finishes
(``finish``), its recorded blocks the tier still holds get fresh counter numbers from its last
block to its first, ``(n, 0)``: its first block ends the most recent
(``on_request_finished``). A rank ``(r, -p)`` is one 64-bit number here, ``r`` above
``_POSITION_BITS`` bits of ``2**_POSITION_BITS - 1 - p``.

Copies are timed by ``TransferLink``: one direction of the GPU-CPU link, first come first
served (vLLM's ``CpuGpuOffloadingHandler``, ``vllm/v1/kv_offload/worker/cpu_gpu.py``, runs each
direction's copies on one CUDA stream). No SimPy here: times are plain seconds handed in.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Final

from librt.vecs import append, extend, pop, vec
from mypy_extensions import i32, i64, u8

from kvsim.core.kv.grow import grown
from kvsim.core.kv.keymap import (
    EMPTY,
    empty_cells,
    find_cell,
    insert_new,
    remove_cell,
    warm_cells,
    warm_homes,
)

_POSITION_BITS: Final = 24  # a rank's low bits: 2**24 - 1 blocks a request at most
_POSITION_TOP: Final = (1 << 24) - 1
FREE: Final = -1  # a slot's cell: the slot holds no block
UNMAPPED: Final = -2  # a slot's cell: it holds a private block, outside the key map
# ``prepare_store``'s ``private_from`` when no block is private: 2**62, built from a small int
# (as ``kvsim.core.kv.hybrid._KEY_MASK``: a native constant, not an int object)
EVERY_BLOCK: Final[i64] = i64(1 << 61) * 2
_NO_RANK: Final = (1 << 62) - 1  # above every rank value (a counter below 2**38)
# a slot's state bits (one byte a slot: the flags of 128 K slots fit in 128 KiB)
EVICTABLE: Final = 1  # stored and no load reading it
IN_HEAP: Final = 2  # its current entry is in the heap (else in the queue)
KEPT: Final = 4  # kept by the rebuild under way (``_current``)
STORING: Final = 8  # its GPU->CPU copy has not ended (as of the last ``_settle``)
OFFERED: Final = 16  # offered to the store under way (``prepare_store``): not evictable now
WATCHED: Final = 32  # in the watched lookup's run (``HeldRun``)
CASCADING: Final = 64  # read by its CPU->disk write (a disk tier's cascade): not evictable
NOT_EVICTABLE: Final = 0xFF ^ EVICTABLE
NOT_IN_HEAP: Final = 0xFF ^ IN_HEAP
NOT_KEPT: Final = 0xFF ^ KEPT
NOT_STORING: Final = 0xFF ^ STORING
NOT_OFFERED: Final = 0xFF ^ OFFERED
NOT_WATCHED: Final = 0xFF ^ WATCHED
NOT_CASCADING: Final = 0xFF ^ CASCADING


def rank_value(rank: i64, position: i64) -> i64:
    """vLLM's rank ``(rank, -position)`` as one integer in the same order (``position`` in
    blocks, 0 for a committed rank). Raises ``ValueError`` past ``2**24 - 1`` blocks."""
    if not 0 <= position <= _POSITION_TOP:
        raise ValueError(f"CPU tier: block position {position} outside 0..{_POSITION_TOP}")
    return (rank << _POSITION_BITS) | (_POSITION_TOP - position)


def rank_pair(value: i64) -> tuple[int, int]:
    """``rank_value``'s pair back: ``(rank, -position)``."""
    return int(value >> _POSITION_BITS), -int(_POSITION_TOP - (value & _POSITION_TOP))


def distinct(keys: vec[i64]) -> vec[i64]:
    """Indices into ``keys`` of its first occurrences, in order (``dict.fromkeys``), by open
    addressing in a local vector (a store's keys are distinct but for a 64-bit collision, so
    this is one probe a key, all in cache, and no int object)."""
    out = vec[i64](capacity=len(keys))
    if len(keys) < 2:
        for n in range(len(keys)):
            out = append(out, n)
        return out
    num_cells = 16
    while num_cells < 2 * len(keys):
        num_cells *= 2
    mask: i64 = num_cells - 1
    seen = vec[i64]([0] * num_cells)  # 1 + index in ``keys`` of the key a cell holds, 0: empty
    for n in range(len(keys)):
        key = keys[n]
        i = (key ^ (key >> 32)) & mask
        while seen[i] and keys[seen[i] - 1] != key:
            i = (i + 1) & mask
        if not seen[i]:
            seen[i] = n + 1
            out = append(out, n)
    return out


class TierAccess:
    """One request's accesses to the tier (vLLM ``_RequestCacheAccess`` and ``_RequestRank``).

    Attributes:
        rank: the request's number from the tier's counter, 0 until its first access.
        span: 1 + the highest block index it recorded (0: none).
        seen: bit ``i`` set for block index ``i`` recorded (32 bits a word).
        keys: ``keys[i]`` the key of recorded block ``i`` (``len(keys) >= span``).
        slots: ``slots[i]`` the tier slot that held ``keys[i]`` when last seen, -1 if none: a
            hint ``CpuTier.finish`` checks (a slot's key) before it probes the key map.
        disk_slots: ``disk_slots[i]`` the disk tier slot that held private block ``i`` when it
            was written, -1 if none (``DiskTier.write``; a hint ``DiskTier.map_private``
            checks).
        index: its entry in the tier's list of ranked requests (``CpuTier._ranked``, which a
            slot's owner names), -1 before its first rank and once finished.
        private_from: its blocks from this index on are private (``prepare_store``'s
            ``private_from``, the least offered; ``EVERY_BLOCK``: none).
        mapped: its private blocks are in the key maps (``CpuTier.map_private``).
        finished: ``CpuTier.finish`` committed its accesses (it records none after).
        pending: bit ``i`` set where block ``i``'s slot (its hint) may be evictable at the
            request's rank ``(r, -(i + 1))``: its eviction entry (32 bits a word; a bit whose
            slot has left that state is stale, cleared when eviction reaches it).
        pending_top: every set bit of ``pending`` is below it.
        num_pending: bits set in ``pending``.
    """

    def __init__(self) -> None:
        self.rank: i64 = 0
        self.index: i64 = -1
        self.span: i64 = 0
        self.seen: vec[i64] = vec[i64]()
        self.keys: vec[i64] = vec[i64]()
        self.slots: vec[i64] = vec[i64]()
        self.disk_slots: vec[i64] = vec[i64]()
        self.private_from: i64 = EVERY_BLOCK
        self.mapped = False
        self.finished = False
        self.pending: vec[i64] = vec[i64]()
        self.pending_top: i64 = 0
        self.num_pending: i64 = 0

    def top_pending(self) -> i64:
        """The highest block index with its pending bit set (``pending_top`` lowered to it
        plus one), or -1 when none is."""
        pending = self.pending
        i = self.pending_top - 1
        while i >= 0:
            word = pending[i >> 5]
            if not word:
                i = ((i >> 5) << 5) - 1  # (the word below's last bit)
                continue
            if word & (1 << (i & 31)):
                break
            i -= 1
        self.pending_top = i + 1
        return i

    def clear_pending(self, index: i64) -> None:
        """Clear block ``index``'s pending bit (set)."""
        word = index >> 5
        self.pending[word] = self.pending[word] & ~(1 << (index & 31))
        self.num_pending -= 1

    def reserve(self, span: i64) -> None:
        """Grow the vectors to hold block indices below ``span`` (one growth for a store's
        blocks rather than one a block)."""
        if (span + 31) >> 5 > len(self.seen):
            self.seen = grown(self.seen, (span + 31) >> 5, 0)
        if span > len(self.keys):
            self.keys = grown(self.keys, span, 0)
            self.slots = grown(self.slots, span, -1)

    def first_seen(self, index: i64, key: i64) -> bool:
        """Record block ``index``, of key ``key``; whether it is the first time."""
        word = index >> 5
        if word >= len(self.seen):
            self.seen = grown(self.seen, word + 1, 0)
        seen = self.seen
        bit: i64 = 1 << (index & 31)
        if seen[word] & bit:
            return False
        seen[word] = seen[word] | bit
        if index >= len(self.keys):
            self.keys = grown(self.keys, index + 1, 0)
            self.slots = grown(self.slots, index + 1, -1)
        self.keys[index] = key
        if index >= self.span:
            self.span = index + 1
        return True


def pending_bit(access: TierAccess, index: i64) -> bool:
    """Whether block ``index``'s pending bit is set (``TierAccess.pending``)."""
    word = index >> 5
    return word < len(access.pending) and bool(access.pending[word] >> (index & 31) & 1)


class HeldRun:
    """What ``CpuTier.held_run`` found for one vector of keys, kept by its caller to resume the
    next lookup of the same keys (a waiting request looked up step after step) instead of
    probing the key map again for every key. The tier watches the last run it was given: it
    forgets the run when it evicts one of its blocks; until then every key found is still held
    in the same slot, so only the first miss is probed again. A held block once stored is
    never storing again, and while no load starts none of those found unread is read.

    Attributes:
        start: the index of the first key looked up (-1: nothing found yet).
        slots: the slots holding ``keys[start : start + len(slots)]``.
        first_storing: ``slots`` before it were seen stored.
        num_load_starts: the tier's loads started when ``first_loading`` was set.
        first_loading: ``slots`` before it were seen read by no load.
    """

    def __init__(self) -> None:
        self.start: i64 = -1
        self.slots: vec[i64] = vec[i64]()
        self.first_storing: i64 = 0
        self.num_load_starts: i64 = -1
        self.first_loading: i64 = 0

    def reset(self, start: i64) -> None:
        """Forget what was found: the next lookup starts afresh from ``start``."""
        self.start = start
        self.slots = vec[i64]()
        self.first_storing = self.first_loading = 0
        self.num_load_starts = -1


@dataclass(slots=True)
class TransferLink:
    """One direction of a link, serving copies in submission order.

    Attributes:
        bandwidth_bytes_per_s: bytes/s one direction carries.
        busy_until_s: when the last copy submitted ends (simulated seconds).
        num_bytes: bytes carried so far (cumulative).
        busy_s: seconds spent copying so far (cumulative).
        job_bytes: copies submitted so far by size: bytes -> copies (vLLM's
            ``vllm:kv_offload_store_size`` / ``_load_size`` histograms observe each
            transfer's bytes).
    """

    bandwidth_bytes_per_s: float
    busy_until_s: float = 0.0
    num_bytes: int = 0
    busy_s: float = 0.0
    job_bytes: dict[int, int] = field(default_factory=dict)

    def submit(self, num_bytes: int, now_s: float) -> float:
        """Queue a copy of ``num_bytes`` bytes at ``now_s``; returns when it ends: it starts
        when the link is free (``max(now_s, busy_until_s)``) and takes
        ``num_bytes / bandwidth_bytes_per_s`` seconds."""
        seconds = num_bytes / self.bandwidth_bytes_per_s
        self.busy_until_s = max(now_s, self.busy_until_s) + seconds
        self.num_bytes += num_bytes
        self.busy_s += seconds
        self.job_bytes[num_bytes] = self.job_bytes.get(num_bytes, 0) + 1
        return self.busy_until_s


class CpuTier:
    """Request-ranked LRU tier of ``num_blocks`` blocks keyed by prefix-cache hash (see the
    module docstring).

    Layout (packed ``librt.vecs`` vectors, no Python object per block, as ``BlockPool``): each
    held key has a *slot*; a slot's key, cell, ready time, reference count, rank and whether it
    is evictable (stored, no load reading it) are vector entries. Keys map to slots by open
    addressing with linear probing (``kvsim.core.kv.keymap``: at most half full; an evicted key
    leaves no tombstone). Eviction takes the least rank (no two held blocks share one), and
    every evictable slot has an entry saying where it is, with lazy invalidation as vLLM's single
    heap: an entry is current while its slot is evictable at that rank; a re-ranked or pinned
    slot leaves its old entry behind, skipped when reached.

    - **A committed rank** ``(n, 0)`` (a finished request's block) joins a queue's end when it
      ranks no lower than the queue's last entry (the counter's newest always does), else a
      4-ary heap (``_heap_rank``, ``_heap_slot``; a block made evictable again after a load);
      both are rebuilt from their current entries once they hold twice as many as there are
      evictable slots (O(1) amortised per entry).
    - **A running request's rank** ``(r, -p)``: the request's ``pending`` bit for block ``p - 1``
      (``TierAccess``), its slot named by the request's hint. A request's blocks are contiguous
      in rank order (one counter number ``r``), tails first: eviction reads the highest pending
      bit of the awake request of least rank with one (``_least``), no heap entry a block.

    Eviction takes the least of the queue's front, the heap's top and that bit.

    **Asleep requests.** Most running requests finish, and re-rank their blocks into the queue,
    before eviction reaches their rank: a running request's blocks get no entry at all while it
    is *asleep*. Requests wake in rank order (``_wake``): before a pop, every asleep request
    whose number ``r`` could rank a block below the least entry (``r << 24`` below it) gets the
    pending bits of its evictable blocks, found by its hints (``TierAccess.slots``); from then on
    its bits are set as its blocks change. Eviction takes the same blocks in the same order; a
    block's entry is only made when a pop could need it.

    **Private blocks.** A block no other request can name (past the request's
    ``Request.shared_tokens``: ``prepare_store``'s ``private_from``) is found only by its own
    request, after a preemption: it is held outside the key map (its cell ``UNMAPPED``), found by
    the request's hint (``TierAccess.slots``), and mapped when the request is preempted
    (``map_private``), as the GPU prefix cache keys such blocks only then
    (``PagedAllocator._cache_full_blocks``). The same blocks are held, ranked and evicted; a store
    neither probes the map for them nor inserts them, and an eviction removes nothing.

    Invariants (``check_invariants``): ``free + storing + stored + loading == num_blocks`` at any
    time; a loading block is stored (ready) and its reference count is positive; every
    evictable slot has a current entry: in the queue or the heap for a committed rank, else its
    request's pending bit if the request is awake; a running rank's slot is named by its
    request's hint.

    Args:
        num_blocks: blocks the tier holds (``kvsim.config.offload.cpu_tier_blocks``).
    """

    def __init__(self, *, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks: a CPU tier holds one block at least, got {num_blocks}")
        self.num_blocks: i64 = num_blocks
        self._num_held: i64 = 0
        self._num_mapped: i64 = 0  # held keys in the key map (held blocks less private ones)
        self._cells: vec[i64] = empty_cells(0)  # cell i: key at 2i, slot at 2i+1
        self._mask: i64 = len(self._cells) // 2 - 1  # (cells - 1; grows with the held keys)
        self._key: vec[i64] = vec[i64]()  # slot -> key (slots grow up to num_blocks)
        self._cell: vec[i64] = vec[i64]()  # slot -> its key's cell, FREE, or UNMAPPED
        self._ref_cnt: vec[i32] = vec[i32]()  # slot -> loads reading it
        self._rank: vec[i64] = vec[i64]()  # slot -> its rank (``rank_value``)
        self._state: vec[u8] = vec[u8]()  # slot -> EVICTABLE | IN_HEAP | ... bits
        # slot -> the request whose rank a running rank ``(r, -p)`` is (read only then), as
        # its entry in ``_ranked``: the ranked unfinished requests (a finished one's entry is
        # ``_vacant``, its index reused), so that a store writes an integer a slot, not an
        # object reference
        self._owner: vec[i64] = vec[i64]()
        self._ranked: list[TierAccess] = []
        self._vacant = TierAccess()
        self._free_indices: vec[i64] = vec[i64]()
        self._free_slots: vec[i64] = vec[i64]()  # slots given back by evictions
        self._heap_rank: vec[i64] = vec[i64]()  # heap entries: rank ...
        self._heap_slot: vec[i64] = vec[i64]()  # ... and slot
        self._queue_rank: vec[i64] = vec[i64]()  # queue entries (ranks never decrease) ...
        self._queue_slot: vec[i64] = vec[i64]()  # ... and slot
        self._queue_head: i64 = 0  # the queue's entries before it are popped
        self._heap_live: i64 = 0  # current entries in the heap (slots with IN_HEAP set)
        self._next_rank: i64 = 0  # vLLM ``LRUCachePolicy._next_rank``
        # running requests with a rank, in rank order: asleep (from ``_asleep_head``) and
        # awake (from ``_awake_head``; finished ones are skipped and dropped); the rank below
        # which every one is awake, and a rank value no asleep request's block is below
        self._asleep: list[TierAccess] = []
        self._asleep_head: i64 = 0
        self._num_asleep: i64 = 0  # unfinished requests from ``_asleep_head`` on
        self._awake: list[TierAccess] = []
        self._awake_head: i64 = 0
        self._num_awake: i64 = 0  # unfinished requests from ``_awake_head`` on
        self._awake_below: i64 = 0
        self._wake_at: i64 = _NO_RANK
        # when ``_least_known``: the awake request of least rank with a pending bit (``None``:
        # none has one) and its highest bit's rank value
        self._least: TierAccess | None = None
        self._least_value: i64 = _NO_RANK
        self._least_known = True
        self._num_loading: i64 = 0  # slots with loads reading them
        self._num_load_starts: i64 = 0  # cumulative: ``prepare_load`` calls (``HeldRun``)
        self._watched: HeldRun | None = None  # the last run ``held_run`` was given
        self._num_evictable: i64 = 0
        self._prepared = vec[i64]()  # the slots the last prepare_store added (storing)
        # how many of them hold private blocks, outside the key map: its returned keys' last
        # ones (a disk tier below holds them outside its map too: ``DiskTier.write``)
        self.num_private_prepared: i64 = 0
        # (ready_s, slots, disk_done_s) of stores from the GPU: a disk tier reads the slots
        # from ready_s to disk_done_s (-1: no disk tier); promotions from the disk apart, as
        # the two links end their copies in different orders; (done_s, slots) of disk writes
        self._pending: deque[tuple[float, vec[i64], float]] = deque()
        self._promoting: deque[tuple[float, vec[i64]]] = deque()
        self._cascades: deque[tuple[float, vec[i64]]] = deque()
        self._promoted = vec[i64]()  # the slots prepared by ``prepare_promotions`` (storing)
        self._num_cascading: i64 = 0  # slots read by a disk write (CASCADING)
        self._num_cascading_loading: i64 = 0  # ... that a load reads too
        self._num_storing: i64 = 0
        self.num_stored_blocks = 0  # cumulative: blocks whose store was prepared
        self.num_evicted_blocks = 0  # cumulative
        # blocks a ``prepare_store`` lacked -> such calls, those it failed to make room for
        # included (vLLM's ``vllm:kv_offload_cpu_allocation_size``)
        self.allocation_sizes: dict[int, int] = {}
        self._sink: i64 = 0  # what reads ahead of a probe read (``warm_homes``), kept
        self._zero_pool = vec[i64]()  # zeros that ``_zeros`` slices
        self._finish_ranks = vec[i64]()  # ``finish``'s scratch, reused
        self._finish_slots = vec[i64]()

    # -- queries ------------------------------------------------------------------------------
    def __contains__(self, key: int) -> bool:
        """Whether the tier holds ``key`` (mapped or private)."""
        return self._held_slot(key) >= 0

    def __len__(self) -> int:
        return self._num_held

    def rank_of(self, key: int) -> tuple[int, int] | None:
        """A held key's rank ``(rank, -position)`` (vLLM's pair), ``None`` if not held."""
        slot = self._held_slot(key)
        return None if slot < 0 else rank_pair(self._rank[slot])

    def _held_slot(self, key: int) -> int:
        """The slot holding ``key``, mapped or private (found by a scan: for queries, not the
        engine's path), or -1."""
        slot = self._find(key)
        if slot >= 0:
            return slot
        cell, key_of = self._cell, self._key
        for s in range(len(key_of)):
            if cell[s] == UNMAPPED and key_of[s] == key:
                return s
        return -1

    def eviction_order(self, now_s: float) -> list[int]:
        """The keys eviction would take at ``now_s``, first first (stored, not loading, by
        rank)."""
        self._settle(now_s)
        state = self._state
        slots = [s for s in range(len(self._key)) if self._cell[s] != FREE and state[s] & EVICTABLE]
        return [self._key[s] for s in sorted(slots, key=lambda s: (self._rank[s], s))]

    def held_run(
        self, keys: vec[i64], now_s: float, start: int = 0, run: HeldRun | None = None
    ) -> tuple[int, bool, bool]:
        """How many of ``keys``, from ``keys[start]``, are held (stored or storing) up to the
        first miss; whether any of them is still storing at ``now_s``; whether a load reads
        any of them (vLLM 0.34.0 ``CPUOffloadingManager.lookup``: ``HIT``, ``HIT_PENDING``,
        ``MISS``). Records nothing. A private block is found once its request is mapped
        (``map_private``).

        ``run``: what the last call with these same ``keys`` found, resumed rather than
        looked up again if the tier has watched it since and evicted none of it (``HeldRun``);
        updated in place, and watched from then on."""
        self._settle(now_s)
        state = self._state
        watch: u8 = 0
        if run is None:
            run = HeldRun()
            run.reset(start)
        else:
            watch = WATCHED
            if run is not self._watched or run.start != start:
                if self._watched is not None:
                    self._forget_run(self._watched)
                self._watched = run
                run.reset(start)
        slots = run.slots  # (every one still held, in the same slot: none evicted)
        for i in range(start + len(slots), len(keys)):
            slot = self._find(keys[i])
            if slot < 0:
                break
            state[slot] = state[slot] | watch
            slots = append(slots, slot)
        run.slots = slots
        found = len(slots)
        ref_cnt = self._ref_cnt
        i = run.first_storing  # (a held block, once stored, is never storing again)
        while i < found and not state[slots[i]] & STORING:
            i += 1
        run.first_storing = i
        if run.num_load_starts != self._num_load_starts:
            run.num_load_starts = self._num_load_starts
            run.first_loading = 0
        j = run.first_loading  # (with no load started since, none of those before it is read)
        while j < found and ref_cnt[slots[j]] == 0:
            j += 1
        run.first_loading = j
        return found, i < found, j < found

    def _forget_run(self, run: HeldRun) -> None:
        """Stop watching ``run`` (``held_run``) and forget what it found."""
        state = self._state
        for slot in run.slots:
            state[slot] = state[slot] & NOT_WATCHED
        run.reset(-1)
        self._watched = None

    def next_store_end(self, now_s: float) -> float | None:
        """When the first store still in flight at ``now_s`` ends (seconds), ``None`` if
        none is."""
        self._settle(now_s)
        ends = [q[0][0] for q in (self._pending, self._promoting) if q]
        return min(ends) if ends else None

    def occupancy(self, now_s: float) -> tuple[int, int, int, int]:
        """``(stored, storing, loading, free)`` blocks at ``now_s``: every block in one.
        *Loading* counts the blocks a copy reads: a load to the GPU, or with a disk tier the
        write on to the disk (``complete_store``'s ``disk_done_s``)."""
        self._settle(now_s)
        return self._counts()

    def _counts(self) -> tuple[int, int, int, int]:
        """``occupancy`` as of the last ``_settle``."""
        held = self._num_held
        loading = self._num_loading + self._num_cascading - self._num_cascading_loading
        stored = held - self._num_storing - loading
        return stored, self._num_storing, loading, self.num_blocks - held

    def _find(self, key: i64) -> i64:
        """The slot holding ``key``, or -1."""
        cells = self._cells
        i = find_cell(cells, self._mask, key)
        if i < 0:
            return -1
        return cells[2 * i + 1]

    def _zeros(self, n: i64) -> vec[i64]:
        """A new vector of ``n`` zeros, filled by index: one copy of a slice, where appending
        is a call a value."""
        if len(self._zero_pool) < n:
            self._zero_pool = vec[i64]([0] * max(n, 2 * len(self._zero_pool), 1024))
        return self._zero_pool[0:n]

    # -- ranks (vLLM ``LRUCachePolicy``) ------------------------------------------------------
    def _request_rank(self, access: TierAccess) -> i64:
        if access.rank == 0:
            self._next_rank += 1
            access.rank = self._next_rank
            if len(self._free_indices):
                self._free_indices, access.index = pop(self._free_indices)
                self._ranked[access.index] = access
            else:
                access.index = len(self._ranked)
                self._ranked.append(access)
            self._asleep.append(access)
            self._num_asleep += 1
            if self._wake_at == _NO_RANK:
                self._wake_at = access.rank << _POSITION_BITS
        return access.rank

    def _is_asleep(self, value: i64) -> bool:
        """Whether the rank ``value`` is a running request's (position > 0) that is asleep."""
        return (value & _POSITION_TOP) != _POSITION_TOP and value >> _POSITION_BITS >= (
            self._awake_below
        )

    def _wake(self, below: i64) -> None:
        """Wake every asleep request whose blocks could rank below ``below`` (a rank value):
        each evictable block it ranks gets its pending bit, so that eviction sees it."""
        if self._wake_at >= below:
            return
        asleep = self._asleep
        head = self._asleep_head
        self._wake_at = _NO_RANK
        while head < len(asleep):
            access = asleep[head]
            if not access.finished:
                if access.rank << _POSITION_BITS >= below:
                    self._wake_at = access.rank << _POSITION_BITS
                    break
                self._awake_below = access.rank + 1
                self._num_asleep -= 1
                self._awake.append(access)
                self._num_awake += 1
                self._mark_ranked(access)
            head += 1
        if head >= 1024 and 2 * head >= len(asleep):
            self._asleep = asleep[head:]
            head = 0
        self._asleep_head = head

    def _mark_ranked(self, access: TierAccess) -> None:
        """Set the pending bit of each evictable block the (just woken) request ranks: the slot
        its hint names, if its rank is still the request's at that position."""
        seen, keys, hints = access.seen, access.keys, access.slots
        key_of, cell, rank, state = self._key, self._cell, self._rank, self._state
        for index in range(access.span - 1, -1, -1):
            slot = hints[index]
            if (
                slot >= 0
                and seen[index >> 5] & (1 << (index & 31))
                and cell[slot] != FREE
                and key_of[slot] == keys[index]
                and state[slot] & EVICTABLE
                and rank[slot] == (access.rank << _POSITION_BITS) | (_POSITION_TOP - index - 1)
            ):
                self._mark_pending(access, index)

    def _mark_pending(self, access: TierAccess, index: i64) -> None:
        """Block ``index`` of the running request ``access`` is evictable at the request's rank
        for it: its pending bit is its entry."""
        word = index >> 5
        if word >= len(access.pending):
            access.pending = grown(access.pending, word + 1, 0)
        pending = access.pending
        bit: i64 = 1 << (index & 31)
        if pending[word] & bit:
            return
        pending[word] = pending[word] | bit
        access.num_pending += 1
        if index >= access.pending_top:
            access.pending_top = index + 1
        if self._least_known:
            value = (access.rank << _POSITION_BITS) | (_POSITION_TOP - (index + 1))
            if value < self._least_value:  # (the least request's, or one of lesser rank)
                self._least, self._least_value = access, value

    def _least_pending(self) -> i64:
        """The rank value of the least awake request's highest pending bit (``_least``),
        ``_NO_RANK`` when no request has one."""
        if self._least_known:
            return self._least_value
        awake = self._awake
        head = self._awake_head
        least: TierAccess | None = None
        value: i64 = _NO_RANK
        i = head
        while i < len(awake):
            access = awake[i]
            if access.finished and i == head:
                head += 1  # (a finished request leaves from the front)
            elif access.num_pending:
                least = access
                value = (access.rank << _POSITION_BITS) | (
                    _POSITION_TOP - (access.top_pending() + 1)
                )
                break
            i += 1
        if head >= 1024 and 2 * head >= len(awake):
            self._awake = awake[head:]
            head = 0
        self._awake_head = head
        self._least, self._least_value, self._least_known = least, value, True
        return value

    def _record(self, access: TierAccess, index: i64, key: i64, slot: i64) -> None:
        """The request's access to block ``index`` of key ``key`` (held in ``slot``, or -1):
        the first one ranks a held block ``(r, -(index + 1))`` unless it ranks higher already
        (``on_request_access``)."""
        if not access.first_seen(index, key):
            return
        access.slots[index] = slot
        value = rank_value(self._request_rank(access), index + 1)
        if slot >= 0 and self._rank[slot] < value:
            self._rank[slot] = value
            self._owner[slot] = access.index
            if self._state[slot] & EVICTABLE:
                self._push(value, slot)

    def finish(self, access: TierAccess) -> None:
        """The request finished: each block it recorded that the tier still holds gets a fresh
        rank ``(n, 0)``, its last block first (``on_request_finished``)."""
        seen, keys, hints, rank = access.seen, access.keys, access.slots, self._rank
        key_of, cell, state = self._key, self._cell, self._state
        warm: i64 = 0  # the hinted slots read ahead (``kvsim.core.kv.keymap.warm_homes``)
        for index in range(access.span):
            slot = hints[index]
            if slot >= 0:
                warm += key_of[slot] ^ cell[slot] ^ i64(state[slot])
        self._sink ^= warm
        # the evictable ones' new entries, written by index and added to the queue's end in
        # one copy each (``_push`` of the counter's newest ranks), not one append a block
        if len(self._finish_ranks) < access.span:
            self._finish_ranks = self._zeros(access.span)
            self._finish_slots = self._zeros(access.span)
        new_ranks, new_slots = self._finish_ranks, self._finish_slots
        private_from = EVERY_BLOCK if access.mapped else access.private_from
        num_new: i64 = 0
        next_rank: i64 = self._next_rank
        for index in range(access.span - 1, -1, -1):
            if not seen[index >> 5] & (1 << (index & 31)):
                continue
            key, slot = keys[index], hints[index]
            # the slot it was seen in, if it still holds it (a held key sits in one slot);
            # else the key map (evicted, or stored since by another request), but for an
            # unmapped private block: evicted, in no map
            if slot < 0 or cell[slot] == FREE or key_of[slot] != key:
                if index >= private_from:
                    continue
                slot = self._find(key)
                if slot < 0:
                    continue
            next_rank += 1
            value = (next_rank << _POSITION_BITS) | _POSITION_TOP  # (rank_value(n, 0))
            rank[slot] = value
            flags = state[slot]
            if flags & EVICTABLE:
                self._unheap(slot)
                new_ranks[num_new] = value
                new_slots[num_new] = slot
                num_new += 1
        self._next_rank = next_rank
        if num_new:
            self._queue_rank = extend(self._queue_rank, new_ranks[0:num_new])
            self._queue_slot = extend(self._queue_slot, new_slots[0:num_new])
        if len(self._queue_rank) - self._queue_head >= 2 * self._num_evictable + 64:
            self._rebuild_queue()
        access.span = 0
        access.seen, access.keys, access.slots = vec[i64](), vec[i64](), vec[i64]()
        access.pending, access.pending_top, access.num_pending = vec[i64](), 0, 0
        if access is self._least:
            self._least_known = False
        if access.rank and not access.finished:  # (it leaves its list when passed or compacted)
            if access.rank >= self._awake_below:
                self._num_asleep -= 1
            else:
                self._num_awake -= 1
        access.finished = True
        if access.index >= 0:  # (no held block ranks it running now: its entry is free)
            self._ranked[access.index] = self._vacant
            self._free_indices = append(self._free_indices, access.index)
            access.index = -1
        if len(self._asleep) - self._asleep_head >= 2 * self._num_asleep + 1024:
            self._asleep = [a for a in self._asleep[self._asleep_head :] if not a.finished]
            self._asleep_head = 0
        if len(self._awake) - self._awake_head >= 2 * self._num_awake + 1024:
            self._awake = [a for a in self._awake[self._awake_head :] if not a.finished]
            self._awake_head = 0

    # -- mutations ----------------------------------------------------------------------------
    def prepare_store(
        self,
        keys: vec[i64],
        now_s: float,
        access: TierAccess,
        first_index: i64,
        private_from: i64 = EVERY_BLOCK,
    ) -> vec[i64] | None:
        """Offer ``keys`` (block indices ``first_index`` on of the request ``access`` records)
        to the tier. Records the offered keys the tier lacks or holds stored; makes room for
        those it lacks by evicting the evictable blocks of least rank that are not offered; adds
        them, storing, ranked ``(r, -position)``. Returns the keys to copy (their copy is timed
        by ``complete_store``), or ``None`` when eviction cannot make room (the accesses stay
        recorded, nothing else changes: vLLM ``CPUOffloadingManager.prepare_store``).

        Blocks from index ``private_from`` on are the request's own (see the class docstring):
        offered once, the tier lacks them, and they are held outside the key map until
        ``map_private``; once the request is mapped every block is mapped. Those the tier
        takes are the returned keys' last ``num_private_prepared``."""
        self._settle(now_s)
        if access.mapped:
            private_from = EVERY_BLOCK
        elif private_from < access.private_from:
            access.private_from = private_from
        state = self._state
        mapped_end = min(len(keys), max(0, private_from - first_index))
        self._sink ^= warm_homes(self._cells, self._mask, keys, 0, mapped_end)
        access.reserve(first_index + len(keys))
        seen, access_keys, hints = access.seen, access.keys, access.slots
        offered = vec[i64]()  # the held slots offered (OFFERED until the eviction is done)
        new_at = self._zeros(len(keys))  # indices into keys of the keys the tier lacks ...
        num_new: i64 = 0  # ... its first num_new entries
        num_mapped_new: i64 = 0  # new_at's first entries, before the private ones (distinct keys)
        for j in range(len(keys)):
            slot: i64 = -1  # (a private block: the tier lacks it)
            if first_index + j < private_from:
                slot = self._find(keys[j])
                if slot < 0:
                    num_mapped_new += 1
            if slot < 0:
                new_at[num_new] = j
                num_new += 1
                # ``_record`` of a block the tier lacks (``TierAccess.first_seen``, the vectors
                # reserved above): nothing to rank yet
                index = first_index + j
                word, bit = index >> 5, i64(1) << (index & 31)
                if not seen[word] & bit:
                    seen[word] = seen[word] | bit
                    access_keys[index] = keys[j]
                    hints[index] = -1
                    if index >= access.span:
                        access.span = index + 1
                    if access.rank == 0:
                        self._request_rank(access)
            else:
                state[slot] = state[slot] | OFFERED  # among the keys being stored
                offered = append(offered, slot)
                if not state[slot] & STORING:  # (a block still storing is not recorded)
                    self._record(access, first_index + j, keys[j], slot)
        new_at = new_at[0:num_new]
        if num_mapped_new > 1:
            lacking = vec[i64](capacity=num_mapped_new)
            for n in range(num_mapped_new):
                lacking = append(lacking, keys[new_at[n]])
            kept = distinct(lacking)  # a key offered twice is copied once
            if len(kept) < num_mapped_new:
                deduped = vec[i64](capacity=len(new_at))
                for n in kept:
                    deduped = append(deduped, new_at[n])
                for n in range(num_mapped_new, len(new_at)):
                    deduped = append(deduped, new_at[n])
                new_at = deduped
        new = self._zeros(len(new_at))
        for n in range(len(new_at)):
            new[n] = keys[new_at[n]]
        self._prepared = vec[i64]()
        self.num_private_prepared = 0
        need = len(new) - (self.num_blocks - self._num_held)
        victims: vec[i64] | None = vec[i64]()
        if need > 0:
            victims = self._evict(need) if need <= self._num_evictable else None
        for slot in offered:
            state[slot] = state[slot] & NOT_OFFERED
        if not len(new):
            return new
        self.allocation_sizes[len(new)] = self.allocation_sizes.get(len(new), 0) + 1
        if victims is None:
            return None
        if need > 0:
            cells, mask, cell = self._cells, self._mask, self._cell
            self._sink ^= warm_cells(cells, cell, victims, 0, need)  # (FREE, UNMAPPED: < 0)
            for slot in victims:
                if state[slot] & WATCHED and self._watched is not None:
                    self._forget_run(self._watched)  # (one of its blocks is evicted)
                if cell[slot] != UNMAPPED:
                    remove_cell(cells, mask, cell[slot], cell)
                    self._num_mapped -= 1
                cell[slot] = FREE  # (``_add`` takes it first: the victims, the last first)
            self._num_held -= need
            self.num_evicted_blocks += need
        self._add(keys, new_at, access, first_index, private_from, victims)
        prepared, hints = self._prepared, access.slots  # (each offered index was recorded)
        for n in range(len(new_at)):
            hints[first_index + new_at[n]] = prepared[n]
        return new

    def _evict(self, need: i64) -> vec[i64] | None:
        """Pop the ``need`` evictable slots of least rank not offered to the store under way
        (``OFFERED``; ``LRUCachePolicy.evict``), or ``None`` (the entries as they were) when
        fewer are."""
        rank, state = self._rank, self._state
        selected = self._zeros(need)
        num_selected: i64 = 0
        deferred = vec[i64]()  # slots offered to this store, pushed back after ...
        requeued = vec[i64]()  # ... but those from the queue, back at its front (in order)
        while num_selected < need:
            # the queue's front entries that rank below the heap's top, every pending bit and
            # every asleep request's blocks (``_pop`` would take them from the queue one by
            # one), taken in one pass: taking them changes neither of those
            bound = self._queue_bound()
            head, qr, qs = self._queue_head, self._queue_rank, self._queue_slot
            while num_selected < need and head < len(qr) and qr[head] <= bound:
                value, slot = qr[head], qs[head]
                head += 1
                flags = state[slot]
                if not flags & EVICTABLE or flags & IN_HEAP or rank[slot] != value:
                    continue  # stale, or current in the heap
                state[slot] = flags & NOT_EVICTABLE
                if flags & OFFERED:
                    requeued = append(requeued, slot)
                else:
                    selected[num_selected] = slot
                    num_selected += 1
            self._queue_head = head
            if head >= 65536 and 2 * head >= len(qr):  # drop the popped half, as ``_pop`` does
                self._queue_rank, self._queue_slot = qr[head:], qs[head:]
                self._queue_head = 0
            if num_selected == need:
                break
            source, value, slot = self._pop()
            if source < 0:
                break
            if slot < 0:
                continue  # (a pending bit whose hint names no slot holding its key: stale)
            flags = state[slot]
            if not flags & EVICTABLE or rank[slot] != value:
                continue  # stale
            if (source == 1 and not flags & IN_HEAP) or (source != 1 and flags & IN_HEAP):
                continue  # stale: the slot's current entry is in the other container
            if source == 1:
                self._unheap(slot)
            state[slot] = state[slot] & NOT_EVICTABLE  # (its other entries are skipped too)
            if state[slot] & OFFERED:
                if source == 0:
                    requeued = append(requeued, slot)
                else:
                    deferred = append(deferred, slot)
            else:
                selected[num_selected] = slot
                num_selected += 1
        if len(requeued):  # (first: the pushes below may join the queue's end)
            self._requeue(requeued)
        for slot in deferred:
            state[slot] = state[slot] | EVICTABLE
            self._push(rank[slot], slot)
        if num_selected < need:
            for i in range(num_selected):
                slot = selected[i]
                state[slot] = state[slot] | EVICTABLE
                self._push(rank[slot], slot)
            return None
        self._num_evictable -= need
        return selected

    def _requeue(self, slots: vec[i64]) -> None:
        """Put ``slots``, popped from the queue's front in this order and not evicted, back at
        its front, evictable: every entry left in the queue ranks above them, so the queue stays
        in order (where the heap would take them one sift each)."""
        state, rank = self._state, self._rank
        for slot in slots:
            state[slot] = state[slot] | EVICTABLE
        num = len(slots)
        head = self._queue_head
        if head < num:  # (the popped entries were dropped meanwhile: ``_pop``)
            for slot in slots:
                self._push(rank[slot], slot)
            return
        head -= num
        queue_rank, queue_slot = self._queue_rank, self._queue_slot
        for i in range(num):
            slot = slots[i]
            queue_rank[head + i] = rank[slot]
            queue_slot[head + i] = slot
        self._queue_head = head

    def _add(
        self,
        keys: vec[i64],
        new_at: vec[i64],
        access: TierAccess,
        first_index: i64,
        private_from: i64,
        reuse: vec[i64],
    ) -> None:
        """Hold ``keys[j]`` for each ``j`` of ``new_at`` (not held), storing, ranked
        ``(r, -(first_index + j + 1))`` by the request ``access`` (``LRUCachePolicy.insert``);
        those from
        block ``private_from`` on outside the key map. Slots come from ``reuse`` (just freed),
        its last first, then the free slots, the last freed first, then unused ones."""
        if 2 * (self._num_mapped + len(new_at)) > self._mask + 1:
            self._rehash(self._num_mapped + len(new_at))
        free_slots = self._free_slots
        key_of, cell, rank, state = self._key, self._cell, self._rank, self._state
        owner, request_rank = self._owner, self._request_rank(access)
        index = access.index
        prepared = self._zeros(len(new_at))
        num_reuse = len(reuse)
        if len(new_at):  # (the last position is the highest: the range is checked once)
            rank_value(request_rank, first_index + new_at[len(new_at) - 1] + 1)
        for n in range(len(new_at)):
            j = new_at[n]
            key = keys[j]
            value = (request_rank << _POSITION_BITS) | (_POSITION_TOP - (first_index + j + 1))
            if num_reuse or len(free_slots):
                if num_reuse:
                    num_reuse -= 1
                    slot = reuse[num_reuse]
                else:
                    free_slots, slot = pop(free_slots)
                key_of[slot] = key
                rank[slot] = value
                owner[slot] = index
                state[slot] = STORING  # (a free slot's other bits are clear)
            else:  # a slot never used yet
                slot = len(key_of)
                key_of = append(key_of, key)
                cell = append(cell, 0)
                rank = append(rank, value)
                owner = append(owner, index)
                state = append(state, STORING)
                self._ref_cnt = append(self._ref_cnt, 0)
            if first_index + j >= private_from:
                cell[slot] = UNMAPPED
                self.num_private_prepared += 1
            else:
                cell[slot] = self._insert(key, slot)
                self._num_mapped += 1
            prepared[n] = slot
        self._free_slots = free_slots
        self._key, self._cell, self._rank, self._state = key_of, cell, rank, state
        self._owner = owner
        self._num_held += len(new_at)
        self._num_storing += len(new_at)
        self.num_stored_blocks += len(new_at)
        self._prepared = prepared

    def complete_store(self, keys: vec[i64], ready_s: float, disk_done_s: float = -1.0) -> None:
        """The copy of ``keys`` (the last ``prepare_store``'s) ends at ``ready_s``: they are
        stored from then on (evictable unless a load reads them). Stores are submitted in time
        order, so ``ready_s`` never decreases from one call to the next (``TransferLink`` is
        first come first served). ``disk_done_s`` (a disk tier; -1: none): from ``ready_s``
        their write on to the disk reads them, and they are not evictable until it ends (vLLM
        0.34.0 ``TieringOffloadingManager.complete_store`` pins them by ``prepare_read``); it
        never decreases either."""
        prepared = self._prepared
        if len(prepared) != len(keys):
            raise RuntimeError("CPU tier: complete_store without its prepare_store")
        if not len(prepared):
            return
        self._pending.append((ready_s, prepared, disk_done_s))
        self._prepared = vec[i64]()

    def holds(self, key: i64) -> bool:
        """Whether ``key`` is in the key map (stored or storing; private blocks are not)."""
        return self._find(key) >= 0

    def shield(self, slots: vec[i64], key: i64) -> vec[i64]:
        """Keep ``key``'s slot, if the tier holds it, from eviction until ``unshield`` (marked
        as offered to the store under way); returns ``slots`` with it added."""
        slot = self._find(key)
        if slot >= 0 and not self._state[slot] & OFFERED:
            self._state[slot] = self._state[slot] | OFFERED
            slots = append(slots, slot)
        return slots

    def unshield(self, slots: vec[i64]) -> None:
        """Let ``shield``'s slots be evicted again."""
        state = self._state
        for slot in slots:
            state[slot] = state[slot] & NOT_OFFERED

    def promotion_room(self, shielded: vec[i64], now_s: float) -> i64:
        """Blocks ``prepare_promotions`` can make room for at ``now_s`` while ``shield``'s
        ``shielded`` slots are kept: the free slots and the evictable ones not shielded."""
        self._settle(now_s)
        state = self._state
        kept: i64 = 0
        for slot in shielded:
            if state[slot] & EVICTABLE:
                kept += 1
        return self.num_blocks - self._num_held + self._num_evictable - kept

    def prepare_promotions(
        self, keys: vec[i64], now_s: float, access: TierAccess, first_index: i64
    ) -> bool:
        """Make room for ``keys`` (blocks ``first_index`` on of the request ``access``
        records), which the tier lacks, read from a disk tier, and hold them storing until
        ``complete_promotions``; ``False`` when eviction cannot make room for all: then every
        key's access is recorded and none is held, so a caller promoting several asks
        ``promotion_room`` first (vLLM 0.34.0 ``TieringOffloadingManager._initiate_promotion``
        calls ``prepare_write``, which is ``prepare_store``, one key at a time)."""
        new = self.prepare_store(keys, now_s, access, first_index)
        if new is None:
            return False
        assert len(new) == len(keys), f"promotion of keys the tier holds: {list(keys)}"
        self._promoted = extend(self._promoted, self._prepared)
        self._prepared = vec[i64]()
        return True

    def complete_promotions(self, ready_s: float) -> None:
        """The disk read of the blocks ``prepare_promotions`` held since the last call ends at
        ``ready_s`` (never decreasing: one disk link): they are stored from then on."""
        if len(self._promoted):
            self._promoting.append((ready_s, self._promoted))
            self._promoted = vec[i64]()

    def _insert(self, key: i64, slot: i64) -> i64:
        """Map ``key`` (not held) to ``slot``; returns its cell (``insert_new``)."""
        return insert_new(self._cells, self._mask, key, slot)

    def map_private(self, access: TierAccess) -> None:
        """The request was preempted: its private blocks the tier holds join the key map, so
        that its lookups, loads and stores find them by key; its later stores are mapped too
        (``TierAccess.mapped``)."""
        if access.mapped:
            return
        access.mapped = True
        seen, keys, hints = access.seen, access.keys, access.slots
        for index in range(access.span):
            slot = hints[index]
            if (
                seen[index >> 5] & (1 << (index & 31))
                and slot >= 0
                and self._cell[slot] == UNMAPPED
                and self._key[slot] == keys[index]
            ):
                if 2 * (self._num_mapped + 1) > self._mask + 1:
                    self._rehash(self._num_mapped + 1)
                self._cell[slot] = self._insert(keys[index], slot)
                self._num_mapped += 1

    def _rehash(self, num_keys: int) -> None:
        """Rebuild the key map with room for ``num_keys`` keys (``empty_cells``)."""
        self._cells = empty_cells(num_keys)
        self._mask = len(self._cells) // 2 - 1
        key_of, cell = self._key, self._cell
        for slot in range(len(key_of)):
            if cell[slot] >= 0:  # mapped
                cell[slot] = self._insert(key_of[slot], slot)

    def prepare_load(self, keys: vec[i64], access: TierAccess, first_index: i64) -> None:
        """Hold ``keys`` (stored blocks; block indices ``first_index`` on) while a load reads
        them, and record the request's access to them (vLLM ``prepare_load``)."""
        ref_cnt, state = self._ref_cnt, self._state
        self._num_load_starts += 1
        self._sink ^= warm_homes(self._cells, self._mask, keys, 0, len(keys))
        for j in range(len(keys)):
            slot = self._find(keys[j])
            assert slot >= 0, f"load of a block the tier does not hold: {keys[j]}"
            if ref_cnt[slot] == 0:
                self._num_loading += 1
                if state[slot] & EVICTABLE:
                    state[slot] = state[slot] & NOT_EVICTABLE
                    self._num_evictable -= 1
                    self._unheap(slot)
                if state[slot] & CASCADING:
                    self._num_cascading_loading += 1
            ref_cnt[slot] += 1
            self._record(access, first_index + j, keys[j], slot)

    def complete_load(self, keys: vec[i64]) -> None:
        """Release ``keys`` held by ``prepare_load``: a block no load reads is evictable."""
        ref_cnt, state = self._ref_cnt, self._state
        self._sink ^= warm_homes(self._cells, self._mask, keys, 0, len(keys))
        for key in keys:
            slot = self._find(key)
            ref_cnt[slot] -= 1
            if ref_cnt[slot] == 0:
                self._num_loading -= 1
                if state[slot] & CASCADING:  # (its disk write still reads it)
                    self._num_cascading_loading -= 1
                    continue
                self._make_evictable(slot)

    def _settle(self, now_s: float) -> None:
        """The copies that completed by ``now_s``: stores from the GPU and promotions from the
        disk leave their blocks stored, evictable unless a load or a disk write reads them
        (vLLM ``complete_store``: ``mark_evictable``); disk writes release theirs."""
        pending, cascades = self._pending, self._cascades
        while pending and pending[0][0] <= now_s:
            _, slots, disk_done_s = pending.popleft()
            if disk_done_s >= 0:
                self._stored(slots, CASCADING)
                self._num_cascading += len(slots)
                cascades.append((disk_done_s, slots))
            else:
                self._stored(slots, 0)
        promoting = self._promoting
        while promoting and promoting[0][0] <= now_s:
            self._stored(promoting.popleft()[1], 0)
        state, ref_cnt = self._state, self._ref_cnt
        while cascades and cascades[0][0] <= now_s:
            slots = cascades.popleft()[1]
            self._num_cascading -= len(slots)
            for slot in slots:
                state[slot] = state[slot] & NOT_CASCADING
                if ref_cnt[slot]:
                    self._num_cascading_loading -= 1
                else:
                    self._make_evictable(slot)

    def _stored(self, slots: vec[i64], pin: u8) -> None:
        """``slots``' copies into the tier ended: they are stored; with ``pin`` (CASCADING)
        a disk write reads them, else they are evictable unless a load reads them."""
        self._num_storing -= len(slots)
        state, ref_cnt, rank = self._state, self._ref_cnt, self._rank
        for slot in slots:  # (a load may have read it, and ended, before it settled here)
            flags = (state[slot] & NOT_STORING) | pin
            state[slot] = flags
            if pin:
                if ref_cnt[slot]:
                    self._num_cascading_loading += 1
            elif ref_cnt[slot] == 0 and not flags & EVICTABLE:
                if self._is_asleep(rank[slot]) and not flags & IN_HEAP:
                    # an asleep request's: evictable, no entry until it wakes (``_wake``)
                    state[slot] = flags | EVICTABLE
                    self._num_evictable += 1
                else:
                    self._make_evictable(slot)

    def _make_evictable(self, slot: i64) -> None:
        """``slot`` is stored and nothing reads it: evictable, with a current entry."""
        self._state[slot] = self._state[slot] | EVICTABLE
        self._num_evictable += 1
        self._push(self._rank[slot], slot)

    # -- the queue and heap of evictable slots --------------------------------------------
    def _push(self, value: i64, slot: i64) -> None:
        """Make ``(value, slot)`` the slot's current entry: a running request's rank its
        pending bit; a committed one at the queue's end if no entry there ranks higher (the
        counter's newest always does), else in the heap. A container holding twice its
        current entries is rebuilt."""
        state = self._state
        position = _POSITION_TOP - (value & _POSITION_TOP)
        if position:  # (the slot's owner ranks it: ``_owner``)
            if state[slot] & IN_HEAP:
                self._unheap(slot)
            if value >> _POSITION_BITS < self._awake_below:  # (asleep: no entry until it wakes)
                self._mark_pending(self._ranked[self._owner[slot]], position - 1)
            return
        qr = self._queue_rank
        if len(qr) == self._queue_head or qr[len(qr) - 1] <= value:
            self._unheap(slot)
            self._queue_rank = append(qr, value)
            self._queue_slot = append(self._queue_slot, slot)
            if len(self._queue_rank) - self._queue_head >= 2 * self._num_evictable + 64:
                self._rebuild_queue()
            return
        if not state[slot] & IN_HEAP:
            state[slot] = state[slot] | IN_HEAP
            self._heap_live += 1
        hr, hs = append(self._heap_rank, value), append(self._heap_slot, slot)
        i = len(hr) - 1
        while i > 0:  # sift up
            parent = (i - 1) >> 2
            if hr[parent] <= value:
                break
            hr[i], hs[i] = hr[parent], hs[parent]
            i = parent
        hr[i], hs[i] = value, slot
        self._heap_rank, self._heap_slot = hr, hs
        if len(hr) >= 2 * self._heap_live + 64:
            self._rebuild_heap()

    def _unheap(self, slot: i64) -> None:
        """The slot's entry is no longer current (pinned, evicted, or popped)."""
        state = self._state
        if state[slot] & IN_HEAP:
            state[slot] = state[slot] & NOT_IN_HEAP
            self._heap_live -= 1

    def _queue_bound(self) -> i64:
        """The rank value up to which the queue's front entries are ``_pop``'s next: the least
        of the heap's top, the least pending bit and ``_wake_at``."""
        bound = self._wake_at
        if len(self._heap_rank) and self._heap_rank[0] < bound:
            bound = self._heap_rank[0]
        value = self._least_value if self._least_known else self._least_pending()
        return min(bound, value)

    def _pop(self) -> tuple[i64, i64, i64]:
        """The entry of least rank removed: ``(source, rank, slot)``, ``source`` 0 for the
        queue's front, 1 for the heap's top, 2 for the least running request's highest pending
        bit (its hint's slot, -1 if that holds another key now), -1 when there is none."""
        head, qr = self._queue_head, self._queue_rank
        hr, hs = self._heap_rank, self._heap_slot
        source: i64 = -1
        least: i64 = _NO_RANK
        if head < len(qr):
            source, least = 0, qr[head]
        if len(hr) and hr[0] < least:
            source, least = 1, hr[0]
        value = self._least_value
        if not self._least_known:
            value = self._least_pending()
        if value < least:
            source, least = 2, value
        if self._wake_at < least:  # (an asleep request's block may rank below)
            self._wake(least)
            value = self._least_value
            if not self._least_known:
                value = self._least_pending()
            if value < least:
                source, least = 2, value
        if source == 0:
            slot = self._queue_slot[head]
            self._queue_head = head + 1
            if head >= 65536 and 2 * head >= len(qr):  # drop the popped half: one copy
                self._queue_rank, self._queue_slot = qr[head + 1 :], self._queue_slot[head + 1 :]
                self._queue_head = 0
            return 0, least, slot
        if source == 1:
            slot = hs[0]
            hr, value = pop(hr)
            hs, last = pop(hs)
            if len(hr):
                hr[0], hs[0] = value, last
                _sift_down(hr, hs, 0)
            self._heap_rank, self._heap_slot = hr, hs
            return 1, least, slot
        access = self._least
        if source == 2 and access is not None:
            index = _POSITION_TOP - (least & _POSITION_TOP) - 1
            access.clear_pending(index)
            if access.num_pending:
                self._least_value = (access.rank << _POSITION_BITS) | (
                    _POSITION_TOP - (access.top_pending() + 1)
                )
            else:
                self._least_known = False  # (a later request may have bits)
            slot = access.slots[index]
            if slot >= 0 and (self._cell[slot] == FREE or self._key[slot] != access.keys[index]):
                slot = -1
            return 2, least, slot
        return -1, least, -1

    def _rebuild_queue(self) -> None:
        """Keep the queue's current entries, in order."""
        self._queue_rank, self._queue_slot = self._current(
            self._queue_rank, self._queue_slot, self._queue_head, 0
        )
        self._queue_head = 0

    def _rebuild_heap(self) -> None:
        """Keep the heap's current entries and heapify (vLLM ``_maybe_compact_heap``)."""
        hr, hs = self._current(self._heap_rank, self._heap_slot, 0, 1)
        for i in range((len(hr) - 2) >> 2, -1, -1):
            _sift_down(hr, hs, i)
        self._heap_rank, self._heap_slot = hr, hs

    def _current(
        self, values: vec[i64], slots: vec[i64], start: i64, in_heap: i64
    ) -> tuple[vec[i64], vec[i64]]:
        """The current entries among ``values[start:]`` and ``slots[start:]`` (the queue's,
        ``in_heap`` 0, or the heap's, 1), one a slot, in their order. (A slot's repeated
        current entries hold one rank, and no other slot's does: the queue stays in order.)"""
        state, rank = self._state, self._rank
        want: u8 = EVICTABLE | (IN_HEAP if in_heap else 0)  # (and not KEPT yet)
        kept_values, kept_slots = vec[i64](), vec[i64]()
        for i in range(start, len(values)):
            slot = slots[i]
            if state[slot] & (EVICTABLE | IN_HEAP | KEPT) == want and rank[slot] == values[i]:
                state[slot] = state[slot] | KEPT
                kept_values = append(kept_values, values[i])
                kept_slots = append(kept_slots, slot)
        for slot in kept_slots:
            state[slot] = state[slot] & NOT_KEPT
        return kept_values, kept_slots

    def check_invariants(self, now_s: float) -> None:
        """Assert that every block is in exactly one category, the counters agree with a
        recount of the slots, the key map finds every held key, and every evictable slot has a
        current entry in the queue or the heap. Settles nothing: a check changes no result
        (the tier settles copies as the engine's own calls reach their times; ``now_s`` is not
        read)."""
        stored, storing, loading, free = self._counts()
        assert stored + storing + loading + free == self.num_blocks, (
            f"CPU tier: {stored} stored + {storing} storing + {loading} loading + {free} free "
            f"!= {self.num_blocks} blocks"
        )
        assert min(stored, storing, loading, free) >= 0, (stored, storing, loading, free)
        slots = [s for s in range(len(self._key)) if self._cell[s] != FREE]
        assert len(slots) == self._num_held, f"{len(slots)} held slots != {self._num_held}"
        state = self._state
        recount_storing = sum(1 for s in slots if state[s] & STORING)
        in_flight = (
            sum(len(entry[1]) for entry in self._pending)
            + sum(len(copied) for _, copied in self._promoting)
            + len(self._prepared)
            + len(self._promoted)
        )
        assert recount_storing == in_flight, f"{recount_storing} storing != {in_flight} copying"
        assert recount_storing == storing, f"storing {storing} != recount {recount_storing}"
        ref_cnt = self._ref_cnt
        recount_loading = sum(ref_cnt[s] > 0 or bool(state[s] & CASCADING) for s in slots)
        assert recount_loading == loading, f"loading {loading} != recount {recount_loading}"
        assert all(n >= 0 for n in ref_cnt), "negative reference count"
        assert all(ref_cnt[s] == 0 or not state[s] & STORING for s in slots), "loading unstored"
        assert all(ref_cnt[s] == 0 for s in self._free_slots), "a free slot is loading"
        cascading = [s for s in slots if state[s] & CASCADING]
        assert len(cascading) == self._num_cascading, "cascading count"
        assert sum(ref_cnt[s] > 0 for s in cascading) == self._num_cascading_loading
        assert sum(len(c) for _, c in self._cascades) == len(cascading), "cascades in flight"
        assert not any(state[s] & STORING for s in cascading), "a storing block cascading"
        evictable = [s for s in slots if not state[s] & (STORING | CASCADING) and ref_cnt[s] == 0]
        assert not any(f & OFFERED for f in state), "an offer's mark left behind"
        assert [s for s in range(len(self._key)) if state[s] & EVICTABLE] == evictable, (
            "evictable flags disagree with the stored, unloaded slots"
        )
        assert self._num_evictable == len(evictable), "evictable count"
        heap = set(zip(self._heap_rank, self._heap_slot, strict=True))
        head, queue = self._queue_head, self._queue_rank
        queued = set(zip(queue[head:], self._queue_slot[head:], strict=True))
        asleep = [a for a in self._asleep[self._asleep_head :] if not a.finished]
        assert len(asleep) == self._num_asleep, f"{len(asleep)} asleep != {self._num_asleep}"
        assert all(a.rank >= self._awake_below for a in asleep), "an awake request asleep"
        assert all(a.rank << _POSITION_BITS >= self._wake_at for a in asleep), "wake too late"
        assert all(not a.num_pending for a in asleep), "an asleep request with a pending bit"
        awake = [a for a in self._awake[self._awake_head :] if not a.finished]
        assert len(awake) == self._num_awake, f"{len(awake)} awake != {self._num_awake}"
        assert all(a.rank < self._awake_below for a in awake), "an asleep request awake"
        for access in awake:
            bits = [i for i in range(32 * len(access.pending)) if pending_bit(access, i)]
            assert len(bits) == access.num_pending, f"request {access.rank}: pending count"
            assert all(i < access.pending_top for i in bits), f"request {access.rank}: pending top"
        if self._least_known:
            with_bits = [a for a in awake if a.num_pending]
            least = min(with_bits, key=lambda a: a.rank) if with_bits else None
            assert self._least is least, "the least awake request with a pending bit"
            if least is not None:
                top = max(i for i in range(32 * len(least.pending)) if pending_bit(least, i))
                assert self._least_value == rank_value(least.rank, top + 1), "its least bit"
        for slot in evictable:
            value = self._rank[slot]
            r, position = rank_pair(value)
            if position:  # a running request's: its hint names the slot, its bit is set if awake
                access = self._ranked[self._owner[slot]]
                index = -position - 1
                assert access.rank == r, f"slot {slot}: its owner is not request {r}"
                assert not access.finished, f"slot {slot}: ranked by finished request {r}"
                assert not state[slot] & IN_HEAP, f"slot {slot}: running rank, in the heap"
                assert access.slots[index] == slot, f"slot {slot}: its hint is lost"
                if r < self._awake_below:
                    assert pending_bit(access, index), f"slot {slot}: awake, no pending bit"
                continue
            entry = (value, slot)
            assert entry in (heap if state[slot] & IN_HEAP else queued), f"slot {slot}: no entry"
        assert self._heap_live == sum(1 for f in state if f & IN_HEAP), "heap's current entries"
        assert all(f & EVICTABLE for f in state if f & IN_HEAP), "an unevictable slot in the heap"
        assert not any(f & KEPT for f in state), "a rebuild's mark left behind"
        watched = set(self._watched.slots) if self._watched is not None else set()
        assert {s for s in range(len(state)) if state[s] & WATCHED} == watched, "watched slots"
        assert all(self._cell[s] != FREE for s in watched), "a watched slot is free"
        assert all(queue[i] <= queue[i + 1] for i in range(head, len(queue) - 1)), "queue order"
        for slot in slots:  # a private block is held once, outside the map
            key = self._key[slot]
            want = -1 if self._cell[slot] == UNMAPPED else slot
            assert self._find(key) == want, f"slot {slot}: key {key} maps to {self._find(key)}"
        assert len(self._free_slots) + len(slots) == len(self._key), "a slot leaked"
        cells = self._cells
        mapped = sum(cells[i] != EMPTY for i in range(1, len(cells), 2))
        num_mapped = sum(self._cell[s] >= 0 for s in slots)
        assert mapped == num_mapped == self._num_mapped, (
            f"{mapped} mapped cells, {num_mapped} mapped slots, count {self._num_mapped}"
        )


def _sift_down(hr: vec[i64], hs: vec[i64], i: i64) -> None:
    """Move entry ``i`` of the 4-ary heap ``(hr, hs)`` down to its place (least rank at the
    root; a node's children are ``4 i + 1 .. 4 i + 4``, one cache line: a quarter the misses of
    a binary heap's path)."""
    n = len(hr)
    value, slot = hr[i], hs[i]
    while True:
        first = 4 * i + 1
        if first >= n:
            break
        least, least_value = first, hr[first]
        last = min(first + 4, n)
        for c in range(first + 1, last):
            if hr[c] < least_value:
                least, least_value = c, hr[c]
        if value <= least_value:
            break
        hr[i], hs[i] = least_value, hs[least]
        i = least
    hr[i], hs[i] = value, slot
