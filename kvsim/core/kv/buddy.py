"""Buddy allocator of contiguous slabs: power-of-two chunks split and merged with their buddies.

The PagedAttention paper's Orca baselines use a buddy allocator (Kwon et al., SOSP 2023, §6.1).
The pool ``[0, capacity_tokens)`` is first carved, from address 0, into the largest aligned
power-of-two chunks up to ``max_chunk_tokens`` (``next_power_of_2(max_model_len)``); e.g. 15,728
slots with 2,048-slot chunks give 7 x 2048 + 1024 + 256 + 64 + 32 + 16. A slab of ``s`` slots
takes a chunk of ``next_power_of_2(s)``; the rounding (chunk - s) is owned by nobody's
reservation and counts as external fragmentation (DESIGN.md).

    order o chunk at address a  --split-->  (a, o-1) + (a + 2**(o-1), o-1)   lowest address first
    free (a, o): merge with buddy a ^ 2**o while it is free at order o and inside a's top chunk
"""

from __future__ import annotations

import bisect

from kvsim.base.units import next_power_of_2
from kvsim.core.kv.base import AllocatorStats
from kvsim.core.kv.slab import SlabAllocator
from kvsim.workload.request import Request


class BuddyAllocator(SlabAllocator):
    """Contiguous slabs in power-of-two buddy chunks; the lowest-addressed fitting chunk wins."""

    name = "buddy"

    def _init_free_space(self) -> None:
        self.max_order = next_power_of_2(self.max_model_len).bit_length() - 1
        self._free: list[set[int]] = [set() for _ in range(self.max_order + 1)]
        self._top_starts: list[int] = []
        self._top_orders: list[int] = []
        addr = 0
        for order in range(self.max_order, -1, -1):
            while addr + (1 << order) <= self.capacity_tokens:
                self._top_starts.append(addr)
                self._top_orders.append(order)
                self._free[order].add(addr)
                addr += 1 << order
        self._free_tokens = addr  # == capacity_tokens (every integer is a sum of powers of 2)

    @property
    def num_free_tokens(self) -> int:
        return self._free_tokens

    def free_chunks(self) -> list[tuple[int, int]]:
        """Free ``(start, size)`` chunks in address order, in slots."""
        return sorted((a, 1 << o) for o, addrs in enumerate(self._free) for a in addrs)

    @staticmethod
    def _order(size: int) -> int:
        return next_power_of_2(size).bit_length() - 1

    def _smallest_free_order(self, order: int) -> int | None:
        for o in range(order, self.max_order + 1):
            if self._free[o]:
                return o
        return None

    def _fits_anywhere(self, size: int) -> bool:
        return (
            size <= (1 << self.max_order)
            and self._smallest_free_order(self._order(size)) is not None
        )

    def _place(self, size: int) -> tuple[int, int] | None:
        if size > (1 << self.max_order):
            return None
        want = self._order(size)
        o = self._smallest_free_order(want)
        if o is None:
            return None
        addr = min(self._free[o])
        self._free[o].remove(addr)
        while o > want:  # split, keeping the lower half
            o -= 1
            self._free[o].add(addr + (1 << o))
        self._free_tokens -= 1 << want
        return addr, size

    def _top_order_at(self, addr: int) -> int:
        i = bisect.bisect_right(self._top_starts, addr) - 1
        return self._top_orders[i]

    def _release(self, start: int, size: int) -> None:
        o = self._order(size)
        self._free_tokens += 1 << o
        addr = start
        top = self._top_order_at(addr)
        while o < top:
            buddy = addr ^ (1 << o)
            if buddy not in self._free[o]:
                break
            self._free[o].remove(buddy)
            addr = min(addr, buddy)
            o += 1
        self._free[o].add(addr)

    def usable_free_slots(self, request: Request | None, num_tokens: int) -> int:
        if request is None:
            return self._free_tokens
        if request.num_seqs > 1 and not self.can_allocate(request, num_tokens):
            return 0  # a group needs all its slabs at once
        want = self._order(self.slab_size(request, num_tokens))
        return sum(len(self._free[o]) << o for o in range(want, self.max_order + 1))

    def stats(self) -> AllocatorStats:
        slabs = self.held_slabs()
        held = sum(size for _, size in slabs)
        chunks = sum(next_power_of_2(size) for _, size in slabs)
        return AllocatorStats(
            self.capacity_tokens, held, chunks - held, self._free_tokens, len(self._slabs)
        )

    def check_invariants(self) -> None:
        super().check_invariants()
        spans = [(a, 1 << o) for o, addrs in enumerate(self._free) for a in addrs]
        spans += [(a, next_power_of_2(s)) for a, s in self.held_slabs()]
        spans.sort()
        end = 0
        for a, n in spans:
            assert a == end, f"buddy: chunk at {a} does not start where the previous ended ({end})"
            assert a % n == 0, f"buddy: chunk {a}+{n} misaligned"
            end = a + n
        assert end == self.capacity_tokens, f"buddy: chunks cover {end} != {self.capacity_tokens}"
        for o, addrs in enumerate(self._free):
            for a in addrs:
                if o < self._top_order_at(a):
                    assert (a ^ (1 << o)) not in addrs, (
                        f"buddy: free buddies {a} and {a ^ (1 << o)} unmerged"
                    )
