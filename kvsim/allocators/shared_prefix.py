"""Paged KV with sharing: copy-on-write sequence groups and automatic prefix caching (vLLM).

Every request is a ``kvsim.groups.SequenceGroup`` of ``num_seqs`` block tables over one
``BlockPool``. Admission of a request needing ``P'`` prefill tokens:

1. prefix cache lookup: the chained keys (``kvsim.tokens``) of its full blocks are looked up in
   order; hits are whole blocks only, and at most ``(P' - 1) // B`` of them, so the last prompt
   token is always recomputed. ``prefix_cache_queries`` grows by ``P'`` tokens and
   ``prefix_cache_hits`` by ``B`` per hit block (vLLM's counters, in tokens);
2. the rest of the prompt takes fresh blocks from the front of the free queue;
3. the root is forked ``num_seqs - 1`` times and grown to the tokens asked for (copy-on-write of a
   shared partial last block on first write; beam branching per ``BeamModel``).

Everything is counted first; an allocation that does not fit returns ``None`` and changes nothing.
Full blocks are cached under their keys once computed (plain requests: every full block, so a
later turn of a conversation hits its history; groups: the shared prompt blocks). ``free``
releases a request's blocks tail first into the back of the LRU free queue, contents kept.

For a group, ``held_slots`` is the per-sequence holding (the scheduler's growth bound); beam
groups report their current length, so the scheduler allocates (branches) every step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from kvsim.allocators.base import (
    Allocator,
    AllocatorStats,
    AllocResult,
    IntArray,
    SpanSlots,
    prefix_cache_counters,
)
from kvsim.allocators.block_pool import BlockPool
from kvsim.groups import BeamModel, CountingPool, SequenceGroup, peak_new_blocks
from kvsim.request import Request
from kvsim.tokens import KeyChain, stream_segments
from kvsim.units import cdiv


class SharedPrefixAllocator(Allocator):
    """Paged allocator with reference-counted sharing and an LRU prefix cache.

    Args:
        capacity_tokens: pool size in token slots.
        bytes_per_token: KV bytes per slot.
        block_size_tokens: tokens per block (>= 1).
        enable_prefix_caching: look up and register full blocks across requests.
        beam_survival: ``BeamModel.survival`` for beam-search requests.
        seed: seeds the beam model (with each request id).
    """

    name = "shared_prefix"

    def __init__(
        self,
        *,
        capacity_tokens: int,
        bytes_per_token: int = 1,
        block_size_tokens: int = 16,
        enable_prefix_caching: bool = True,
        beam_survival: float = 0.8646,
        seed: int = 0,
    ) -> None:
        super().__init__(capacity_tokens=capacity_tokens, bytes_per_token=bytes_per_token)
        if block_size_tokens < 1:
            raise ValueError(f"block_size_tokens: must be >= 1, got {block_size_tokens}")
        self.block_size_tokens = block_size_tokens
        self.num_blocks = capacity_tokens // block_size_tokens
        if self.num_blocks < 1:
            raise ValueError(
                f"capacity_tokens ({capacity_tokens}) holds no block of {block_size_tokens} tokens"
            )
        self.pool = BlockPool(self.num_blocks)
        self.enable_prefix_caching = enable_prefix_caching
        self.beam = BeamModel(beam_survival, seed)
        self.keys = KeyChain()
        self.groups: dict[int, SequenceGroup] = {}
        self._requests: dict[int, Request] = {}
        self._block_keys: dict[int, list[int]] = {}
        self._registered: dict[int, int] = {}
        self._sum_distinct = 0  # sum over groups of distinct blocks (cross-request dedup)
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.num_cow_copies = 0

    # -- queries ----------------------------------------------------------------------------
    @property
    def num_free_tokens(self) -> int:
        return self.pool.num_free * self.block_size_tokens

    def held_slots(self, req_id: int) -> int:
        group = self.groups.get(req_id)
        if group is None:
            return 0
        if group.parents is not None:
            return group.length
        return len(group.seqs[0]) * self.block_size_tokens

    def block_table(self, req_id: int, seq: int = 0) -> list[int]:
        """Physical block ids of sequence ``seq`` of a request (a copy)."""
        return list(self.groups[req_id].seqs[seq])

    def _keys(self, request: Request) -> list[int]:
        """Chained keys of every full block of the request's stream (sequence 0), cached."""
        keys = self._block_keys.get(request.req_id)
        if keys is None:
            segs = stream_segments(request)
            num_full = request.final_tokens // self.block_size_tokens
            keys = self.keys.block_keys(segs, num_full, self.block_size_tokens, request.cache_salt)
            self._block_keys[request.req_id] = keys
        return keys

    def _hits(self, request: Request) -> list[int]:
        """Cached blocks matching the request's prefix: whole blocks, last prompt token excluded."""
        if not self.enable_prefix_caching:
            return []
        self._flush_registrations()
        cap = (self._fork_point(request) - 1) // self.block_size_tokens
        hits: list[int] = []
        for key in self._keys(request)[:cap]:
            block_id = self.pool.lookup(key)
            if block_id is None:
                break
            hits.append(block_id)
        return hits

    def _new_need(self, request: Request, num_tokens: int, hits: list[int]) -> int:
        """Fresh blocks a new group takes to reach ``num_tokens`` tokens per sequence."""
        b, w = self.block_size_tokens, request.num_seqs
        prefill = self._fork_point(request)
        root = cdiv(prefill, b) - len(hits)
        if request.beam_width > 1 and w > 1:  # dry run of fork + branching on fake blocks
            group = self._make_group(request)
            fake = [-1 - i for i in range(cdiv(prefill, b))]
            pool = CountingPool(dict.fromkeys(fake, 1))
            group.start(fake, prefill, pool)
            group.advance(num_tokens, pool)
            return root + pool.peak
        copies = (w - 1) if (w > 1 and prefill % b and num_tokens > prefill) else 0
        return root + copies + w * max(0, cdiv(num_tokens, b) - cdiv(prefill, b))

    def _need(self, request: Request, num_tokens: int) -> tuple[int, list[int]]:
        """``(fresh blocks needed, hit blocks)`` for ``allocate(request, num_tokens)``."""
        group = self.groups.get(request.req_id)
        if group is None:
            hits = self._hits(request)
            return self._new_need(request, num_tokens, hits), hits
        if group.parents is not None:
            if num_tokens <= group.length:
                return 0, []
            refs = {blk: self.pool.ref(blk) for blk in group.local}
            return peak_new_blocks(group, num_tokens, refs), []
        have = len(group.seqs[0])
        return group.width * max(0, cdiv(num_tokens, self.block_size_tokens) - have), []

    def _available(self, hits: list[int]) -> int:
        """Free blocks left for fresh ones once the hit blocks leave the free queue."""
        return self.pool.num_free - sum(1 for blk in hits if self.pool.ref(blk) == 0)

    def num_slots_needed(self, request: Request, num_tokens: int) -> int:
        return self._need(request, num_tokens)[0] * self.block_size_tokens

    def can_allocate(self, request: Request, num_tokens: int) -> bool:
        need, hits = self._need(request, num_tokens)
        return need <= self._available(hits)

    def usable_free_slots(self, request: Request | None, num_tokens: int) -> int:
        if request is None or self.can_allocate(request, num_tokens):
            return self.num_free_tokens
        return 0

    def admission_slots_needed(self, request: Request, num_tokens: int) -> int:
        """Fresh slots the head's admission needs, cache hits ignored (the recorder's external
        fragmentation must not depend on which cached blocks a fast-forwarded span evicted)."""
        need = (
            self._new_need(request, num_tokens, [])
            if request.req_id not in self.groups
            else self._need(request, num_tokens)[0]
        )
        return need * self.block_size_tokens

    def usable_free_slots_at(
        self, request: Request, num_tokens: int, free_slots: IntArray
    ) -> IntArray:
        need = self.admission_slots_needed(request, num_tokens)
        return np.where(free_slots >= need, free_slots, 0)

    # -- mutations --------------------------------------------------------------------------
    def _make_group(self, request: Request) -> SequenceGroup:
        group = SequenceGroup(self.block_size_tokens, request.num_seqs)
        if request.beam_width > 1 and request.num_seqs > 1:
            group.parents = self.beam.parents(
                request.req_id, request.num_seqs, max(1, request.output_tokens)
            )
        return group

    def allocate(self, request: Request, num_tokens: int) -> AllocResult | None:
        group = self.groups.get(request.req_id)
        if (
            group is not None
            and group.parents is None
            and len(group.seqs[0]) * self.block_size_tokens >= num_tokens
        ):
            group.length = max(group.length, num_tokens)
            return self._nothing_new  # hot path: the last blocks still have room
        need, hits = self._need(request, num_tokens)
        if need > self._available(hits):
            return None
        free_before = self.pool.num_free
        if group is None:
            group = self._admit(request, hits)
        self._sum_distinct -= group.num_distinct_blocks
        copies = group.num_copies
        group.advance(num_tokens, self.pool)
        self.num_cow_copies += group.num_copies - copies
        self._sum_distinct += group.num_distinct_blocks
        taken = max(0, free_before - self.pool.num_free)
        reused = len(hits) * self.block_size_tokens
        return self._result(taken * self.block_size_tokens, taken, reused)

    @staticmethod
    def _fork_point(request: Request) -> int:
        """Tokens the root holds before the fork: the prompt for a group (after a recompute
        preemption each sequence re-prefills its own generated tokens, privately), else all
        prefill tokens."""
        return request.prompt_tokens if request.num_seqs > 1 else request.num_prefill_tokens

    def _admit(self, request: Request, hits: list[int]) -> SequenceGroup:
        prefill = self._fork_point(request)
        for block_id in hits:
            self.pool.incref(block_id)
        root = hits + [
            self.pool.take() for _ in range(cdiv(prefill, self.block_size_tokens) - len(hits))
        ]
        group = self._make_group(request)
        group.start(root, prefill, self.pool)
        self._sum_distinct += group.num_distinct_blocks
        self.groups[request.req_id] = group
        self._requests[request.req_id] = request
        self._registered[request.req_id] = len(hits)
        if self.enable_prefix_caching:
            self.prefix_cache_queries += request.num_prefill_tokens
            self.prefix_cache_hits += len(hits) * self.block_size_tokens
        return group

    def _flush_registrations(self) -> None:
        """Cache every live request's blocks computed so far (``Request.num_computed_tokens``).

        Done lazily before each lookup, so a block is a hit from the step after it is computed,
        however the engine batched its allocations (fast-forwarded or step by step).
        """
        for req_id, request in self._requests.items():
            group = self.groups[req_id]
            self._register(request, group, min(request.num_computed_tokens, group.length))

    def _register(self, request: Request, group: SequenceGroup, computed_tokens: int) -> None:
        """Cache the full, computed blocks of sequence 0 (groups: the shared prompt blocks)."""
        if not self.enable_prefix_caching:
            return
        upto = computed_tokens // self.block_size_tokens
        if group.width > 1:
            upto = min(upto, group.prefill_tokens // self.block_size_tokens)
        start = self._registered[request.req_id]
        if upto <= start:
            return
        keys, table = self._keys(request), group.seqs[0]
        for i in range(start, min(upto, len(keys), len(table))):
            self.pool.register(table[i], keys[i])
        self._registered[request.req_id] = max(start, min(upto, len(keys), len(table)))

    def free(self, req_id: int) -> None:
        group = self.groups.pop(req_id, None)
        if group is None:
            raise KeyError(f"free(): unknown req_id {req_id}")
        request = self._requests.pop(req_id)
        self._register(request, group, min(request.num_computed_tokens, group.length))
        del self._registered[req_id]
        if request.num_computed_tokens >= request.final_tokens:
            self._block_keys.pop(req_id, None)
        self._sum_distinct -= group.num_distinct_blocks
        group.release_all(self.pool)

    # -- vectorised hooks -------------------------------------------------------------------
    def held_slots_at(self, lengths: IntArray, held_slots: IntArray) -> IntArray:
        b = self.block_size_tokens
        return -(lengths // -b) * b

    def max_growth_steps(self, lengths: IntArray, held_slots: IntArray, k_max: int) -> int:
        return self.max_growth_steps_for([], lengths, held_slots, k_max)

    def max_growth_steps_for(
        self, requests: Sequence[Request], lengths: IntArray, held_now: IntArray, k_max: int
    ) -> int:
        if len(lengths) == 0 or k_max <= 1:
            return max(k_max, 0)
        if any(self.groups[r.req_id].parents is not None for r in requests):
            return 1  # beam groups branch (and may copy) every step
        b = self.block_size_tokens
        widths = np.array([r.num_seqs for r in requests], np.int64) if requests else 1
        free = self.pool.num_free * b

        def fits(k: int) -> bool:
            grown = -((lengths + k) // -b) * b
            return int((widths * np.maximum(grown - held_now, 0)).sum()) <= free

        lo, hi = 0, k_max + 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo

    def span_slots(
        self, requests: Sequence[Request], lengths: IntArray, final: IntArray, held_now: IntArray
    ) -> SpanSlots:
        """Group-aware totals: a group holds ``s + w (c - s)`` blocks at ``c`` blocks per
        sequence (``s`` shared prompt blocks); beam groups (one-step spans) their real count;
        blocks shared across requests (prefix hits) are subtracted once."""
        b = self.block_size_tokens
        groups = [self.groups[r.req_id] for r in requests]
        widths = np.array([g.width for g in groups], np.int64)[:, None]
        shared = np.array([g.num_shared_blocks for g in groups], np.int64)[:, None]
        c = -(lengths // -b)
        phys = shared + widths * (c - shared)
        for i, g in enumerate(groups):
            if g.parents is not None:
                phys[i, :] = g.num_distinct_blocks
        cross = self._sum_distinct - (self.num_blocks - self.pool.num_free)
        held = phys.sum(axis=0) * b - cross * b
        token = held - (widths * (c * b - lengths)).sum(axis=0)
        internal = (widths * np.maximum(c * b - final[:, None], 0)).sum(axis=0)
        unshared = (widths * c).sum(axis=0) * b
        return SpanSlots(held, token, internal, unshared)

    # -- accounting -------------------------------------------------------------------------
    def stats(self) -> AllocatorStats:
        b = self.block_size_tokens
        held = (self.num_blocks - self.pool.num_free) * b
        overhead = self.capacity_tokens - self.num_blocks * b
        return AllocatorStats(
            self.capacity_tokens, held, overhead, self.num_free_tokens, len(self.groups)
        )

    def prefix_cache_summary(self) -> dict[str, Any]:
        """vLLM-style counters for the run summary (tokens, bytes)."""
        counters = prefix_cache_counters(
            self.prefix_cache_queries, self.prefix_cache_hits, self.bytes_per_token
        )
        return {
            **counters,
            "num_cow_copies": self.num_cow_copies,
            "cow_copy_bytes": self.num_cow_copies * self.block_size_tokens * self.bytes_per_token,
            "num_cache_evictions": self.pool.num_evictions,
        }

    def check_invariants(self) -> None:
        super().check_invariants()
        self.pool.check()
        counts = [0] * self.num_blocks
        distinct = 0
        for req_id, group in self.groups.items():
            local: dict[int, int] = {}
            for table in group.seqs:
                for blk in table:
                    counts[blk] += 1
                    local[blk] = local.get(blk, 0) + 1
            assert local == group.local, f"shared_prefix: group {req_id} local ref counts drifted"
            assert len(group.seqs) == group.width, f"group {req_id}: {len(group.seqs)} sequences"
            distinct += len(local)
        assert counts == self.pool.ref_cnt, "shared_prefix: ref_cnt does not match block tables"
        assert distinct == self._sum_distinct, (
            f"shared_prefix: distinct blocks {distinct} != counter {self._sum_distinct}"
        )
