"""A CPU tier of KV blocks with LRU eviction, and the one-way link its transfers cross.

The tier follows vLLM's native offloading (``vllm/v1/kv_offload/``): the CPU backend holds a
fixed number of blocks of the GPU's block size (``cpu.py``, ``CPUBackend``), keyed by the GPU
prefix cache's block hash; the LRU manager (``lru_manager.py``, ``LRUOffloadingManager``)
decides what to store and what to evict. A block is *storing* from ``prepare_store`` until its
GPU->CPU copy completes (vLLM's ``BlockStatus`` not ready yet: lookups skip it, eviction skips
it), then *stored*; a load (``prepare_load``) holds it (reference count > 0, *loading*) until its
CPU->GPU copy completes. Every slot of the tier is in exactly one of: free, storing, stored,
loading (``occupancy``, checked by ``check_invariants``).

LRU order (``LRUOffloadingManager``): an ``OrderedDict``, least recent first. A lookup
``touch``es the request's blocks from its last to its first, so a prefix's first block ends
most recent and a prefix is evicted from its tail, as on the GPU. ``prepare_store`` adds the
blocks the tier lacks at the most recent end, evicting from the least recent end blocks that are
neither storing, loading, nor among the blocks being stored; if that cannot make room it stores
nothing (vLLM returns ``None``).

Copies are timed by ``TransferLink``: one direction of the GPU-CPU link, first come first
served (vLLM's ``CpuGpuOffloadingHandler``, ``vllm/v1/kv_offload/worker/cpu_gpu.py``, runs each
direction's copies on one CUDA stream). No SimPy here: times are plain seconds handed in.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


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


@dataclass(slots=True)
class _Entry:
    """One tier block: when its store completes (seconds) and the loads reading it."""

    ready_s: float
    ref_cnt: int = 0


class CpuTier:
    """LRU tier of ``num_blocks`` blocks keyed by prefix-cache hash (see the module docstring).

    Invariants (``check_invariants``): ``free + storing + stored + loading == num_blocks`` at any
    time; a loading block is stored (ready) and its reference count is positive.

    Args:
        num_blocks: blocks the tier holds (``kvsim.config.offload.cpu_tier_blocks``).
    """

    def __init__(self, *, num_blocks: int) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks: a CPU tier holds one block at least, got {num_blocks}")
        self.num_blocks = num_blocks
        self._blocks: OrderedDict[int, _Entry] = OrderedDict()  # least recently used first
        self._pending: deque[tuple[float, int]] = deque()  # (ready_s, blocks) of stores
        self._num_storing = 0
        self._num_loading = 0  # distinct blocks with ref_cnt > 0
        self.num_stored_blocks = 0  # cumulative: blocks whose store was prepared
        self.num_evicted_blocks = 0  # cumulative

    # -- queries ------------------------------------------------------------------------------
    def __contains__(self, key: int) -> bool:
        return key in self._blocks

    def __len__(self) -> int:
        return len(self._blocks)

    def lru_order(self) -> list[int]:
        """Keys, least recently used first (the eviction order)."""
        return list(self._blocks)

    def lookup(self, keys: Iterable[int], now_s: float) -> int:
        """How many of ``keys``, from the first, are held and stored by ``now_s`` (vLLM
        ``OffloadingManager.lookup``: stops at the first miss or block not ready)."""
        blocks = self._blocks
        found = 0
        for key in keys:
            entry = blocks.get(key)
            if entry is None or entry.ready_s > now_s:
                break
            found += 1
        return found

    def occupancy(self, now_s: float) -> tuple[int, int, int, int]:
        """``(stored, storing, loading, free)`` blocks at ``now_s``: every block in one."""
        self._settle(now_s)
        held = len(self._blocks)
        stored = held - self._num_storing - self._num_loading
        return stored, self._num_storing, self._num_loading, self.num_blocks - held

    # -- mutations ----------------------------------------------------------------------------
    def touch(self, keys: Sequence[int]) -> None:
        """Mark held ``keys`` most recently used, the last first (so ``keys[0]`` ends most
        recent: vLLM ``LRUOffloadingManager.touch`` walks them reversed)."""
        blocks = self._blocks
        move = blocks.move_to_end
        for key in reversed(keys):
            if key in blocks:
                move(key)

    def prepare_store(self, keys: Sequence[int], now_s: float) -> list[int] | None:
        """Make room for the ``keys`` the tier lacks, evicting least recently used blocks that
        are stored, not loading and not among ``keys``; ``None`` (nothing changes) when that
        cannot free enough. Returns the keys to copy; ``complete_store`` adds them."""
        self._settle(now_s)
        blocks = self._blocks
        new = [k for k in dict.fromkeys(keys) if k not in blocks]
        need = len(new) - (self.num_blocks - len(blocks))
        if need <= 0:
            return new
        protected = set(keys)
        victims: list[int] = []
        for key, entry in blocks.items():
            if entry.ref_cnt == 0 and entry.ready_s <= now_s and key not in protected:
                victims.append(key)
                if len(victims) == need:
                    break
        if len(victims) < need:
            return None
        for key in victims:
            del blocks[key]
        self.num_evicted_blocks += need
        return new

    def complete_store(self, keys: Sequence[int], ready_s: float) -> None:
        """Add ``keys`` (from ``prepare_store``) as most recent, stored from ``ready_s`` on
        (storing until then). Stores are submitted in time order, so ``ready_s`` never
        decreases from one call to the next (``TransferLink`` is first come first served)."""
        if not keys:
            return
        blocks = self._blocks
        for key in keys:
            blocks[key] = _Entry(ready_s)
        self._pending.append((ready_s, len(keys)))
        self._num_storing += len(keys)
        self.num_stored_blocks += len(keys)

    def prepare_load(self, keys: Sequence[int]) -> None:
        """Hold ``keys`` (stored blocks) while a load reads them."""
        blocks = self._blocks
        for key in keys:
            entry = blocks[key]
            if entry.ref_cnt == 0:
                self._num_loading += 1
            entry.ref_cnt += 1

    def complete_load(self, keys: Sequence[int]) -> None:
        """Release ``keys`` held by ``prepare_load``."""
        blocks = self._blocks
        for key in keys:
            entry = blocks[key]
            entry.ref_cnt -= 1
            if entry.ref_cnt == 0:
                self._num_loading -= 1

    def _settle(self, now_s: float) -> None:
        """Count the stores that completed by ``now_s`` as stored."""
        pending = self._pending
        while pending and pending[0][0] <= now_s:
            self._num_storing -= pending.popleft()[1]

    def check_invariants(self, now_s: float) -> None:
        """Assert that every block is in exactly one category and the counters agree with a
        recount of the entries."""
        stored, storing, loading, free = self.occupancy(now_s)
        assert stored + storing + loading + free == self.num_blocks, (
            f"CPU tier: {stored} stored + {storing} storing + {loading} loading + {free} free "
            f"!= {self.num_blocks} blocks"
        )
        assert min(stored, storing, loading, free) >= 0, (stored, storing, loading, free)
        entries = self._blocks.values()
        recount_storing = sum(e.ready_s > now_s for e in entries)
        recount_loading = sum(e.ref_cnt > 0 for e in entries)
        assert recount_storing == storing, f"storing {storing} != recount {recount_storing}"
        assert recount_loading == loading, f"loading {loading} != recount {recount_loading}"
        assert all(e.ref_cnt >= 0 for e in entries), "negative reference count"
        assert all(e.ref_cnt == 0 or e.ready_s <= now_s for e in entries), "loading unstored"
