"""Paged KV allocation (vLLM PagedAttention): equal blocks, a free list, per-request block tables.

The pool is ``capacity_tokens // block_size_tokens`` blocks (the remainder slots are unusable and
reported as overhead). Allocation is lazy: a request gets ``cdiv(num_tokens, block_size_tokens)``
blocks in total, the prompt's at admission and one more whenever its last block fills; all of a
request's blocks return to the free list when it finishes. Token ``t`` (0-based) of a request lives
in logical block ``t // block_size_tokens``, slot ``t % block_size_tokens``; the block table maps
the logical block to a physical one (seed: token 37 at 16 tokens/block -> logical block 2, slot 5).

Free-list order: new blocks are taken from the front, freed blocks are appended at the back in the
order of the request's block table.

Sequence groups are served without sharing: a request of ``w = num_seqs`` sequences holds ``w``
block tables (kept as one list of ``w * c`` entries); ``held_slots`` is per sequence.
"""

from __future__ import annotations

import numpy as np

from kvsim.allocators.base import Allocator, AllocatorStats, AllocResult, IntArray
from kvsim.request import Request
from kvsim.units import cdiv


class PagedAllocator(Allocator):
    """vLLM-style block allocator.

    Args:
        capacity_tokens: pool size in token slots.
        bytes_per_token: KV bytes per slot.
        block_size_tokens: tokens per block (>= 1).
        watermark: share of all blocks that admission keeps free (vLLM's block manager default is
            0.01) so that running requests can grow without immediate preemption. Growth of a
            running request may use them.
    """

    name = "paged"

    def __init__(
        self,
        *,
        capacity_tokens: int,
        bytes_per_token: int = 1,
        block_size_tokens: int = 16,
        watermark: float = 0.0,
    ) -> None:
        super().__init__(capacity_tokens=capacity_tokens, bytes_per_token=bytes_per_token)
        if block_size_tokens < 1:
            raise ValueError(f"block_size_tokens: must be >= 1, got {block_size_tokens}")
        if not 0 <= watermark < 1:
            raise ValueError(f"watermark: must be in [0, 1), got {watermark}")
        self.block_size_tokens = block_size_tokens
        self.num_blocks = capacity_tokens // block_size_tokens
        if self.num_blocks < 1:
            raise ValueError(
                f"capacity_tokens ({capacity_tokens}) holds no block of {block_size_tokens} tokens"
            )
        self.watermark_blocks = int(watermark * self.num_blocks)
        # the free queue: ids from _free_head on; taken at the front, freed appended at the back
        self._free_list: list[int] = list(range(self.num_blocks))
        self._free_head = 0
        self.ref_cnt = [0] * self.num_blocks
        self.block_tables: dict[int, list[int]] = {}
        self._widths: dict[int, int] = {}  # sequences of group requests (absent: 1)
        self._num_table_entries = 0  # sum of block-table lengths, kept for O(1) stats()

    @property
    def num_free_blocks(self) -> int:
        return len(self._free_list) - self._free_head

    @property
    def num_free_tokens(self) -> int:
        return (len(self._free_list) - self._free_head) * self.block_size_tokens

    def free_block_ids(self) -> list[int]:
        """Free block ids, front (next to be taken) first."""
        return self._free_list[self._free_head :]

    @property
    def overhead_slots(self) -> int:
        return self.capacity_tokens - self.num_blocks * self.block_size_tokens

    def held_slots(self, req_id: int) -> int:
        per_seq = len(self.block_tables.get(req_id, ())) // self._widths.get(req_id, 1)
        return per_seq * self.block_size_tokens

    def slot_of(self, req_id: int, token_index: int) -> tuple[int, int]:
        """Physical ``(block_id, offset)`` of a request's token ``token_index`` (0-based)."""
        logical, offset = divmod(token_index, self.block_size_tokens)
        return self.block_tables[req_id][logical], offset

    def num_blocks_needed(self, req_id: int, num_tokens: int) -> int:
        """New blocks needed so ``req_id`` holds ``num_tokens`` tokens in total."""
        w = self._widths.get(req_id, 1)
        have = len(self.block_tables.get(req_id, ())) // w
        return w * max(0, cdiv(num_tokens, self.block_size_tokens) - have)

    def _need(self, request: Request, num_tokens: int) -> int:
        if request.req_id in self.block_tables or request.num_seqs == 1:
            return self.num_blocks_needed(request.req_id, num_tokens)
        return request.num_seqs * cdiv(num_tokens, self.block_size_tokens)

    def num_slots_needed(self, request: Request, num_tokens: int) -> int:
        return self._need(request, num_tokens) * self.block_size_tokens

    def can_allocate(self, request: Request, num_tokens: int) -> bool:
        need = self._need(request, num_tokens)
        reserve = 0 if request.req_id in self.block_tables else self.watermark_blocks
        return need + reserve <= self.num_free_blocks

    def usable_free_slots(self, request: Request | None, num_tokens: int) -> int:
        if request is None or self.can_allocate(request, num_tokens):
            return self.num_free_tokens
        return 0

    def usable_free_slots_at(
        self, request: Request, num_tokens: int, free_slots: IntArray
    ) -> IntArray:
        need = self.admission_slots_needed(request, num_tokens)
        return np.where(free_slots >= need, free_slots, 0)

    def admission_slots_needed(self, request: Request, num_tokens: int) -> int:
        reserve = 0 if request.req_id in self.block_tables else self.watermark_blocks
        return (self._need(request, num_tokens) + reserve) * self.block_size_tokens

    def allocate(self, request: Request, num_tokens: int) -> AllocResult | None:
        table = self.block_tables.get(request.req_id)
        if table is not None:
            w = request.num_seqs
            have = len(table) // w  # blocks per sequence
            need = w * (-(num_tokens // -self.block_size_tokens) - have)
            if need <= 0:
                return self._nothing_new  # the last block still has room
        else:
            need = self._need(request, num_tokens)
        if need > len(self._free_list) - self._free_head:
            return None
        if table is None:
            table = self.block_tables[request.req_id] = []
            if request.num_seqs > 1:
                self._widths[request.req_id] = request.num_seqs
        new = self._take_free(need)
        ref_cnt = self.ref_cnt
        for block_id in new:
            ref_cnt[block_id] += 1
        table.extend(new)
        self._num_table_entries += need
        return self._result(need * self.block_size_tokens, need)

    def free(self, req_id: int) -> None:
        table = self.block_tables.pop(req_id, None)
        if table is None:
            raise KeyError(f"free(): unknown req_id {req_id}")
        self._widths.pop(req_id, None)
        self._num_table_entries -= len(table)
        ref_cnt = self.ref_cnt
        for block_id in table:
            ref_cnt[block_id] -= 1
        self._free_list.extend([b for b in table if ref_cnt[b] == 0])

    def _take_free(self, need: int) -> list[int]:
        """Pop ``need`` block ids from the front of the free queue."""
        head = self._free_head
        taken = self._free_list[head : head + need]
        head += need
        if head > 4096 and 2 * head > len(self._free_list):  # drop the consumed prefix
            del self._free_list[:head]
            head = 0
        self._free_head = head
        return taken

    def held_slots_at(self, lengths: IntArray, held_slots: IntArray) -> IntArray:
        b = self.block_size_tokens
        return -(lengths // -b) * b

    def max_growth_steps(self, lengths: IntArray, held_slots: IntArray, k_max: int) -> int:
        if len(lengths) == 0 or k_max <= 0:
            return max(k_max, 0)
        b = self.block_size_tokens
        free = self.num_free_blocks

        def fits(k: int) -> bool:
            new_slots = np.maximum(-((lengths + k) // -b) * b - held_slots, 0).sum()
            return int(new_slots) <= free * b

        if fits(k_max):
            return k_max
        lo, hi = 0, k_max  # fits(lo) is True (lengths are already allocated), fits(hi) False
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo

    def stats(self) -> AllocatorStats:
        held = self._num_table_entries * self.block_size_tokens
        overhead = self.capacity_tokens - self.num_blocks * self.block_size_tokens
        return AllocatorStats(
            self.capacity_tokens, held, overhead, self.num_free_tokens, len(self.block_tables)
        )

    def check_invariants(self) -> None:
        super().check_invariants()
        counts = [0] * self.num_blocks
        for table in self.block_tables.values():
            for block_id in table:
                counts[block_id] += 1
        assert counts == self.ref_cnt, "paged: ref_cnt does not match block tables"
        entries = sum(len(t) for t in self.block_tables.values())
        assert entries == self._num_table_entries, (
            f"paged: {entries} block-table entries, counter says {self._num_table_entries}"
        )
        free_ids = self.free_block_ids()
        free = set(free_ids)
        assert len(free) == len(free_ids), "paged: a block is on the free list twice"
        for block_id in range(self.num_blocks):
            in_use = self.ref_cnt[block_id] > 0
            assert in_use != (block_id in free), (
                f"paged: block {block_id} ref_cnt {self.ref_cnt[block_id]} but "
                f"{'on' if block_id in free else 'off'} the free list"
            )
