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
"""

from __future__ import annotations

from collections import OrderedDict, deque

from librt.vecs import vec
from mypy_extensions import i64


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
        # key -> when its write ends (s), least recent first (an OrderedDict: a plain dict's
        # first item is found by skipping the holes its removals leave, O(holes) a time)
        self._ready: OrderedDict[int, float] = OrderedDict()
        self._writes: deque[tuple[float, int]] = deque()  # (ready_s, key) of new blocks
        self._writing: dict[int, float] = {}  # held keys whose write is not settled: ready_s
        self.num_written_blocks = 0  # cumulative: blocks written (rewrites included)
        self.num_evicted_blocks = 0  # cumulative
        self.num_read_blocks = 0  # cumulative: blocks promoted into the CPU tier

    def __contains__(self, key: int) -> bool:
        """Whether the tier holds ``key`` (readable or still writing)."""
        return key in self._ready

    def __len__(self) -> int:
        return len(self._ready)

    def readable(self, key: i64, now_s: float) -> bool:
        """Whether ``key``'s write had ended by ``now_s`` (a lookup's hit)."""
        ready = self._ready.get(key)
        return ready is not None and ready <= now_s

    def write(self, keys: vec[i64], ready_s: float) -> None:
        """Write ``keys`` (blocks newly stored in the CPU tier), the write ending at
        ``ready_s``: a key held already becomes the most recent and stays readable; a new one
        is held, writing until ``ready_s``, after evicting the least recent blocks it needs
        room for (of one write larger than the tier, its last ``num_blocks`` keys stay).
        Writes end in the order they are made (one link, first come first served), so
        ``ready_s`` never decreases from one call to the next, and it is later than the
        ``now_s`` of every earlier query (a write ends after it starts)."""
        ready = self._ready
        self.num_written_blocks += len(keys)
        for key in keys:
            if key in ready:
                ready.move_to_end(key)  # (the most recent now)
                continue
            if len(ready) >= self.num_blocks:
                victim = ready.popitem(last=False)[0]
                self._writing.pop(victim, None)  # (its write's entry is stale now)
                self.num_evicted_blocks += 1
            ready[key] = ready_s
            self._writes.append((ready_s, key))
            self._writing[key] = ready_s

    def read(self, keys: vec[i64]) -> None:
        """``keys`` (readable) are promoted into the CPU tier: each is the most recent now."""
        ready = self._ready
        for key in keys:
            ready.move_to_end(key)
        self.num_read_blocks += len(keys)

    def occupancy(self, now_s: float) -> tuple[int, int, int]:
        """``(stored, writing, free)`` blocks at ``now_s``: every block in one."""
        self._settle(now_s)
        held, writing = len(self._ready), len(self._writing)
        return held - writing, writing, self.num_blocks - held

    def _settle(self, now_s: float) -> None:
        """The writes that ended by ``now_s`` leave their blocks readable (a block evicted
        while writing was uncounted then)."""
        writes, writing = self._writes, self._writing
        while writes and writes[0][0] <= now_s:
            ready_s, key = writes.popleft()
            if writing.get(key) == ready_s:
                del writing[key]

    def check_invariants(self, now_s: float) -> None:
        """Assert that every block is in exactly one category and the writing count agrees
        with a recount."""
        stored, writing, free = self.occupancy(now_s)
        assert stored + writing + free == self.num_blocks, (stored, writing, free)
        assert min(stored, writing, free) >= 0, (stored, writing, free)
        recount = sum(1 for ready_s in self._ready.values() if ready_s > now_s)
        assert recount == writing, f"disk tier: writing {writing} != recount {recount}"
