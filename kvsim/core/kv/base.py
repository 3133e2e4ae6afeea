"""The allocator contract every KV policy implements, and the records it returns.

An allocator owns a pool of ``capacity_tokens`` KV slots (one slot = one token's K and V across all
layers). The scheduler asks it, per request, for room for a cumulative number of tokens: the
tokens the request has computed plus those the step computes (vLLM ``allocate_slots``). The
allocator answers with an ``AllocResult`` or ``None`` when the request does not fit, in which case
nothing changed (check first, then mutate, as vLLM's ``KVCacheManager.allocate_slots`` does).
Queries (``find_cached_prefix``, ``can_allocate``, ``num_slots_needed`` ...) change no state.

A request's first allocation may reuse a cached prefix: ``find_cached_prefix`` returns the
``PrefixHit`` that ``allocate(request, num_tokens, hit)`` then takes (vLLM ``get_computed_blocks``
followed by ``allocate_slots``). Allocators without a prefix cache always return ``NO_HIT``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from librt.vecs import vec
from mypy_extensions import i64, mypyc_attr

from kvsim.workload.request import Request

DECODE_POOLED_ONLY: Final = 3
"""``Allocator.decode_mode``: a steady decoder that may decode in the cohort only with its blocks
taken in bulk (a hybrid request just prefilled: its first step frees blocks its windows left)."""
DECODE_POOLED: Final = 2
"""``Allocator.decode_mode``: a steady decoder whose blocks may be taken in bulk."""
DECODE_EXACT: Final = 1
"""``Allocator.decode_mode``: a steady decoder the allocator must grow itself (``allocate``)."""
DECODE_EXPLICIT: Final = 0
"""``Allocator.decode_mode``: a request the scheduler handles one by one at every step."""


@dataclass(frozen=True, slots=True)
class AllocResult:
    """What one ``allocate`` call took.

    Attributes:
        num_new_slots: token slots newly taken from the free pool (a slab, or blocks x block size).
        num_new_blocks: blocks newly taken (1 for a contiguous slab, 0 when nothing was needed).
        num_reused_tokens: tokens whose KV was found already computed (prefix cache hits).
        bytes_allocated: ``num_new_slots * bytes_per_token``.
    """

    num_new_slots: int
    num_new_blocks: int
    num_reused_tokens: int
    bytes_allocated: int


@dataclass(frozen=True, slots=True)
class PrefixHit:
    """Computed KV found for a new request's prefix (whole blocks; never its last token).

    Attributes:
        num_tokens: tokens whose KV is found, so not computed again.
        blocks: the hit block ids in table order (paged pools); empty for other policies.
    """

    num_tokens: int = 0
    blocks: tuple[int, ...] = ()


NO_HIT: Final = PrefixHit()


@dataclass(frozen=True, slots=True)
class AllocatorStats:
    """A snapshot of the pool, in token slots.

    ``held_slots + overhead_slots + free_slots == capacity_slots`` always. ``held_slots`` are
    slots owned by live requests (their ``R``); ``overhead_slots`` are slots taken from the free
    pool but owned by no request's reservation (buddy rounding).
    """

    capacity_slots: int
    held_slots: int
    overhead_slots: int
    free_slots: int
    num_requests: int


def hit_rate(hits: int, queries: int) -> float:
    """A cache's hit rate: hit tokens / queried tokens, NaN with no query (vLLM's
    ``prefix_cache_hits`` over ``prefix_cache_queries``, and the external prefix cache's
    ``external_prefix_cache_hits`` over its queries)."""
    return hits / queries if queries else float("nan")


def prefix_cache_counters(
    queries: int,
    hits: int,
    bytes_per_token: int,
    preempted_queries: int = 0,
    preempted_hits: int = 0,
) -> dict[str, float]:
    """vLLM's prefix-cache counters for a run summary (tokens).

    Counted once per admission (vLLM v0.33.0 ``KVCacheManager.record_prefix_cache_stats``); a
    request admitted again after a preemption counts in the ``preempted`` pair instead (vLLM PR
    #25787), so re-hitting its own freed blocks is not a hit.

    Args:
        queries: tokens of first admissions looked up in the cache (``prefix_cache_queries``).
        hits: of those, tokens found (``prefix_cache_hits``).
        bytes_per_token: KV bytes per token, for the bytes not recomputed.
        preempted_queries, preempted_hits: the same for re-admissions (after a preemption or
            a dropped CPU-tier load: ``Request.readmitted``).
    """
    return {
        "prefix_cache_queries": queries,
        "prefix_cache_hits": hits,
        "prefix_cache_hit_rate": hit_rate(hits, queries),
        "prefix_cache_saved_bytes": (hits + preempted_hits) * bytes_per_token,
        "prefix_cache_preempted_queries": preempted_queries,
        "prefix_cache_preempted_hits": preempted_hits,
    }


class DecodeGroups:
    """How a pool of several KV cache groups serves the decode cohort's members
    (``Allocator.decode_groups``; ``kvsim.core.scheduler.group_sums``).

    Attributes:
        blocks_per_crossing: blocks a member takes when its length crosses a block boundary
            (one per attention group).
        window_residue: ``(W - 1) mod B`` for a sliding window of ``W`` tokens over blocks of
            ``B``: a member computing token ``n`` with ``n`` of that residue may free a block
            that left its window (one per sliding group: ``frees_per_window`` at most); -1
            without a sliding group.
        kind_counts: groups of each kind, in the order of ``Allocator.decode_group_slots``.
        caches: full blocks of requests that share tokens are cached as they fill.
        frees_per_window: sliding groups (blocks a member frees at its window's residue).
        kind_names: each kind's name (``"full"``, ``"sliding"``, ``"state"``), same order.
        window_tokens: the sliding window ``W`` in tokens (0 without a sliding group).
    """

    def __init__(
        self,
        blocks_per_crossing: int,
        window_residue: int,
        kind_counts: list[int],
        caches: bool,
        frees_per_window: int = 0,
        kind_names: list[str] | None = None,
        window_tokens: int = 0,
    ) -> None:
        self.blocks_per_crossing = blocks_per_crossing
        self.frees_per_window = frees_per_window
        self.window_residue = window_residue
        self.kind_counts = kind_counts
        self.caches = caches
        self.kind_names = kind_names if kind_names is not None else ["full"] * len(kind_counts)
        self.window_tokens = window_tokens


@mypyc_attr(allow_interpreted_subclasses=True)  # (kvsim.native: tests' reference policies)
class Allocator(ABC):
    """Base class of KV allocation policies.

    Invariants (checked by ``check_invariants``): held + overhead + free == capacity; no slot is
    owned twice; every live request's held slots >= the tokens it was granted.

    Class attributes declare what a policy supports, so callers need not probe it:
    ``paged`` (equal blocks; swap and the v0 append heuristic apply), ``caches_prefixes`` (it may
    return hits from ``find_cached_prefix``).

    Extension points: subclasses implement the abstract methods; vectorised ``held_slots_at`` and
    ``max_growth_steps`` let the engine fast-forward decode steps without a per-token loop.
    """

    name: ClassVar[str]
    paged: ClassVar[bool] = False
    caches_prefixes: ClassVar[bool] = False
    span_layout: ClassVar[str | None] = None
    """How a decoding sequence's holding follows its length, for the scheduler's lazy decode
    cohort (``kvsim.core.scheduler.cohort``): ``"blocks"``: ``cdiv(L, B) * B`` slots, one more block
    of ``block_size_tokens`` whenever the last fills; ``"slabs"``: fixed at admission; ``None``:
    the policy needs the allocator at every step (each request is handled one by one)."""
    block_size_tokens: int = 1
    hash_lookahead_tokens: int = 0
    """Tokens past a block that its prefix-cache key covers (``speculate``; vLLM
    ``num_hash_lookahead_tokens``)."""
    reads_block_table: ClassVar[bool] = False
    """Attention reads a request's KV through a block table (the cost model's paged layout
    factor, ``kvsim.core.cost``); ``False``: from one contiguous range (factor 1)."""
    allocates_every_step: ClassVar[bool] = False
    """The scheduler calls ``allocate`` at every step even when the holding has room (vLLM
    calls ``allocate_slots`` every step: a sliding window frees blocks there)."""
    usable_is_threshold: ClassVar[bool] = False
    """``usable_free_slots_now(request, n, free)`` is ``free`` when ``free`` reaches
    ``admission_slots_needed(request, n)`` and 0 otherwise, so the recorder computes the need
    once per span instead of once per step."""

    def __init__(self, *, capacity_tokens: int, bytes_per_token: int = 1) -> None:
        if capacity_tokens < 1:
            raise ValueError(f"capacity_tokens: must be >= 1, got {capacity_tokens}")
        if bytes_per_token < 1:
            raise ValueError(f"bytes_per_token: must be >= 1, got {bytes_per_token}")
        self.capacity_tokens = capacity_tokens
        self.bytes_per_token = bytes_per_token
        self._nothing_new = AllocResult(0, 0, 0, 0)
        self._results: dict[tuple[int, int, int], AllocResult] = {}
        self._widths: dict[int, int] = {}  # sequences of live group requests (absent: 1)

    # -- pure queries -----------------------------------------------------------------------
    @property
    @abstractmethod
    def num_free_tokens(self) -> int:
        """Free slots in the pool (cached but unreferenced blocks count as free)."""

    @property
    def num_used_tokens(self) -> int:
        """Slots not free (held by requests or lost to rounding)."""
        return self.capacity_tokens - self.num_free_tokens

    @property
    def num_free_bytes(self) -> int:
        return self.num_free_tokens * self.bytes_per_token

    @property
    def num_used_bytes(self) -> int:
        return self.num_used_tokens * self.bytes_per_token

    @property
    def usable_capacity_tokens(self) -> int:
        """Slots requests can ever hold: capacity minus a paged pool's remainder and null block
        (the denominator of vLLM's ``kv_cache_usage_perc``)."""
        return self.capacity_tokens

    @abstractmethod
    def held_slots(self, req_id: int) -> int:
        """Slots the request holds now, per sequence (``R`` of DESIGN.md); 0 for an unknown one."""

    def find_cached_prefix(self, request: Request) -> PrefixHit:
        """Computed KV of the request's prefix found in the cache (vLLM ``get_computed_blocks``):
        whole blocks, at most ``num_tokens - 1`` tokens. Pure; ``NO_HIT`` without a cache."""
        return NO_HIT

    def cached_prefix_tokens(self, request: Request) -> int:
        """Tokens of ``request``'s prompt this pool could serve from its cache now: what a
        prefix-aware router scores a replica by (llm-d's precise prefix-cache scorer reads the
        same from vLLM's KV events). Pure, and keeps nothing of a request the pool does not
        hold."""
        return self.find_cached_prefix(request).num_tokens

    @abstractmethod
    def num_slots_needed(self, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT) -> int:
        """Free slots ``allocate(request, num_tokens, hit)`` would take (0 if it already fits).

        Args:
            num_tokens: total tokens that need a slot, including ones already allocated.
            hit: a new request's prefix hit (its blocks are reused, not taken).
        """

    @abstractmethod
    def can_allocate(self, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT) -> bool:
        """Whether ``allocate(request, num_tokens, hit)`` would succeed now. Pure."""

    def can_fit_sequence(self, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT) -> bool:
        """vLLM v1's full-sequence admission gate (``allocate_slots(full_sequence_must_fit=
        True)``): whether room for ``num_tokens`` could be found now. By default
        ``can_allocate``; a pool whose requests recycle blocks as they go (a sliding window)
        counts at most what one request holds at its peak."""
        return self.can_allocate(request, num_tokens, hit)

    def sequence_slots_needed(
        self, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT
    ) -> int:
        """Free slots ``can_fit_sequence`` asks for (``num_slots_needed`` by default)."""
        return self.num_slots_needed(request, num_tokens, hit)

    def can_admit(self, request: Request, num_tokens: int) -> bool:
        """vLLM v0's admission check (``BlockSpaceManager.can_allocate``): by default the same as
        ``can_allocate``; paged pools keep the watermark free and ignore prefix hits."""
        return self.can_allocate(request, num_tokens)

    def can_append_v0(self, request: Request) -> bool:
        """vLLM v0's decode check (``can_append_slot``): paged pools want one free block per
        running sequence of the request, whether or not it needs one; slabs always have room."""
        return True

    @abstractmethod
    def usable_free_slots(self, request: Request | None, num_tokens: int) -> int:
        """Free slots that could serve ``request`` needing ``num_tokens`` (all free if ``None``).

        Free slots outside this count are external fragmentation (DESIGN.md).
        """

    def admission_slots_needed(self, request: Request, num_tokens: int) -> int:
        """Free slots admission of a new ``request`` needs (any kept-back reserve included, prefix
        hits ignored so that the recorder's categories do not depend on cache contents)."""
        return self.num_slots_needed(request, num_tokens)

    # -- mutations --------------------------------------------------------------------------
    @abstractmethod
    def allocate(
        self,
        request: Request,
        num_tokens: int,
        hit: PrefixHit = NO_HIT,
        cache_tokens: int | None = None,
    ) -> AllocResult | None:
        """Make ``request`` hold room for ``num_tokens`` tokens in total.

        Args:
            hit: for a new request, the ``find_cached_prefix`` result it reuses.
            cache_tokens: tokens whose full blocks a prefix cache may key (default
                ``num_tokens``): speculative decoding's lookahead slots are held, not cached
                (vLLM ``allocate_slots``: ``num_tokens_to_cache`` leaves them out).

        Returns:
            ``None``, changing nothing, when it does not fit.
        """

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        """Key the full blocks of a running request's first ``num_tokens`` tokens in the prefix
        cache, taking and freeing nothing (vLLM ``KVCacheManager.cache_blocks``, which
        ``update_from_output`` calls after a speculative verification). A policy without a
        block prefix cache does nothing."""
        return None

    @abstractmethod
    def free(self, req_id: int, computed_tokens: int | None = None) -> None:
        """Return every slot of ``req_id`` to the pool.

        Args:
            computed_tokens: for a preempted request, the tokens whose KV it had computed: a
                prefix cache keeps them findable for its return. ``None`` for a finished one.

        Raises:
            KeyError: ``req_id`` holds nothing (a double free is a bug).
        """

    # -- vectorised hooks for fast-forwarding -----------------------------------------------
    def first_unsafe_fill_step(
        self,
        requests: Sequence[Request],
        tokens: Sequence[int],
        num_more_steps: int,
    ) -> int | None:
        """First later step of a span at which a block that fills must be cached exactly then.

        A fast-forwarded span allocates (and caches) its later steps at once. That equals
        caching each block as it fills unless its key is already cached under another block
        (the step-by-step run may see that block evicted first) or two requests fill blocks
        with one key in the span (the first to fill wins). Pools that cache nothing: ``None``.

        Args:
            requests: the live requests that decode in the span.
            tokens: each one's token count after step 0; step ``j`` of the
                span allocates for ``tokens + j``.
            num_more_steps: the span's steps after step 0.

        Returns:
            The smallest such ``j`` in ``1..num_more_steps``, or ``None``.
        """
        return None

    orders_pooled_takes: ClassVar[bool] = False
    """``"blocks"`` layouts: a pooled take may evict what another request's allocation in the
    same step would reuse, so a step that allocates for requests sharing tokens, or coming back
    from a preemption, takes its pooled blocks member by member in running order."""

    def speculate(self, hash_lookahead_tokens: int = 0) -> None:
        """The run decodes speculatively: an allocation's tokens reach past the request's
        known ones (unverified drafts, lookahead slots), and a prefix cache keys only the known
        ones (vLLM ``allocate_slots`` caps the cached tokens at ``request.num_tokens``), less
        ``hash_lookahead_tokens``: a block is keyed with that many tokens after it, once they
        are known (vLLM ``num_hash_lookahead_tokens``; ``kvsim.workload.tokens.StreamKeys``).
        The scheduler calls it once, before the run; then every running request is handled
        one by one, so its counters are true at every allocation."""
        return None

    def keyed_tokens(self, request: Request) -> int:
        """Tokens whose full blocks have prefix-cache keys: the request's known tokens less
        those a key reads past its block (vLLM hashes block ``i`` once ``(i + 1) * B + L``
        tokens are known). ``request``'s counters must be true."""
        return request.num_tokens - self.hash_lookahead_tokens

    def see_workload(self, requests: Sequence[Request]) -> None:
        """The run's requests, before it starts (a policy may note what they share)."""
        return None

    def decode_mode(self, request: Request, computed: int | None = None) -> int:
        """How the live ``request`` may decode as a member of the scheduler's decode cohort
        (``kvsim.core.scheduler.running``): ``DECODE_POOLED`` (its blocks taken in bulk,
        ``take_pooled``), ``DECODE_EXACT`` (grown by ``allocate`` at each block crossing) or
        ``DECODE_EXPLICIT`` (not a member: handled one by one at every step). By default a
        plain request is pooled and a sequence group exact. ``computed``: its computed tokens
        when ``request`` does not count them yet (a step planned, not completed)."""
        return DECODE_POOLED if request.num_seqs == 1 else DECODE_EXACT

    def can_fast_forward(self, request: Request) -> bool:
        """Whether a ``DECODE_EXACT`` member may grow several tokens in one ``allocate``."""
        return True

    def decode_groups(self) -> DecodeGroups | None:
        """The pool's KV cache groups as the decode cohort sees them, or ``None`` for a pool
        of one group (a slot is then one token of every layer)."""
        return None

    def decode_group_slots(
        self, request: Request, length: int, computed: int | None = None
    ) -> vec[i64]:
        """Per kind of group (``DecodeGroups.kind_counts``' order), six values of the live
        ``request`` in one group of that kind in a step that computes its tokens up to
        ``length`` from ``computed`` (default ``length - 1``: a decode step; whatever its own
        counters say): held slots, token states, of
        which outside the window, internal fragmentation, and how many token states and
        outside-window slots each later decode step adds until the allocator next changes its
        holding (0 or 1). Only pools with ``decode_groups``.

        Raises:
            NotImplementedError: a pool of one group.
        """
        raise NotImplementedError(f"{self.name}: one KV cache group")

    def group_shared_slots(self, request: Request) -> int:
        """Slots a live sequence group's sequences share beyond one copy (0 without sharing):
        its physical holding is ``num_seqs * held_slots - group_shared_slots``."""
        return 0

    def seq_held_slots(self, length: int, held_now: int) -> int:
        """Slots one decoding sequence holds at ``length`` tokens when it holds ``held_now`` now:
        ``cdiv(length, B) * B`` for a ``"blocks"`` layout, its fixed holding for ``"slabs"``."""
        if self.span_layout == "blocks":
            b = self.block_size_tokens
            return -(length // -b) * b
        return held_now

    def request_slots(self, request: Request, length: int) -> tuple[int, int, int, int]:
        """``(held, token states, internal, unshared)`` slots of the live ``request`` when
        each of its sequences has ``length`` computed tokens (DESIGN.md's rule per sequence,
        a group's shared slots once; slots shared with other requests are counted here and
        subtracted by the caller, ``shared_slots``). ``unshared``: what its sequences would
        hold without any sharing."""
        held = self.seq_held_slots(length, request.num_held_slots)
        width, final = request.num_seqs, request.final_kv_tokens
        return width * held, width * length, width * max(held - final, 0), width * held

    def take_pooled(self, num_blocks: int) -> None:
        """``"blocks"`` layouts: take blocks for live single-sequence requests' tables, to be
        attached later (``attach_pooled``)."""
        raise NotImplementedError(f"{self.name} has no blocks layout")

    def attach_pooled(self, req_id: int, num_blocks: int) -> None:
        """``"blocks"`` layouts: append that many pooled blocks to the request's table."""
        raise NotImplementedError(f"{self.name} has no blocks layout")

    def release_pooled(self, num_blocks: int) -> None:
        """Pools of several groups: free ``num_blocks`` of the blocks pooled members hold (the
        blocks their sliding windows left), as ``allocate`` frees a window's blocks."""
        raise NotImplementedError(f"{self.name}: one KV cache group")

    def detach_pooled(self, request: Request, computed: int) -> tuple[int, int]:
        """Pools of several groups: a member joining the cohort pooled, its first step computing
        token ``computed``, gives its attention groups' blocks to the pool's anonymous holding
        (``attach_group_pooled`` gives them back); returns its sliding groups' first live block
        now and once that step has freed what left its windows ((-1, -1) without a sliding
        group)."""
        raise NotImplementedError(f"{self.name}: one KV cache group")

    @property
    def num_pooled_blocks(self) -> int:
        """Pools of several groups: blocks held by pooled members in none of their tables
        (``detach_pooled``)."""
        raise NotImplementedError(f"{self.name}: one KV cache group")

    def attach_group_pooled(self, request: Request, length: int, computed: int) -> None:
        """Pools of several groups: rebuild a detached member's tables as they are once its
        steps have allocated ``length`` tokens, the last of them from ``computed``."""
        raise NotImplementedError(f"{self.name}: one KV cache group")

    def grow_blocks(self, grants: Sequence[tuple[int, int]]) -> None:
        """``"blocks"`` layouts: give each ``(req_id, num_blocks)`` of single-sequence requests
        that many more blocks, in order, as one ``allocate`` each would (the caller checked that
        they fit and that no block they fill is cached as it fills)."""
        raise NotImplementedError(f"{self.name} has no blocks layout")

    def shared_slots(self) -> int:
        """Slots held by live single-sequence requests that more than one of them counts (prefix
        hits): ``span_slots``' held and token-state totals are the per-sequence sums minus this.
        Only for a pool without sequence groups."""
        return 0

    # -- request-aware span hooks (sequence groups, sharing) ---------------------------------
    # -- accounting -------------------------------------------------------------------------
    @abstractmethod
    def stats(self) -> AllocatorStats:
        """A frozen snapshot for the recorder."""

    @property
    def num_gpu_blocks(self) -> int | None:
        """Blocks of the pool, as vLLM logs "# GPU blocks" (a block pool's null block
        included); ``None`` for pools not cut into blocks."""
        return None

    def prefix_cache_summary(self) -> dict[str, Any]:
        """Prefix-cache and sharing counters for the run summary (empty without a cache)."""
        return {}

    def check_invariants(self) -> None:
        """Assert the accounting laws; raise ``AssertionError`` showing the numbers."""
        s = self.stats()
        total = s.held_slots + s.overhead_slots + s.free_slots
        assert total == s.capacity_slots, (
            f"{self.name}: held {s.held_slots} + overhead {s.overhead_slots} + free "
            f"{s.free_slots} = {total} != capacity {s.capacity_slots}"
        )
        assert s.free_slots == self.num_free_tokens, (
            f"{self.name}: stats free {s.free_slots} != num_free_tokens {self.num_free_tokens}"
        )
        assert min(s.held_slots, s.overhead_slots, s.free_slots) >= 0, f"{self.name}: negative {s}"

    @property
    def overhead_slots(self) -> int:
        """Slots taken from the pool but held by no request (``AllocatorStats.overhead_slots``)."""
        return self.stats().overhead_slots

    def _result(self, new_slots: int, new_blocks: int, reused: int = 0) -> AllocResult:
        key = (new_slots, new_blocks, reused)
        result = self._results.get(key)
        if result is None:  # results are immutable: one object per distinct size is enough
            result = self._results[key] = AllocResult(
                new_slots, new_blocks, reused, new_slots * self.bytes_per_token
            )
        return result
