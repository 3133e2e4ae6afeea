"""Contiguous slab allocators: one slab of token slots per request, placed first-fit or best-fit.

The pool is an address space ``[0, capacity_tokens)``. A request's slab is sized once, at its first
allocation, by a reservation rule (``reservation.py``) and never grows: a slab cannot grow in place.
Free memory is a sorted list of coalesced extents; external fragmentation and head-of-line blocking
emerge from where slabs land and the order they are freed in.
"""

from __future__ import annotations

import bisect

from kvsim.core.kv.base import AllocatorStats
from kvsim.core.kv.slab import SlabAllocator
from kvsim.workload.request import Request


class _ExtentAllocator(SlabAllocator):
    """Free extents kept sorted by start address and always coalesced."""

    def _init_free_space(self) -> None:
        self._starts: list[int] = [0]
        self._lengths: dict[int, int] = {0: self.capacity_tokens}
        self._free_tokens = self.capacity_tokens

    @property
    def num_free_tokens(self) -> int:
        return self._free_tokens

    def free_extents(self) -> list[tuple[int, int]]:
        """Free ``(start, length)`` extents in address order, in slots."""
        return [(s, self._lengths[s]) for s in self._starts]

    def _choose_extent(self, size: int) -> int | None:
        raise NotImplementedError

    def _place(self, size: int) -> tuple[int, int] | None:
        start = self._choose_extent(size)
        if start is None:
            return None
        length = self._lengths.pop(start)
        i = bisect.bisect_left(self._starts, start)
        del self._starts[i]
        if length > size:
            self._starts.insert(i, start + size)
            self._lengths[start + size] = length - size
        self._free_tokens -= size
        return start, size

    def _release(self, start: int, size: int) -> None:
        i = bisect.bisect_left(self._starts, start)
        end = start + size
        # merge with the right neighbour, then the left one
        if i < len(self._starts) and self._starts[i] == end:
            size += self._lengths.pop(end)
            del self._starts[i]
        if i > 0:
            left = self._starts[i - 1]
            if left + self._lengths[left] == start:
                self._lengths[left] += size
                self._free_tokens += end - start
                return
        self._starts.insert(i, start)
        self._lengths[start] = size
        self._free_tokens += end - start

    def _fits_anywhere(self, size: int) -> bool:
        return self._choose_extent(size) is not None

    def usable_free_slots(self, request: Request | None, num_tokens: int) -> int:
        if request is None:
            return self._free_tokens
        if request.num_seqs > 1 and not self.can_allocate(request, num_tokens):
            return 0  # a group needs all its slabs at once
        size = self.slab_size(request, num_tokens)
        return sum(n for n in self._lengths.values() if n >= size)

    def stats(self) -> AllocatorStats:
        held = sum(size for _, size in self.held_slabs())
        return AllocatorStats(self.capacity_tokens, held, 0, self._free_tokens, len(self._slabs))

    def check_invariants(self) -> None:
        super().check_invariants()
        prev_end = -1
        total = 0
        for s in self._starts:
            n = self._lengths[s]
            assert n > 0, f"{self.name}: empty extent at {s}"
            assert s > prev_end, (
                f"{self.name}: extent at {s} overlaps or touches one ending at {prev_end}"
            )
            prev_end = s + n
            total += n
        assert prev_end <= self.capacity_tokens, (
            f"{self.name}: extent ends at {prev_end} > capacity"
        )
        assert total == self._free_tokens, (
            f"{self.name}: extents sum {total} != free {self._free_tokens}"
        )
        assert len(self._lengths) == len(self._starts), f"{self.name}: extent index out of sync"


class FirstFitAllocator(_ExtentAllocator):
    """Contiguous slabs placed in the lowest-addressed free extent that fits."""

    name = "first_fit"

    def _choose_extent(self, size: int) -> int | None:
        for s in self._starts:
            if self._lengths[s] >= size:
                return s
        return None


class BestFitAllocator(_ExtentAllocator):
    """Contiguous slabs placed in the smallest free extent that fits (lowest address on ties)."""

    name = "best_fit"

    def _choose_extent(self, size: int) -> int | None:
        best: int | None = None
        best_len = 0
        for s in self._starts:
            n = self._lengths[s]
            if n >= size and (best is None or n < best_len):
                best, best_len = s, n
        return best
