"""``BlockPool``'s free queue kept as counts, for an engine that never reads block ids.

The aggregate core (``kvsim.aggregate_core``) counts free blocks instead of handing out ids.
Under prefix caching a preempted request's full blocks stay findable in the free queue until
something takes them (``PagedAllocator.free`` with ``computed_tokens``), so which of them a later
admission hits, how many evictions the run counts and how far a guarded head's hits lie
(``PagedAllocator.blocks_before_evicting``) depend on queue positions. Those follow from counts:

- every entry the queue ever held has an absolute position: the pool's blocks ``0 .. N-1`` at
  start, then each release appends a table's full blocks (released tail first, so a table whose
  first ``F`` blocks are full, released when the tail is at ``T``, puts its block ``i < F`` at
  ``T + F - 1 - i``);
- a released table's blocks past its full ones (its partial last block) go to the *front*
  (``BlockPool.release_table``): they hold no key and are never hit, so they are a count,
  ``front``, which takes consume first; every take is reported (``take``) in the order the
  general engine takes and releases;
- takes consume entries from the head, skipping *stale* ones (blocks a hit took out of the
  middle), so with ``free`` live entries, ``front`` of them at the front and ``s`` stale ones from
  the head on, the head sits at ``T - (free - front) - s``: it is derived, never stepped, and
  costs nothing while no block has a key;
- a table's keyed blocks and its hit blocks are runs of consecutive positions, so both are kept
  as ranges (one heap entry per table, whatever the block size): the keyed positions the head
  has passed are the evictions, and a stale run the head reaches is skipped whole (each stale
  entry skipped moves the head one further, onto the next one).

The equivalence with ``BlockPool`` is tested operation by operation
(``tests/test_counted_queue.py``) and on whole runs (``tests/test_aggregate_core.py``).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field


@dataclass(slots=True)
class ReleasedTable:
    """A released block table's place in the queue: block ``i`` sits at position ``last - i``;
    its blocks ``0 .. num_keyed - 1`` kept their keys. ``keyed`` is its heap entry: the range
    ``[low, high]`` of those positions not yet hit (``None`` when it kept no key)."""

    last: int
    num_keyed: int
    keyed: list[int] | None = field(default=None, repr=False)


class CountedFreeQueue:
    """The free queue of a ``BlockPool`` of ``num_blocks`` blocks, as positions (see the module
    docstring). The caller keeps the number of free blocks and passes it in; it reports every
    take (``take``) and every release (``release``), in the order they happen.
    """

    def __init__(self, num_blocks: int) -> None:
        self.tail = num_blocks  # position the next released entry takes
        self.front = 0  # free blocks before the head (partial blocks of released tables)
        self.num_evictions = 0
        self._stale: list[tuple[int, int]] = []  # runs (low, high) of stale entries, by low
        self._num_stale = 0  # stale entries at or after the head
        self._keyed: list[list[int]] = []  # ranges [low, high] of keyed free entries, by low

    def take(self, num_blocks: int) -> None:
        """``num_blocks`` blocks were taken: the front ones first."""
        self.front = max(0, self.front - num_blocks)

    def release(self, num_blocks: int, num_full: int, num_keyed: int) -> ReleasedTable:
        """Release a table of ``num_blocks`` blocks, tail first: its first ``num_full`` (full)
        blocks to the back, of which the first ``num_keyed`` keep their keys, the rest to the
        front."""
        last = self.tail + num_full - 1
        self.tail += num_full
        self.front += num_blocks - num_full
        table = ReleasedTable(last, num_keyed)
        if num_keyed:
            table.keyed = [last - num_keyed + 1, last]
            heapq.heappush(self._keyed, table.keyed)
        return table

    def head(self, num_free: int) -> int:
        """The head's position with ``num_free`` live entries; passed keyed entries are counted
        as evictions (their keys are gone) and passed stale entries forgotten."""
        stale = self._stale
        head = self.tail - (num_free - self.front) - self._num_stale
        while stale and stale[0][0] < head:  # reached: the head skips the whole run
            low, high = heapq.heappop(stale)
            self._num_stale -= high - low + 1
            head += high - low + 1
        keyed = self._keyed
        while keyed and keyed[0][0] < head:
            run = keyed[0]
            low, high = run
            if high < low:  # all hit
                heapq.heappop(keyed)
                continue
            self.num_evictions += min(high, head - 1) - low + 1
            if high < head:
                heapq.heappop(keyed)
            else:  # (still the lowest: no other run starts inside this one)
                run[0] = head
        return head

    def num_hits(self, table: ReleasedTable, cap: int, num_free: int) -> int:
        """Leading blocks of ``table`` (at most ``cap``) still free with their keys
        (``PagedAllocator.find_cached_prefix``: the lookup stops at the first evicted block, and
        a table's later blocks are evicted first)."""
        if not table.num_keyed:
            return 0
        head = self.head(num_free)
        return max(0, min(table.num_keyed, cap, table.last - head + 1))

    def touch(self, table: ReleasedTable, num_hits: int) -> None:
        """Take the first ``num_hits`` blocks of ``table`` out of the queue (a cache hit; they
        must be free, at or after the head); the caller lowers its free count by ``num_hits``."""
        if not num_hits:
            return
        low = table.last - num_hits + 1
        heapq.heappush(self._stale, (low, table.last))
        self._num_stale += num_hits
        assert table.keyed is not None, "hits are keyed blocks"
        assert table.keyed[1] == table.last, "a table is hit once"
        table.keyed[1] = low - 1  # the rest stays keyed (an empty range when all were hit)

    def blocks_before_evicting(self, table: ReleasedTable, num_hits: int, num_free: int) -> int:
        """``BlockPool.free_blocks_ahead`` of the hit block nearest the head (the last hit): the
        entries before it, less every stale entry from the head on (a lower bound, as there),
        plus the front."""
        head = self.head(num_free)
        return max(0, table.last - (num_hits - 1) - head - self._num_stale) + self.front
