"""Paged KV (vLLM PagedAttention): equal blocks from one block pool, block tables, sharing.

The pool is ``capacity_tokens // block_size_tokens`` blocks in one ``BlockPool`` (free queue,
reference counts, prefix-cache keys); the remainder slots, and vLLM v1's null block, are overhead.
A request holds ``cdiv(num_tokens, B)`` blocks for the ``num_tokens`` tokens the scheduler asks
for (those computed plus those the step computes): the prompt's at admission, one more whenever
its last block fills. Token ``t`` (0-based) lives in logical block ``t // B``, slot ``t % B``; the
block table maps the logical block to a physical one (e.g. token 37 at 16 tokens per block ->
logical block 2, slot 5). A request's blocks go back tail first (vLLM v1 ``KVCacheManager.free``),
so its last blocks are evicted first: under vLLM v1 (``vllm_v1_pool``) the full blocks,
which hold cache keys, to the back of the free queue and a partial last block (every block,
without prefix caching) to the front, reused first (vLLM 0.34.0 ``BlockPool.free_blocks``);
under v0 all to the back (vLLM v0.20.0's order).

With ``enable_prefix_caching`` (vLLM's automatic prefix caching):

1. ``find_cached_prefix`` looks up the chained keys (``kvsim.workload.tokens``) of the request's
full blocks
   in order and stops at the first miss: whole blocks only, at most ``(num_tokens - 1) // B`` of
   them, so the last token is always computed (vLLM ``find_longest_cache_hit``);
2. ``allocate`` touches the hit blocks (taking free ones out of the queue, which is why a hit on a
   free block counts against the free blocks) and takes fresh ones for the rest;
3. full blocks are cached inside the allocation call, for every token the step will compute, so a
   request admitted later in the same step already hits them (vLLM ``allocate_slots``);
4. hits are counted once per admission, first admissions and re-admissions after a preemption
   apart (vLLM v0.33.0 ``record_prefix_cache_stats``; PR #25787).

Sequence groups (``n`` samples or ``k`` beams of one request, the ``vllm-v0`` profile) are
``kvsim.core.kv.groups.SequenceGroup`` block tables over the same pool: the prompt's blocks are
shared by every sequence and the partly filled last block is copied on the first write (vLLM v0
``BlockSpaceManager.append_slot``); ``share_sequence_groups=False`` gives each sequence its own
copy instead. ``held_slots`` is per sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from librt.vecs import vec
from mypy_extensions import i64

from kvsim.base.units import cdiv
from kvsim.core.kv.base import (
    DECODE_EXACT,
    DECODE_EXPLICIT,
    DECODE_POOLED,
    NO_HIT,
    Allocator,
    AllocatorStats,
    AllocResult,
    PrefixHit,
    prefix_cache_counters,
)
from kvsim.core.kv.block_pool import BlockPool
from kvsim.core.kv.groups import CountingPool, SequenceGroup, peak_new_blocks
from kvsim.workload.request import Request
from kvsim.workload.tokens import (
    KeyChain,
    PrivateKeys,
    StreamKeys,
    has_private_stream,
    stream_segments,
)


@dataclass(slots=True)
class SwappedKV:
    """A request's KV moved to the CPU: its blocks and, for a group, which entry held which.

    Attributes:
        num_blocks: distinct blocks moved (each shared block once).
        group: the group with its tables as indices into the moved blocks, or ``None``.
    """

    num_blocks: int
    group: SequenceGroup | None = None
    layout: list[list[int]] = field(default_factory=list)


def plain_slots(held: int, length: int, final: int) -> tuple[int, int, int]:
    """``(held, token states, internal)`` slots of a single-sequence request holding ``held``
    slots (its table, ``>= length``) with ``length`` tokens computed, ``final`` its final KV
    length (DESIGN.md: slots past the final length are internal fragmentation, never token
    states, even where a verification writes drafts into them)."""
    return held, min(length, final), max(held - final, 0)


class PagedAllocator(Allocator):
    """vLLM-style block allocator with optional prefix caching and group sharing.

    Args:
        capacity_tokens: pool size in token slots.
        bytes_per_token: KV bytes per slot.
        block_size_tokens: tokens per block (>= 1).
        watermark: share of the blocks vLLM v0's admission keeps free (``can_admit``; v0's
            block manager uses 0.01), so running requests can grow without immediate preemption.
        enable_prefix_caching: cache full blocks across requests (see the module docstring).
        share_sequence_groups: a group's sequences share prompt blocks (copy-on-write).
        reserve_null_block: block 0 is vLLM v1's null block, never handed out.
        vllm_v1_pool: vLLM 0.34.0's ``BlockPool`` rules: a freed block that holds no cached
            full block goes to the front of the free queue, not the back (``free_blocks``, see
            ``BlockPool.release_table``), and a full block whose key another block caches is
            cached too, as a duplicate (``BlockPool(keep_duplicates=True)``); ``None``: as
            ``reserve_null_block`` (the ``vllm-v1`` profile's pool). Off, the ``vllm-v0``
            profile's pool frees every block to the back and caches a key once.
    """

    name = "paged"
    paged = True
    caches_prefixes = True
    span_layout = "blocks"
    usable_is_threshold = True
    reads_block_table = True

    def __init__(
        self,
        *,
        capacity_tokens: int,
        bytes_per_token: int = 1,
        block_size_tokens: int = 16,
        watermark: float = 0.0,
        enable_prefix_caching: bool = False,
        share_sequence_groups: bool = True,
        reserve_null_block: bool = False,
        vllm_v1_pool: bool | None = None,
    ) -> None:
        super().__init__(capacity_tokens=capacity_tokens, bytes_per_token=bytes_per_token)
        if block_size_tokens < 1:
            raise ValueError(f"block_size_tokens: must be >= 1, got {block_size_tokens}")
        if not 0 <= watermark < 1:
            raise ValueError(f"watermark: must be in [0, 1), got {watermark}")
        self.block_size_tokens = block_size_tokens
        self.num_blocks = self._pool_blocks(capacity_tokens, block_size_tokens)
        if self.num_blocks < 1 + reserve_null_block:
            raise ValueError(
                f"capacity_tokens ({capacity_tokens}) holds no usable block of "
                f"{block_size_tokens} tokens"
            )
        v1_pool = reserve_null_block if vllm_v1_pool is None else vllm_v1_pool
        self.vllm_v1_pool = v1_pool
        self.pool = BlockPool(
            self.num_blocks, reserve_null_block=reserve_null_block, keep_duplicates=v1_pool
        )
        self.num_usable_blocks = self.num_blocks - reserve_null_block
        self.watermark_blocks = int(watermark * self.num_blocks)
        self.enable_prefix_caching = enable_prefix_caching
        self.share_sequence_groups = share_sequence_groups
        self.block_tables: dict[int, list[int]] = {}  # single-sequence requests
        self._requests: dict[int, Request] = {}  # the request of each block table
        self._pooled: list[int] = []  # taken for tables, not yet attached (``take_pooled``)
        self.groups: dict[int, SequenceGroup] = {}  # multi-sequence requests
        self.key_chain = KeyChain()
        self._keys: dict[int, StreamKeys | PrivateKeys] = {}
        self._num_cached: dict[int, int] = {}  # leading blocks of a live request now cached
        self._sum_distinct = 0  # sum over live requests of the distinct blocks each points at
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.preempted_queries = 0
        self.preempted_hits = 0
        self.num_cow_copies = 0
        self._known_only = False  # speculate(): cache a request's known tokens only

    def speculate(self, hash_lookahead_tokens: int = 0) -> None:
        self._known_only = True
        self.hash_lookahead_tokens = hash_lookahead_tokens

    def _pool_blocks(self, capacity_tokens: int, block_size_tokens: int) -> int:
        """Blocks the pool is cut into: its whole blocks (a policy whose blocks are not
        ``block_size_tokens`` slots of memory each overrides this)."""
        return capacity_tokens // block_size_tokens

    # -- queries ----------------------------------------------------------------------------
    @property
    def num_gpu_blocks(self) -> int | None:
        return self.num_blocks

    @property
    def num_free_blocks(self) -> int:
        """Blocks with ref count 0 (empty or cached)."""
        return self.pool.num_free

    @property
    def num_free_tokens(self) -> int:
        return self.pool.num_free * self.block_size_tokens

    @property
    def usable_capacity_tokens(self) -> int:
        return self.num_usable_blocks * self.block_size_tokens

    def free_block_ids(self) -> list[int]:
        """Free block ids, front (next to be taken or evicted) first."""
        return self.pool.free_order()

    def held_slots(self, req_id: int) -> int:
        table = self.block_tables.get(req_id)
        if table is not None:
            return len(table) * self.block_size_tokens
        group = self.groups.get(req_id)
        if group is None:
            return 0
        if group.parents is not None or group.cow_pending:
            return group.length  # beams branch, and a shared partial block is copied, on write
        return len(group.seqs[0]) * self.block_size_tokens

    def block_table(self, req_id: int, seq: int = 0) -> list[int]:
        """Physical block ids of sequence ``seq`` of a request (a copy)."""
        table = self.block_tables.get(req_id)
        if table is not None:
            return list(table)
        return list(self.groups[req_id].seqs[seq])

    def slot_of(self, req_id: int, token_index: int) -> tuple[int, int]:
        """Physical ``(block_id, offset)`` of a request's token ``token_index`` (0-based)."""
        logical, offset = divmod(token_index, self.block_size_tokens)
        return self.block_table(req_id)[logical], offset

    def _stream_keys(self, request: Request) -> StreamKeys | PrivateKeys:
        """The request's keys, memoised while it holds blocks."""
        keys = self._keys.get(request.req_id)
        if keys is None:
            keys = self._keys[request.req_id] = self._new_keys(request)
        return keys

    def _new_keys(self, request: Request) -> StreamKeys | PrivateKeys:
        """A request's block keys, computed afresh (``PrivateKeys`` for a private stream)."""
        if has_private_stream(request):
            return PrivateKeys(request.req_id)
        return StreamKeys(
            self.key_chain,
            stream_segments(request),
            self.block_size_tokens,
            request.cache_salt,
            self.hash_lookahead_tokens,
        )

    @staticmethod
    def _fork_point(request: Request) -> int:
        """Tokens a new request's root holds: all known tokens, or a group's prompt."""
        return request.prompt_tokens if request.num_seqs > 1 else request.num_tokens

    def _lookup_blocks(self, request: Request) -> int:
        """Leading blocks of a new request a prefix-cache lookup may hit: those with keys
        before its last known token (a group's before its prompt's end), and, until the
        request is preempted, none past the tokens others may share (``Request.
        shared_tokens``): such a block is cached only by its own request once preempted
        (``_cache_full_blocks``), so its key, computed, would be a miss."""
        b = self.block_size_tokens
        cap = min(self._fork_point(request) - 1, self.keyed_tokens(request)) // b
        if not request.num_preemptions:
            cap = min(cap, request.shared_tokens // b)
        return cap

    def find_cached_prefix(self, request: Request) -> PrefixHit:
        if not self.enable_prefix_caching or request.req_id in self.block_tables:
            return NO_HIT
        if not request.shares_tokens and not request.num_preemptions:
            return NO_HIT  # a private stream is cached only once its request is preempted
        cap = self._lookup_blocks(request)
        if cap <= 0:
            return NO_HIT
        hits = self.pool.cached_run(self._stream_keys(request).keys_between(0, cap))
        if not hits:
            return NO_HIT
        return PrefixHit(len(hits) * self.block_size_tokens, tuple(hits))

    def block_keys(self, request: Request, start: int, stop: int) -> vec[i64]:
        """Prefix-cache keys of the request's full blocks ``start`` to ``stop - 1`` (a KV
        offload tier's keys, ``kvsim.core.scheduler.offload``; a new packed vector, no int
        object per key), from the request's memoised keys while it holds blocks, else computed
        afresh and not kept (a finished request's)."""
        keys = self._keys.get(request.req_id)
        if keys is None:
            keys = self._new_keys(request)
        return keys.keys_between(start, stop)

    def cached_prefix_tokens(self, request: Request) -> int:
        """``find_cached_prefix``'s tokens, without memoising the request's keys: a router asks
        every replica about a request that only one of them will hold."""
        if not self.enable_prefix_caching or not request.shares_tokens:
            return 0
        if request.req_id in self.block_tables:
            return 0
        cap = self._lookup_blocks(request)
        if cap <= 0:
            return 0
        keys = self._keys.get(request.req_id)
        if keys is None:
            keys = self._new_keys(request)
        return len(self.pool.cached_run(keys.keys_between(0, cap))) * self.block_size_tokens

    def _new_group(self, request: Request) -> SequenceGroup:
        group = SequenceGroup(
            self.block_size_tokens, request.num_seqs, shared=self.share_sequence_groups
        )
        if request.beam_width > 1 and request.num_seqs > 1:
            if request.beam_parents is None:
                raise ValueError(f"request {request.req_id}: beam search needs beam_parents")
            group.parents = request.beam_parents
        return group

    def _group_admission_need(self, request: Request, num_tokens: int, num_hits: int) -> int:
        """Fresh blocks admitting a group takes: a dry run of start + advance on fake blocks."""
        prefill = self._fork_point(request)
        root = cdiv(prefill, self.block_size_tokens)
        fake = [-1 - i for i in range(root)]
        pool = CountingPool(dict.fromkeys(fake, 1))
        group = self._new_group(request)
        group.start(fake, prefill, pool)
        group.advance(num_tokens, pool)
        return root - num_hits + pool.peak

    def _need(self, request: Request, num_tokens: int, hit: PrefixHit) -> int:
        """Free blocks ``allocate(request, num_tokens, hit)`` takes (hit blocks that are free
        count, since touching them takes them out of the free queue)."""
        b = self.block_size_tokens
        table = self.block_tables.get(request.req_id)
        if table is not None:
            return max(0, -(num_tokens // -b) - len(table))
        group = self.groups.get(request.req_id)
        if group is not None:
            if num_tokens <= group.length:
                return 0
            if group.parents is not None:
                refs = {blk: self.pool.ref(blk) for blk in group.local}
                return peak_new_blocks(group, num_tokens, refs)
            copies = group.width - 1 if group.cow_pending else 0
            return copies + group.width * max(0, cdiv(num_tokens, b) - len(group.seqs[0]))
        if request.num_seqs == 1:
            need = cdiv(num_tokens, b) - len(hit.blocks)
        else:
            need = self._group_admission_need(request, num_tokens, len(hit.blocks))
        if not hit.blocks:
            return need
        ref = self.pool.ref_cnt
        return need + sum(1 for blk in hit.blocks if ref[blk] == 0)

    def num_slots_needed(self, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT) -> int:
        return self._need(request, num_tokens, hit) * self.block_size_tokens

    def can_allocate(self, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT) -> bool:
        group = self.groups.get(request.req_id)
        if group is not None:
            if self._beam_surely_fits(group, num_tokens):
                return True
        elif not hit.blocks and self._new_beam_surely_fits(request, num_tokens):
            return True
        return self._need(request, num_tokens, hit) <= self.pool.num_free

    def _beam_surely_fits(self, group: SequenceGroup, num_tokens: int) -> bool:
        """Whether growing a shared beam group to ``num_tokens`` fits without its dry run (the
        exact peak, ``peak_new_blocks``, copies every table): each token a sequence writes takes
        at most one block (a fresh one or a copy) and a branch only adds references, so the
        peak is at most ``width`` blocks per token."""
        return (
            group.parents is not None
            and group.shared
            and group.width * (num_tokens - group.length) <= self.pool.num_free
        )

    def _new_beam_surely_fits(self, request: Request, num_tokens: int) -> bool:
        """``_beam_surely_fits`` for admitting a beam group without a prefix hit, before its
        dry run (``_group_admission_need``): the prompt's blocks, shared by the fork, plus at
        most ``width`` blocks per token past the prompt."""
        if (
            request.beam_width <= 1
            or request.num_seqs <= 1
            or request.beam_parents is None  # the dry run raises the error
            or not self.share_sequence_groups
        ):
            return False
        prompt = self._fork_point(request)
        bound = cdiv(prompt, self.block_size_tokens) + request.num_seqs * max(
            0, num_tokens - prompt
        )
        return bound <= self.pool.num_free

    def can_admit(self, request: Request, num_tokens: int) -> bool:
        """vLLM v0: the whole prompt's blocks (hits ignored) leave the watermark free."""
        return self._admission_need(request, num_tokens) <= self.pool.num_free

    def _admission_need(self, request: Request, num_tokens: int) -> int:
        if request.num_seqs == 1 or request.req_id in self.groups:
            need = self._need(request, num_tokens, NO_HIT)
        elif self.share_sequence_groups and num_tokens <= self._fork_point(request):
            need = cdiv(num_tokens, self.block_size_tokens)  # v0: shared prompt blocks once
        # a group coming back after a recompute holds its samples' own tokens too
        else:
            need = self._group_admission_need(request, num_tokens, 0)
        known = request.req_id in self.block_tables or request.req_id in self.groups
        return need + (0 if known else self.watermark_blocks)

    def blocks_before_evicting(self, hit: PrefixHit) -> int | None:
        """How many blocks growth may take from the free queue before one of ``hit``'s free
        blocks is evicted (``None``: none of them is free, so growth cannot evict them)."""
        ahead = [self.pool.free_blocks_ahead(b) for b in hit.blocks if self.pool.ref(b) == 0]
        return min(ahead) if ahead else None

    def can_append_v0(self, request: Request) -> bool:
        return request.num_seqs <= self.pool.num_free

    def usable_free_slots(self, request: Request | None, num_tokens: int) -> int:
        if request is None or self.can_allocate(request, num_tokens):
            return self.num_free_tokens
        return 0

    def admission_slots_needed(self, request: Request, num_tokens: int) -> int:
        return self._admission_need(request, num_tokens) * self.block_size_tokens

    # -- mutations --------------------------------------------------------------------------
    def allocate(
        self,
        request: Request,
        num_tokens: int,
        hit: PrefixHit = NO_HIT,
        cache_tokens: int | None = None,
    ) -> AllocResult | None:
        rid = request.req_id
        table = self.block_tables.get(rid)
        if table is not None:
            extra = self.blocks_for(len(table) * self.block_size_tokens, num_tokens)
            result = self._nothing_new
            if extra > 0:
                if extra > self.pool.num_free:
                    return None
                table += self.pool.take(extra)
                self._sum_distinct += extra
                result = self._result(extra * self.block_size_tokens, extra)
            if self.enable_prefix_caching:
                cached = num_tokens if cache_tokens is None else cache_tokens
                self._cache_full_blocks(request, table, cached)
            return result
        group = self.groups.get(rid)
        if group is not None:
            return self._grow_group(request, group, num_tokens)
        return self._admit(request, num_tokens, hit, cache_tokens)

    def _admit(
        self, request: Request, num_tokens: int, hit: PrefixHit, cache_tokens: int | None = None
    ) -> AllocResult | None:
        if not self.can_allocate(request, num_tokens, hit):
            return None
        free_before = self.pool.num_free
        hits = list(hit.blocks)
        self.pool.touch(hits)
        b = self.block_size_tokens
        if request.num_seqs == 1:
            table = list(hits)
            table += self.pool.take(cdiv(num_tokens, b) - len(hits))
            self.block_tables[request.req_id] = table
            self._requests[request.req_id] = request
            self._sum_distinct += len(table)
        else:
            prefill = self._fork_point(request)
            root = list(hits)
            root += self.pool.take(cdiv(prefill, b) - len(hits))
            group = self._new_group(request)
            group.start(root, prefill, self.pool)
            group.advance(num_tokens, self.pool)
            self.num_cow_copies += group.num_copies
            self.groups[request.req_id] = group
            self._widths[request.req_id] = group.width
            self._sum_distinct += group.num_distinct_blocks
            table = root
            num_tokens = min(num_tokens, prefill)  # only the shared prompt blocks are cached
        if self.enable_prefix_caching:
            self._record_lookup(request, hit)
            self._num_cached[request.req_id] = len(hits)
            cached = num_tokens if cache_tokens is None else min(num_tokens, cache_tokens)
            self._cache_full_blocks(request, table, cached)
        taken = free_before - self.pool.num_free
        return self._result(taken * b, taken, hit.num_tokens)

    def _record_lookup(self, request: Request, hit: PrefixHit) -> None:
        looked_up = self._fork_point(request)
        if request.readmitted:
            self.preempted_queries += looked_up
            self.preempted_hits += hit.num_tokens
        else:
            self.prefix_cache_queries += looked_up
            self.prefix_cache_hits += hit.num_tokens

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        table = self.block_tables.get(request.req_id)
        if table is None or not self.enable_prefix_caching:
            return
        self._cache_full_blocks(request, table, num_tokens)

    def _cache_full_blocks(self, request: Request, table: list[int], num_tokens: int) -> None:
        """Cache the blocks that ``num_tokens`` tokens fill (vLLM ``cache_full_blocks``).

        A block past the tokens other requests may share (``Request.shared_tokens``: a private
        stream's every block, ``kvsim.workload.tokens.has_private_stream``; a Mooncake request's
        output) can be hit only by the request itself after a preemption, so it is cached when
        the request is preempted (``free`` with ``computed_tokens``) rather than as it fills:
        the same hits, less work (its reuse is still an eviction: ``BlockPool.release_table``
        flags a block freed full, as vLLM has hashed it). While the run speculates, only blocks
        with keys are cached (``keyed_tokens``).
        """
        keys = self._stream_keys(request)
        if isinstance(keys, PrivateKeys):
            return
        if self._known_only:
            num_tokens = min(num_tokens, self.keyed_tokens(request))
        # blocks past the tokens others may share: keyed if it is preempted (``free``)
        upto = min(num_tokens, request.shared_tokens) // self.block_size_tokens
        start = self._num_cached.get(request.req_id, 0)
        if upto <= start:
            return
        self.pool.register_many(table, start, keys.keys_between(start, upto))
        self._num_cached[request.req_id] = upto

    def _grow_group(
        self, request: Request, group: SequenceGroup, num_tokens: int
    ) -> AllocResult | None:
        if num_tokens <= group.length:
            return self._nothing_new
        if not self.can_allocate(request, num_tokens):
            return None
        free_before = self.pool.num_free
        self._sum_distinct -= group.num_distinct_blocks
        copies = group.num_copies
        group.advance(num_tokens, self.pool)
        self.num_cow_copies += group.num_copies - copies
        self._sum_distinct += group.num_distinct_blocks
        taken = max(0, free_before - self.pool.num_free)
        return self._result(taken * self.block_size_tokens, taken)

    def free(self, req_id: int, computed_tokens: int | None = None) -> None:
        """Release a request's blocks tail first (see ``vllm_v1_pool``): vLLM has cached
        every block its computed tokens fill (kvsim keys a private stream's only when it is
        preempted, but frees them where vLLM's cached ones go)."""
        table = self.block_tables.pop(req_id, None)
        if table is not None:
            request = self._requests.pop(req_id, None)
            keys = self._keys.get(req_id)
            written = 0  # computed tokens whose full blocks vLLM has keyed
            if self.enable_prefix_caching and request is not None:
                written = (
                    request.num_computed_tokens if computed_tokens is None else computed_tokens
                )
                if self.hash_lookahead_tokens:  # (a key reads tokens past its block)
                    written = min(written, self.keyed_tokens(request))
            if computed_tokens and keys is not None:  # it comes back: its own blocks findable
                start = self._num_cached.get(req_id, 0)
                upto = written // self.block_size_tokens
                self.pool.register_many(table, start, keys.keys_between(start, upto))
            self._sum_distinct -= len(table)
            if not self.vllm_v1_pool:
                self.pool.release(reversed(table))
            else:
                self.pool.release_table(vec[i64](table), written // self.block_size_tokens)
        else:
            group = self.groups.pop(req_id, None)
            if group is None:
                raise KeyError(f"free(): unknown req_id {req_id}")
            self._widths.pop(req_id, None)
            self._sum_distinct -= group.num_distinct_blocks
            group.release_all(self.pool)
        self._num_cached.pop(req_id, None)
        self._keys.pop(req_id, None)

    # -- swap (vLLM v0) ---------------------------------------------------------------------
    def num_distinct_blocks(self, req_id: int) -> int:
        """Physical blocks the request points at (a block shared by its sequences once)."""
        table = self.block_tables.get(req_id)
        return len(table) if table is not None else self.groups[req_id].num_distinct_blocks

    def swap_out(self, req_id: int) -> SwappedKV:
        """Free a request's GPU blocks, returning what ``swap_in`` needs to rebuild them."""
        table = self.block_tables.get(req_id)
        if table is not None:
            swapped = SwappedKV(len(table))
        else:
            group = self.groups[req_id]
            index: dict[int, int] = {}
            layout = [[index.setdefault(blk, len(index)) for blk in seq] for seq in group.seqs]
            swapped = SwappedKV(len(index), group, layout)
        self.free(req_id)
        return swapped

    def can_swap_in(self, request: Request, swapped: SwappedKV) -> bool:
        """vLLM v0 ``can_swap_in``: the blocks plus one per sequence leave the watermark free."""
        need = swapped.num_blocks + request.num_seqs + self.watermark_blocks
        return need <= self.pool.num_free

    def swap_in(self, request: Request, swapped: SwappedKV) -> None:
        """Take fresh blocks for a swapped-out request and rebuild its tables."""
        blocks = self.pool.take(swapped.num_blocks)
        self._sum_distinct += swapped.num_blocks
        group = swapped.group
        if group is None:
            self.block_tables[request.req_id] = list(blocks)
            self._requests[request.req_id] = request
            return
        group.seqs = [[blocks[i] for i in seq] for seq in swapped.layout]
        group.local = {}
        for seq in group.seqs:
            for blk in seq:
                group.local[blk] = group.local.get(blk, 0) + 1
        for blk, count in group.local.items():
            for _ in range(count - 1):
                self.pool.incref(blk)
        self.groups[request.req_id] = group
        self._widths[request.req_id] = group.width

    # -- vectorised hooks -------------------------------------------------------------------
    def decode_mode(self, request: Request, computed: int | None = None) -> int:
        """A plain request is pooled; a parallel group (no beam, its partly filled prompt
        block already copied) is grown by ``allocate``; a beam group (it branches at every
        step) or one whose next write copies a shared block is handled one by one."""
        group = self.groups.get(request.req_id)
        if group is None:
            return DECODE_POOLED
        if group.parents is not None or group.cow_pending:
            return DECODE_EXPLICIT
        return DECODE_EXACT

    def group_shared_slots(self, request: Request) -> int:
        group = self.groups.get(request.req_id)
        if group is None:
            return 0
        return (group.width - 1) * group.num_shared_blocks * self.block_size_tokens

    def request_slots(self, request: Request, length: int) -> tuple[int, int, int, int]:
        """A plain request holds its table (``cdiv(length, B)`` blocks, more with lookahead
        slots). A parallel group holds ``s + w (c - s)`` blocks at ``c`` blocks per sequence
        (``s`` full prompt blocks shared), or ``c`` while its partly filled prompt block is
        still shared (before its first decode); a beam group is counted from its tables."""
        # (a single-sequence request is never a group: no lookup for it)
        group = self.groups.get(request.req_id) if request.num_seqs > 1 else None
        b, final = self.block_size_tokens, request.final_kv_tokens
        c = -(length // -b)
        if group is None:
            # (speculative decoding: the table reaches past the scheduled tokens by the
            # lookahead slots, and a verification may write drafts past the final length,
            # which count as internal fragmentation, never as token states)
            table = self.block_tables.get(request.req_id)
            if table is not None and len(table) > c:
                c = len(table)
            held, token, internal = plain_slots(c * b, length, final)
            return held, token, internal, held
        w = group.width
        unshared = w * c * b
        if group.parents is not None:
            distinct, tails, beyond = self._beam_slots(group, final)
            return distinct * b, distinct * b - tails, beyond, unshared
        if group.cow_pending:  # every sequence still points at the one partial block
            return c * b, length, max(c * b - final, 0), unshared
        s = group.num_shared_blocks
        held = (s + w * (c - s)) * b
        return held, held - w * (c * b - length), w * max(c * b - final, 0), unshared

    def take_pooled(self, num_blocks: int) -> None:
        """Take ``num_blocks`` from the front of the free queue for live requests' tables, to be
        attached later (``attach_pooled``): until then they belong to no table in particular.

        For requests none of whose blocks is read by id meanwhile (no memory map, no key
        registered as they fill): which of the blocks taken together goes to which request
        changes no result (they are free-queue positions until then, and uncached).
        """
        if num_blocks:
            self._pooled += self.pool.take(num_blocks)
            self._sum_distinct += num_blocks

    def attach_pooled(self, req_id: int, num_blocks: int) -> None:
        """Append ``num_blocks`` pooled blocks to a single-sequence request's table."""
        if num_blocks:
            pooled = self._pooled
            self.block_tables[req_id] += pooled[len(pooled) - num_blocks :]
            del pooled[len(pooled) - num_blocks :]

    def blocks_for(self, held_slots: int, num_tokens: int) -> int:
        """Blocks a single-sequence request holding ``held_slots`` slots (a whole table) lacks
        for ``num_tokens`` slots (<= 0: none), as ``allocate`` takes them."""
        b = self.block_size_tokens
        return -(num_tokens // -b) - held_slots // b

    def grow_blocks(self, grants: Sequence[tuple[int, int]]) -> None:
        total = 0
        for _, num_blocks in grants:
            total += num_blocks
        blocks = self.pool.take(total)  # one take: the same blocks, in order, as one per grant
        tables, start = self.block_tables, 0
        for req_id, num_blocks in grants:
            tables[req_id] += blocks[start : start + num_blocks]
            start += num_blocks
        self._sum_distinct += total

    def first_unsafe_fill_step(
        self,
        requests: Sequence[Request],
        tokens: Sequence[int],
        num_more_steps: int,
    ) -> int | None:
        if not self.enable_prefix_caching or num_more_steps <= 0:
            return None
        b, lookup = self.block_size_tokens, self.pool.lookup
        first: int | None = None
        filled: dict[int, int] = {}  # key -> step that fills it
        for request, num_tokens in zip(requests, tokens, strict=True):
            keys = self._stream_keys(request)
            if keys.__class__ is PrivateKeys or request.num_seqs != 1:
                continue  # private streams are cached at preemption; groups cache the prompt
            n = int(num_tokens)
            start = max(self._num_cached.get(request.req_id, 0), n // b)
            stop = min(n + num_more_steps, request.shared_tokens) // b  # (later: not cached)
            for i in range(start, stop):
                step = (i + 1) * b - n
                key = keys.key(i)
                if key in filled or lookup(key) is not None:
                    unsafe = max(step, filled.get(key, step))
                    first = unsafe if first is None else min(first, unsafe)
                else:
                    filled[key] = step
        return first

    def shared_slots(self) -> int:
        used = self.num_usable_blocks - self.pool.num_free
        return (self._sum_distinct - used) * self.block_size_tokens

    @property
    def overhead_slots(self) -> int:
        return self.capacity_tokens - self.num_usable_blocks * self.block_size_tokens

    def _beam_slots(self, group: SequenceGroup, final: int) -> tuple[int, int, int]:
        """``(distinct blocks, their unfilled slots, their slots beyond final)`` of a beam group
        now; a block sits at the same logical index in every table that holds it, so only the
        distinct last blocks are partly filled (and, with ``final >= length``, only they reach
        past ``final``)."""
        b = self.block_size_tokens
        length = group.length
        distinct = len(group.local)
        if final < length or not group.seqs:  # not reached by the engine; counted block by block
            index = {blk: i for seq in group.seqs for i, blk in enumerate(seq)}
            filled = sum(min(b, length - i * b) for i in index.values())
            beyond = sum(max(0, (i + 1) * b - max(final, i * b)) for i in index.values())
            return distinct, distinct * b - filled, beyond
        num_last = len({seq[-1] for seq in group.seqs})
        end = len(group.seqs[0]) * b  # slots up to the end of the last logical block
        return distinct, num_last * (end - length), num_last * max(0, end - final)

    # -- accounting -------------------------------------------------------------------------
    def stats(self) -> AllocatorStats:
        b = self.block_size_tokens
        held = (self.num_usable_blocks - self.pool.num_free) * b
        overhead = self.capacity_tokens - self.num_usable_blocks * b
        num_requests = len(self.block_tables) + len(self.groups)
        return AllocatorStats(
            self.capacity_tokens, held, overhead, self.num_free_tokens, num_requests
        )

    def prefix_cache_summary(self) -> dict[str, Any]:
        """vLLM-style prefix-cache counters (tokens) and group-sharing counters (blocks, bytes)."""
        out: dict[str, Any] = {}
        if self.enable_prefix_caching:
            out.update(
                prefix_cache_counters(
                    self.prefix_cache_queries,
                    self.prefix_cache_hits,
                    self.bytes_per_token,
                    self.preempted_queries,
                    self.preempted_hits,
                )
            )
            out["num_cache_evictions"] = self.pool.num_evictions
        if self.num_cow_copies or self.groups:
            block_bytes = self.block_size_tokens * self.bytes_per_token
            out["num_cow_copies"] = self.num_cow_copies
            out["cow_copy_bytes"] = self.num_cow_copies * block_bytes
        return out

    def check_invariants(self) -> None:
        super().check_invariants()
        self.pool.check()
        counts = [0] * self.num_blocks
        if self.pool.null_block is not None:
            counts[self.pool.null_block] = 1
        distinct = len(self._pooled)
        for blk in self._pooled:
            counts[blk] += 1
        for table in self.block_tables.values():
            for blk in table:
                counts[blk] += 1
            distinct += len(set(table))
        for req_id, group in self.groups.items():
            local: dict[int, int] = {}
            for seq in group.seqs:
                for blk in seq:
                    counts[blk] += 1
                    local[blk] = local.get(blk, 0) + 1
            assert local == group.local, f"paged: group {req_id} local ref counts drifted"
            assert len(group.seqs) == group.width, f"group {req_id}: {len(group.seqs)} sequences"
            distinct += len(local)
        assert counts == self.pool.ref_counts(), "paged: ref_cnt does not match block tables"
        assert distinct == self._sum_distinct, (
            f"paged: distinct blocks {distinct} != counter {self._sum_distinct}"
        )
