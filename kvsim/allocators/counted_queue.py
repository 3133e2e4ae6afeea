"""``BlockPool``'s free queue kept as counts, for an engine that never reads block ids.

The aggregate core (``kvsim.aggregate_core``) counts free blocks instead of handing out ids.
Under prefix caching a preempted request's full blocks stay findable in the free queue until
something takes them (``PagedAllocator.free`` with ``computed_tokens``), so which of them a later
admission hits, how many evictions the run counts and how far a guarded head's hits lie
(``PagedAllocator.blocks_before_evicting``) depend on queue positions. Those follow from counts:

- every entry the queue ever held has an absolute position: the pool's blocks ``0 .. N-1`` at
  start, then each release appends (a table released tail first, so a table of ``L`` blocks
  released when the tail is at ``T`` puts its block ``i`` at ``T + L - 1 - i``);
- takes consume entries from the head, skipping *stale* ones (blocks a hit took out of the
  middle), so with ``free`` live entries and ``s`` stale ones from the head on, the head sits at
  ``T - free - s``: it is derived, never stepped, and costs nothing while no block has a key;
- positions are kept only for blocks that have a key (a min-heap), so the keyed entries the head
  has passed are the evictions.

The equivalence with ``BlockPool`` is tested on the hit counts, evictions and guards of whole
runs (``tests/test_aggregate_core.py``).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReleasedTable:
    """A released block table's place in the queue: block ``i < num_keyed`` sits at position
    ``last - i`` (``last`` is block 0's position, ``tail + num_blocks - 1`` at release)."""

    last: int
    num_keyed: int


class CountedFreeQueue:
    """The free queue of a ``BlockPool`` of ``num_blocks`` blocks, as positions (see the module
    docstring). The caller keeps the number of free blocks and passes it in; ``tail`` must grow
    by every block released (``release`` or, for a table with no keyed block, ``tail += n``).
    """

    def __init__(self, num_blocks: int) -> None:
        self.tail = num_blocks  # position the next released entry takes
        self.num_evictions = 0
        self._stale: list[int] = []  # positions of stale entries at or after the head
        self._keyed: list[int] = []  # positions of free entries of keyed blocks (some stale)
        self._touched: set[int] = set()  # keyed positions that went stale (not evictions)

    def release(self, num_blocks: int, num_keyed: int) -> ReleasedTable:
        """Append a table of ``num_blocks`` blocks, tail first; its first ``num_keyed`` blocks
        keep their keys."""
        last = self.tail + num_blocks - 1
        self.tail += num_blocks
        keyed = self._keyed
        for i in range(num_keyed):
            heapq.heappush(keyed, last - i)
        return ReleasedTable(last, num_keyed)

    def head(self, num_free: int) -> int:
        """The head's position with ``num_free`` live entries; passed keyed entries are counted
        as evictions (their keys are gone) and passed stale entries forgotten."""
        stale = self._stale
        head = self.tail - num_free - len(stale)
        while stale and stale[0] < head:  # taken past: the head sits one further per entry
            heapq.heappop(stale)
            head += 1
        keyed, touched = self._keyed, self._touched
        while keyed and keyed[0] < head:
            position = heapq.heappop(keyed)
            if position in touched:
                touched.remove(position)
            else:
                self.num_evictions += 1
        return head

    def num_hits(self, table: ReleasedTable, cap: int, num_free: int) -> int:
        """Leading blocks of ``table`` (at most ``cap``) still free with their keys
        (``PagedAllocator.find_cached_prefix``: the lookup stops at the first evicted block, and
        a table's later blocks are evicted first)."""
        head = self.head(num_free)
        return max(0, min(table.num_keyed, cap, table.last - head + 1))

    def touch(self, table: ReleasedTable, num_hits: int) -> None:
        """Take the first ``num_hits`` blocks of ``table`` out of the queue (a cache hit); the
        caller lowers its free count by ``num_hits``."""
        stale, touched = self._stale, self._touched
        for i in range(num_hits):
            heapq.heappush(stale, table.last - i)
            touched.add(table.last - i)

    def blocks_before_evicting(self, table: ReleasedTable, num_hits: int, num_free: int) -> int:
        """``BlockPool.free_blocks_ahead`` of the hit block nearest the head (the last hit): the
        entries before it, less every stale entry from the head on (a lower bound, as there)."""
        head = self.head(num_free)
        return max(0, table.last - (num_hits - 1) - head - len(self._stale))
