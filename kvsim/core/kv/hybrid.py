"""vLLM v1's hybrid KV cache manager: one block pool, one block table per KV cache group.

A hybrid model's layers fall into KV cache groups of equal layer counts (``kvsim.config.layers``);
every group draws equal blocks from one ``BlockPool`` and keeps its own block table per request
(``vllm/v1/core/kv_cache_coordinator.py``, ``HybridKVCacheCoordinator``). A slot here is one token
of one group. The rules per kind (``vllm/v1/core/single_type_kv_cache_manager.py``):

- full attention (``FullAttentionManager``): ``cdiv(num_tokens, B)`` blocks;
- sliding window W (``SlidingWindowManager``): before each allocation, the blocks whose tokens all
  lie before ``num_computed_tokens - W + 1`` (``get_num_skipped_tokens``) are freed, tail first,
  and the null block takes their place in the table (``remove_skipped_blocks``); new blocks are
  taken only past the skipped ones, so a request holds about ``cdiv(W, B) + 1`` blocks:

      table:  [null][null][null][ b7 ][ b9 ][ b4 ]     W = 40, B = 16, 90 computed tokens
               0-15  16-31 32-47 48-63 64-79 80-95     skipped = 90 - 40 + 1 = 51 -> 3 blocks

- state (``MambaManager``, prefix caching off for its group): one block per request, held from
  admission to the end, whatever its length; under speculative decoding one more per draft
  position (``KVCacheGroups.state_blocks_per_request``: ``num_speculative_blocks``), counted as
  reservation beside the one block of token states.

A prefix-cache hit counts only as far as every group hits (``find_longest_cache_hit``): the full
groups' longest cached prefix, then each sliding group's hit below it, which needs the
``cdiv(W - 1, B)`` blocks that end the hit cached (the blocks before them are null); the shortest
wins, and the full groups drop the rest. A state group never hits (vLLM's ``mamba_cache_mode``
"none", which keeps no prefix states; vLLM 0.34 switches to "align" when prefix caching is on,
not modelled: the config warns), so a model with one gets no hits. Block keys are the request's
chained keys (``kvsim.workload.tokens``) mixed with the group index (vLLM
``BlockHashWithGroupId``).

Freed blocks go back as vLLM 0.34.0's ``BlockPool.free_blocks`` sends them: cached full blocks
to the back of the free queue, the others to the front. As in vLLM's ``allocate_slots``, a
running request's blocks outside the window are freed before its new blocks are counted, even
when the allocation then fails (``allocate`` returns ``None`` having freed only those).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from librt.vecs import extend, vec
from mypy_extensions import i64

from kvsim.base.units import cdiv
from kvsim.config.layers import GroupKind, KVCacheGroups
from kvsim.core.kv.base import (
    DECODE_EXACT,
    DECODE_EXPLICIT,
    DECODE_POOLED,
    DECODE_POOLED_ONLY,
    NO_HIT,
    Allocator,
    AllocatorStats,
    AllocResult,
    DecodeGroups,
    PrefixHit,
    prefix_cache_counters,
)
from kvsim.core.kv.block_pool import BlockPool
from kvsim.workload.request import Request
from kvsim.workload.tokens import KeyChain, StreamKeys, stream_segments

# 2**63 - 1, built from a small int: mypyc keeps a literal past 2**62 as an int object,
# converted at every use, and an i64 computed once as a native constant
_KEY_MASK: Final[i64] = i64((1 << 62) - 1) * 2 + 1
_GROUP_MIX: Final = 0x9E3779B97F4A7C15  # odd 64-bit constant: group g's keys differ from group h's


def group_mix(group: int) -> i64:
    """What a block key of KV cache group ``group`` is mixed with (63 bits)."""
    return ((group + 1) * _GROUP_MIX) % (1 << 63)  # (an int until it fits: not the i64 mask)


def group_key(key: i64, group: int) -> i64:
    """A block key within one KV cache group (vLLM keys the cache by hash and group id)."""
    return mixed_key(key, group_mix(group))


def mixed_key(key: i64, mix: i64) -> i64:
    """``key`` within the group whose ``group_mix`` is ``mix`` (machine integers: no int
    object a block)."""
    return (key ^ mix) & _KEY_MASK


def _mixed_keys(keys: vec[i64], start: i64, stop: i64, mix: i64) -> vec[i64]:
    """``keys[start:stop]`` within the group whose ``group_mix`` is ``mix`` (``mixed_key``
    of each, in a new packed vector)."""
    out = keys[start:stop]  # (a copy, rewritten in place)
    for i in range(len(out)):
        out[i] = mixed_key(out[i], mix)
    return out


def sliding_skipped_blocks(num_computed_tokens: i64, window: i64, block_size: i64) -> i64:
    """Leading blocks a sliding-window group no longer needs: those whose tokens all precede
    ``num_computed_tokens - window + 1`` (vLLM ``SlidingWindowManager.get_num_skipped_tokens``)."""
    return max(0, num_computed_tokens - window + 1) // block_size


class _Held:
    """One live request's block tables and counters in a ``HybridPagedAllocator``: one record a
    request, found by the request object (no int object a lookup, one lookup a call).

    Args:
        request: the request.
        tables: one block table per group (the null block where a window freed).
        first_live: leading null entries per group.
        num_cached: leading blocks registered in the prefix cache.
        held_blocks: non-null blocks, all groups.
    """

    def __init__(
        self,
        request: Request,
        tables: list[vec[i64]],
        first_live: list[int],
        num_cached: int,
        held_blocks: int,
    ) -> None:
        self.request = request
        self.tables = tables
        self.first_live = first_live
        self.num_cached = num_cached
        self.held_blocks = held_blocks
        # (``has_room``) token room of its tables, and the computed count at which its window
        # next frees a block: an allocation within both changes nothing (``allocate``)
        self.has_room = False
        self.room_tokens = 0
        self.room_computed = 0
        # a pooled member's first live entry per group at its detaching (``detach_pooled``),
        # and its computed count then: its windows free nothing for a count below it
        self.detached: list[int] | None = None
        self.detached_computed = 0
        # the last ``kind_slots`` answer and what it depended on (the recorder asks twice a
        # step: pool totals, then per-group columns); valid while ``memo_epoch`` is the pool's
        self.memo_epoch = -1
        self.memo_length = 0
        self.memo_computed = 0
        self.memo_slots: vec[i64] = vec[i64]()


class HybridPagedAllocator(Allocator):
    """The paged policy over vLLM's hybrid KV cache groups (see the module docstring).

    Invariants (``check_invariants``): every non-null block in a table has a reference count
    equal to the number of table entries pointing at it; the null block is never freed; held +
    overhead + free slots == capacity.

    Args:
        capacity_tokens: the pool in slots (one token of one group: ``num_blocks * B``).
        bytes_per_token: bytes of one slot (``KVCacheGroups.slot_bytes``).
        kv_groups: the model's KV cache groups (their block size is the pool's).
        enable_prefix_caching: cache full blocks across requests.
        max_in_flight_tokens: tokens scheduled but not yet computed at most (vLLM's
            ``max_num_batched_tokens`` times the concurrent batches), for the admission gate's
            cap on a sliding group (``can_fit_sequence``); ``None``: no cap.
        max_model_len: the longest request, tokens (caps that cap).
    """

    name = "paged"
    caches_prefixes = True
    span_layout = "blocks"  # (steady decoders join the decode cohort: ``decode_mode``)
    reads_block_table = True
    usable_is_threshold = True
    allocates_every_step = True  # its held slots (all groups) say nothing of one group's room

    def __init__(
        self,
        *,
        capacity_tokens: int,
        bytes_per_token: int = 1,
        kv_groups: KVCacheGroups,
        enable_prefix_caching: bool = False,
        max_in_flight_tokens: int | None = None,
        max_model_len: int | None = None,
    ) -> None:
        super().__init__(capacity_tokens=capacity_tokens, bytes_per_token=bytes_per_token)
        self.kv_groups = kv_groups
        self.block_size_tokens = b = kv_groups.block_size_tokens
        self.num_blocks = capacity_tokens // b
        if self.num_blocks < 2:
            raise ValueError(
                f"capacity_tokens ({capacity_tokens}) holds no usable block of {b} tokens"
            )
        self.pool = BlockPool(self.num_blocks, reserve_null_block=True, keep_duplicates=True)
        null = self.pool.null_block
        assert null is not None
        self.null_block: int = null
        self.kinds = kv_groups.kinds
        self.windows = tuple(g.sliding_window_tokens or 0 for g in kv_groups.groups)
        self._mixes = vec[i64]([group_mix(g) for g in range(len(self.kinds))])
        self.enable_prefix_caching = enable_prefix_caching
        # a sliding group's blocks at a request's peak, for the admission gate (vLLM
        # SlidingWindowSpec.max_admission_blocks_per_request): the window's last W - 1
        # tokens plus a step's tokens, +1 for a window that starts inside a block
        # (one per group, 0: no cap)
        caps = [0] * len(self.windows)
        if max_in_flight_tokens is not None:
            for g, window in enumerate(self.windows):
                if window:
                    tokens = window - 1 + max_in_flight_tokens
                    if max_model_len is not None:
                        tokens = min(tokens, max_model_len)
                    caps[g] = cdiv(tokens, b) + 1
        # per group, in packed vectors (no int object read, no kind name compared a group): the
        # window, the admission cap, 1 for a state group, 1 for a sliding group
        self._window_of = vec[i64](list(self.windows))
        self._cap_of = vec[i64](caps)
        self._state_of = vec[i64]([1 if kind == "state" else 0 for kind in self.kinds])
        self._sliding_of = vec[i64]([1 if kind == "sliding" else 0 for kind in self.kinds])
        # ``_plan``'s two answers, reused (each caller reads them before the next plan)
        self._plan_new = vec[i64]([0] * len(self.kinds))
        self._plan_skip = vec[i64]([0] * len(self.kinds))
        self._state_blocks = kv_groups.state_blocks_per_request
        # groups of one kind hold the same positions (one window, one computed count): each
        # kind's first group stands for the others in the per-step accounting
        self._kind_first = {kind: self.kinds.index(kind) for kind in dict.fromkeys(self.kinds)}
        self._kind_count = {kind: self.kinds.count(kind) for kind in self._kind_first}
        # the kinds in order of their first group (``kind_slots``' order), how many groups each
        # has, and each group's kind as an index into that order
        self.kind_order: list[GroupKind] = list(self._kind_first)
        self._kind_counts = [self._kind_count[kind] for kind in self.kind_order]
        self.group_kind_index = [self.kind_order.index(kind) for kind in self.kinds]
        self._no_slots = vec[i64]([0] * (4 * len(self.kind_order)))  # (never changed)
        self._no_group_slots = vec[i64]([0] * (6 * len(self.kind_order)))  # (never changed)
        self._kind_first_group = [self._kind_first[kind] for kind in self.kind_order]
        sliding = self._kind_first.get("sliding")
        self._window = self.windows[sliding] if sliding is not None else 0
        # each live request's tables and counters, by the request and by its id (admission
        # order)
        self._records: dict[Request, _Held] = {}
        self._records_by_id: dict[int, _Held] = {}
        self._epoch = 0  # counts changes to any table (``_Held.memo_epoch``)
        self._sum_held = 0
        # pooled cohort members (``detach_pooled``): their attention groups' blocks, held by
        # none of their tables in particular (a stack: its first ``_num_pooled`` entries), and
        # each one's first live entry per group then
        self._pooled: vec[i64] = vec[i64]()
        self._num_pooled = 0
        self._nulls: vec[i64] = vec[i64]()  # null block ids (``_pad_null``)
        self.key_chain = KeyChain()
        self._keys: dict[int, StreamKeys] = {}
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.preempted_queries = 0
        self.preempted_hits = 0
        self._known_only = False

    def speculate(self, hash_lookahead_tokens: int = 0) -> None:
        self._known_only = True
        self.hash_lookahead_tokens = hash_lookahead_tokens

    # -- queries ----------------------------------------------------------------------------
    @property
    def num_gpu_blocks(self) -> int | None:
        return self.num_blocks

    @property
    def num_free_tokens(self) -> int:
        return self.pool.num_free * self.block_size_tokens

    @property
    def usable_capacity_tokens(self) -> int:
        return (self.num_blocks - 1) * self.block_size_tokens

    @property
    def tables(self) -> dict[int, list[vec[i64]]]:
        """req_id -> one block table per group, for each live request in admission order (the
        tables themselves, not copies)."""
        return {req_id: rec.tables for req_id, rec in self._records_by_id.items()}

    def held_slots(self, req_id: int) -> int:
        rec = self._records_by_id.get(req_id)
        return rec.held_blocks * self.block_size_tokens if rec is not None else 0

    def group_tables(self, req_id: int) -> list[list[int]]:
        """The request's block table in each group (copies; the null block where freed)."""
        return [list(t) for t in self._records_by_id[req_id].tables]

    def group_held_blocks(self, req_id: int) -> list[int]:
        """Non-null blocks the request holds in each group."""
        rec = self._records_by_id.get(req_id)
        if rec is None:
            return []
        null = self.null_block
        return [sum(1 for blk in t if blk != null) for t in rec.tables]

    def _stream_keys(self, request: Request) -> StreamKeys:
        keys = self._keys.get(request.req_id)
        if keys is None:
            segments = stream_segments(request)
            keys = StreamKeys(
                self.key_chain,
                segments,
                self.block_size_tokens,
                request.cache_salt,
                self.hash_lookahead_tokens,
            )
            self._keys[request.req_id] = keys
        return keys

    def find_cached_prefix(self, request: Request) -> PrefixHit:
        """The longest prefix every group hits (module docstring); ``blocks`` lists each group's
        hit table in turn (``len(blocks) == groups * hit blocks``, nulls before a window)."""
        if (
            not self.enable_prefix_caching
            or request in self._records
            or (not request.shares_tokens and not request.num_preemptions)
            or "state" in self.kinds
        ):
            return NO_HIT
        n = min(request.num_tokens - 1, self.keyed_tokens(request)) // self.block_size_tokens
        if n <= 0:
            return NO_HIT
        stream, pool, mixes = self._stream_keys(request), self.pool, self._mixes
        keys = stream.keys_between(0, n)  # (once, packed: every group reads them)
        for g, kind in enumerate(self.kinds):  # the longest cached prefix of every full group
            if kind == "full":
                n = len(pool.cached_run(_mixed_keys(keys, 0, n, mixes[g])))
                if n <= 0:  # (most lookups: a request whose first block is gone)
                    return NO_HIT
        while n > 0:  # each sliding group's hit at most n blocks long, until all agree
            shortest = min(
                (
                    self._sliding_hit(keys, g, n)
                    for g, kind in enumerate(self.kinds)
                    if kind == "sliding"
                ),
                default=n,
            )
            if shortest == n:
                break
            n = shortest
        if n <= 0:
            return NO_HIT
        blocks: list[int] = []
        null = self.null_block
        for g, kind in enumerate(self.kinds):
            start = 0  # (a sliding group's entries before its window's blocks: null)
            if kind == "sliding":
                start = max(0, n - cdiv(self.windows[g] - 1, self.block_size_tokens))
            blocks.extend([null] * start)
            run = pool.cached_run(_mixed_keys(keys, start, n, mixes[g]))
            blocks.extend(run)
            for i in range(start + len(run), n):  # (none: every group hits all n, see above)
                blk = pool.lookup(mixed_key(keys[i], mixes[g]))
                blocks.append(null if blk is None else blk)
        return PrefixHit(n * self.block_size_tokens, tuple(blocks))

    def _sliding_hit(self, keys: vec[i64], group: int, max_blocks: int) -> int:
        """Blocks of a sliding group's hit of at most ``max_blocks``: the first run, from the
        right, of ``cdiv(W - 1, B)`` cached blocks ends it; without one, the cached blocks
        from the start (vLLM ``SlidingWindowManager.find_longest_cache_hit``)."""
        # Found by probing every ``need``-th block from the right, since a run of ``need``
        # cached blocks holds one of them, and measuring the run around a cached one: the same
        # answer as a scan of every block (which vLLM does), with about 1/need of its lookups
        # where few blocks are cached (a preempted request's window looked up step after step).
        need = max(1, cdiv(self.windows[group] - 1, self.block_size_tokens))
        # (the pool, not its bound method: mypyc calls a method held in a local through Python)
        pool, mix = self.pool, self._mixes[group]
        probe = max_blocks - 1 if max_blocks >= need else -1  # (else no run of need fits)
        while probe >= 0:
            if not pool.has(mixed_key(keys[probe], mix)):
                probe -= need
                continue
            end = probe  # the run's last block (those right of a probe are read again)
            while end + 1 < max_blocks and pool.has(mixed_key(keys[end + 1], mix)):
                end += 1
            start = probe  # its first, or far enough left for a run of need
            while (
                start > 0 and end - start + 1 < need and pool.has(mixed_key(keys[start - 1], mix))
            ):
                start -= 1
            if end - start + 1 >= need:
                return end + 1
            if start == 0:  # the run from the start, and no run of need
                return end + 1
            probe = start - 2  # (start - 1 is not cached)
        run = 0  # no run of need: the cached blocks from the start
        while run < max_blocks and pool.has(mixed_key(keys[run], mix)):
            run += 1
        return run

    def _plan(
        self,
        request: Request,
        rec: _Held | None,
        num_tokens: int,
        hit: PrefixHit,
        capped: bool = False,
    ) -> tuple[vec[i64], vec[i64], int, int]:
        """``(new blocks per group, leading blocks each group frees, net blocks taken, new
        blocks in all)`` of ``allocate(request, num_tokens, hit)`` (``rec``: the request's
        record, ``None`` before its admission); ``capped``: a sliding group needs at most its
        admission cap (``can_fit_sequence``). Pure but for its two vectors, which the next call
        rewrites (packed: no int object a group)."""
        # (machine integers throughout: no tagged check or int object a group)
        b: i64 = self.block_size_tokens
        tables: list[vec[i64]] | None = None
        first_live: list[int] | None = None
        computed: i64 = hit.num_tokens
        if rec is not None:
            tables, first_live = rec.tables, rec.first_live
            computed = request.num_computed_tokens
        n_hit: i64 = hit.num_tokens // b
        required_all: i64 = cdiv(num_tokens, b)
        windows, caps, is_state = self._window_of, self._cap_of, self._state_of
        ref = self.pool.ref_cnt
        new, skip_to = self._plan_new, self._plan_skip
        net: i64 = 0
        total: i64 = 0
        last_window: i64 = -1  # (every sliding group has one window: its skip computed once)
        last_skip: i64 = 0
        skip: i64 = 0
        n: i64 = 0
        for g in range(len(windows)):
            have: i64 = n_hit  # (a machine integer either way: no int object a group)
            if tables is not None:
                have = len(tables[g])
            if is_state[g]:
                n = self._state_blocks if have == 0 else 0
                new[g] = n
                skip_to[g] = 0
                net += n
                total += n
                continue
            window = windows[g]
            skip = 0
            if window:
                if window != last_window:
                    last_window = window
                    last_skip = sliding_skipped_blocks(computed, window, b)
                skip = last_skip
            required = required_all
            if capped and caps[g]:
                required = min(required, caps[g])
            n = required - max(have, skip)
            if n < 0:
                n = 0
            new[g] = n
            skip_to[g] = skip
            net += n
            total += n
            if tables is not None and first_live is not None and skip > first_live[g]:
                # freed before taking (vLLM's order): those no other request also holds (none
                # does a block of a request that shares no tokens: only it can hit its keys)
                table = tables[g]
                stop = min(skip, len(table))
                if not request.shares_tokens:
                    net -= max(0, stop - first_live[g])
                    continue
                for i in range(first_live[g], stop):
                    if ref[table[i]] == 1:
                        net -= 1
        null = self.null_block
        for blk in hit.blocks:  # (distinct but for the null block: one key each)
            if blk != null and ref[blk] == 0:
                net += 1
        return new, skip_to, net, total

    def num_slots_needed(self, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT) -> int:
        plan = self._plan(request, self._records.get(request), num_tokens, hit)
        return max(0, plan[2]) * self.block_size_tokens

    def can_allocate(self, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT) -> bool:
        plan = self._plan(request, self._records.get(request), num_tokens, hit)
        return plan[2] <= self.pool.num_free

    def can_fit_sequence(self, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT) -> bool:
        """vLLM's full-sequence gate: a sliding group counts at most its admission cap, the
        blocks it holds at its peak (``get_num_blocks_to_allocate(apply_admission_cap=True)``)."""
        plan = self._plan(request, self._records.get(request), num_tokens, hit, capped=True)
        return plan[2] <= self.pool.num_free

    def sequence_slots_needed(
        self, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT
    ) -> int:
        plan = self._plan(request, self._records.get(request), num_tokens, hit, capped=True)
        return max(0, plan[2]) * self.block_size_tokens

    def usable_free_slots(self, request: Request | None, num_tokens: int) -> int:
        if request is None or self.can_allocate(request, num_tokens):
            return self.num_free_tokens
        return 0

    def decode_mode(self, request: Request, computed: int | None = None) -> int:
        """A steady decoder whose attention tables cover exactly its computed tokens is a
        cohort member; any other request is handled one by one. A member none of whose sliding
        groups' blocks carries a key (no prefix caching, or a request that shares no tokens,
        registers none as they fill, and whose windows have left the blocks of its prefix hit)
        is pooled: nothing reads the ids of its new blocks or of those its windows free until it
        leaves the cohort, so its first step may also free the blocks its prefill left outside
        its windows (``detach_pooled``): such a request is ``DECODE_POOLED_ONLY``, a member only
        where members are pooled (not where the run reads block ids, as a memory map does).
        Any other is grown by ``allocate`` where something
        happens (a block crossing, a block leaving its window, a cached block filling:
        ``decode_groups``), and joins only with no block left in a window that its next step
        would free."""
        rec = self._records.get(request)
        if rec is None or self._known_only:
            return DECODE_EXPLICIT
        b = self.block_size_tokens
        if computed is None:
            computed = request.num_computed_tokens
        blocks = cdiv(computed, b)
        tables, first_live = rec.tables, rec.first_live
        state_of, sliding_of = self._state_of, self._sliding_of
        frees_due = False  # its next step frees blocks that left a window (just prefilled)
        for g in range(len(tables)):
            if not state_of[g] and len(tables[g]) != blocks:
                return DECODE_EXPLICIT
            if sliding_of[g] and first_live[g] < sliding_skipped_blocks(
                computed, self._window_of[g], b
            ):
                frees_due = True
        pooled = DECODE_POOLED_ONLY if frees_due else DECODE_POOLED
        if not self.enable_prefix_caching:
            return pooled
        hit = rec.num_cached  # (a private stream registers nothing more)
        if not request.shares_tokens and all(
            first_live[g] >= hit for g, kind in enumerate(self.kinds) if kind == "sliding"
        ):
            return pooled
        return DECODE_EXPLICIT if frees_due else DECODE_EXACT

    def decode_groups(self) -> DecodeGroups:
        """One block per attention group at a crossing; the window's residue (a block leaves
        the window when ``num_computed_tokens - W + 1`` reaches a multiple of ``B``:
        ``sliding_skipped_blocks``)."""
        attention = sum(1 for kind in self.kinds if kind != "state")
        w = self._window
        residue = (w - 1) % self.block_size_tokens if w else -1
        sliding = sum(1 for kind in self.kinds if kind == "sliding")
        return DecodeGroups(
            attention,
            residue,
            list(self._kind_counts),
            self.enable_prefix_caching,
            sliding,
            list(self.kind_order),
            w,
        )

    def decode_group_slots(
        self, request: Request, length: int, computed: int | None = None
    ) -> vec[i64]:
        """``kind_slots`` plus each kind's growth per later step: an attention group's token
        states grow by one; a sliding group's outside-window slots by one once the first
        token it still needs (``num_computed_tokens - W + 1``) has reached its first held
        position, until the next freed block (a ``window_residue`` step) resets them."""
        if computed is None:
            computed = length - 1
        needed = computed - self._window + 1
        kinds, slots = self.kind_order, self._slots_at(request, computed, length)
        rec = self._records[request]
        out = self._no_group_slots[0 : 6 * len(kinds)]  # (a copy, filled by index)
        for k in range(len(kinds)):
            kind, j = kinds[k], 6 * k
            out[j], out[j + 1] = slots[4 * k], slots[4 * k + 1]
            out[j + 2], out[j + 3] = slots[4 * k + 2], slots[4 * k + 3]
            if kind != "state":
                out[j + 4] = 1
            if kind == "sliding":
                g = self._kind_first[kind]
                start = self._lead(rec, g, computed) * self.block_size_tokens
                out[j + 5] = 1 if needed >= start else 0
        return out

    def detach_pooled(self, request: Request, computed: int) -> tuple[int, int]:
        """Move the request's sliding groups' live blocks to the pooled holding (their ids are
        read by nobody while it is a pooled member: ``decode_mode``); those tables keep their
        null entries, the full groups' their blocks (new ones join them at ``attach_group_
        pooled``); its slots follow from its lengths (``_slots_at``), its windows freeing
        nothing before its first step, which computes token ``computed``. Returns its sliding
        groups' first live block now and once that step has freed what its windows left
        (``sliding_skipped_blocks(computed)``: more than now for a request just prefilled, the
        blocks that step frees taken from the pooled holding), (-1, -1) without a sliding
        group."""
        rec = self._records[request]
        rec.detached_computed = computed
        tables, first_live = rec.tables, rec.first_live
        moved = 0
        for g in range(len(tables)):
            if not self._sliding_of[g]:
                continue
            table, lead = tables[g], first_live[g]
            self._push_pooled(table, lead)
            moved += len(table) - lead
            tables[g] = table[:lead]
        rec.detached = list(first_live)
        rec.held_blocks -= moved
        rec.has_room = False
        rec.memo_epoch = -1
        sliding = self._kind_first.get("sliding")
        if sliding is None:
            return -1, -1
        return first_live[sliding], self._lead(rec, sliding, computed)

    def attach_group_pooled(self, request: Request, length: int, computed: int) -> None:
        """Give a detached request its tables back, as its steps made them: ``cdiv(length, B)``
        blocks a group, a sliding group's blocks before ``sliding_skipped_blocks(computed)``
        freed (null)."""
        b, rec = self.block_size_tokens, self._records[request]
        assert rec.detached is not None, f"req {request.req_id}: attached but not detached"
        first_live, tables, pooled = rec.first_live, rec.tables, self._pooled
        num_blocks = cdiv(length, b)
        added = 0
        for g in range(len(tables)):
            if self._state_of[g]:
                continue
            table, lead = tables[g], self._lead(rec, g, computed)
            if len(table) < lead:  # (a sliding group's freed entries)
                table = self._pad_null(table, lead)
            more = num_blocks - len(table)  # (a full group keeps its blocks: the new ones)
            top = self._num_pooled
            assert 0 <= more <= top, f"req {request.req_id}: {more} blocks to attach"
            if more:
                table = extend(table, pooled[top - more : top])
            self._num_pooled = top - more
            tables[g] = table
            first_live[g] = lead
            added += more
        rec.detached = None
        rec.held_blocks += added
        self._set_room(rec)
        self._epoch += 1

    def _lead(self, rec: _Held, group: int, computed: int) -> int:
        """Leading null entries of the request's table in ``group`` once a step from
        ``computed`` tokens has freed what left its window: its table's own for an attached
        request; for a pooled member (``detach_pooled``), those at its detaching, or in a
        sliding group ``sliding_skipped_blocks(computed)`` if more from its first step on
        (``computed`` at least its count at detaching)."""
        detached = rec.detached
        if detached is None:
            return rec.first_live[group]
        if not self._sliding_of[group] or computed < rec.detached_computed:
            return detached[group]
        return max(
            detached[group],
            sliding_skipped_blocks(computed, self._window_of[group], self.block_size_tokens),
        )

    def take_pooled(self, num_blocks: int) -> None:
        """Take ``num_blocks`` for pooled members' crossings (one per attention group each)."""
        if num_blocks:
            self._push_pooled(self.pool.take(num_blocks), 0)
            self._sum_held += num_blocks

    def _push_pooled(self, blocks: vec[i64], start: i64) -> None:
        """Put ``blocks[start:]`` on top of the pooled stack."""
        pooled, end = self._pooled, len(blocks)
        top: i64 = self._num_pooled  # (machine integers: a native loop, no tagged checks)
        reuse = min(end - start, len(pooled) - top)  # (entries past the top are stale)
        for i in range(reuse):
            pooled[top + i] = blocks[start + i]
        if start + reuse < end:  # (one copy, not an append a block)
            pooled = extend(pooled, blocks[start + reuse : end])
        self._pooled, self._num_pooled = pooled, top + end - start

    @property
    def num_pooled_blocks(self) -> int:
        return self._num_pooled

    def _pad_null(self, table: vec[i64], length: int) -> vec[i64]:
        """``table`` grown to ``length`` entries with null blocks (one copy from a vector of
        them kept for the purpose)."""
        need = length - len(table)
        nulls = self._nulls
        if len(nulls) < need:
            nulls = self._nulls = vec[i64]([self.null_block] * max(need, 2 * len(nulls)))
        return extend(table, nulls[0:need])

    def release_pooled(self, num_blocks: int) -> None:
        """Free ``num_blocks`` that left pooled members' windows, where ``_remove_skipped``
        sends them (cached: the back of the free queue; else the front). Which of the pooled
        blocks goes changes nothing: none carries a key."""
        if num_blocks:
            top = self._num_pooled
            start = top - num_blocks
            full = top if self.enable_prefix_caching else 0
            self.pool.release_table(self._pooled, full, start, top)
            self._num_pooled = start
            self._sum_held -= num_blocks

    # -- mutations --------------------------------------------------------------------------
    def allocate(
        self,
        request: Request,
        num_tokens: int,
        hit: PrefixHit = NO_HIT,
        cache_tokens: int | None = None,
    ) -> AllocResult | None:
        rec = self._records.get(request)
        if (
            rec is not None
            and rec.has_room
            and num_tokens <= rec.room_tokens
            and request.num_computed_tokens < rec.room_computed
            and (
                not (self.enable_prefix_caching and request.shares_tokens)
                or num_tokens // self.block_size_tokens <= rec.num_cached
            )
        ):
            return self._nothing_new  # no block to take, free or cache
        new, skip_to, net, new_total = self._plan(request, rec, num_tokens, hit)
        admitted = rec is None
        if rec is None:
            if net > self.pool.num_free:
                return None
            self._epoch += 1
            rec = self._admit(request, hit)
        else:  # (vLLM frees the window's old blocks first, even if the step then fails)
            self._epoch += 1
            self._remove_skipped(rec, skip_to)
            if new_total > self.pool.num_free:
                return None
        tables = rec.tables
        free_before = self.pool.num_free
        if new_total:  # (the groups' blocks in group order)
            pool = self.pool
            for g in range(len(tables)):
                if new[g]:
                    tables[g] = pool.take_into(tables[g], new[g])
        rec.held_blocks += new_total
        self._sum_held += new_total
        self._set_room(rec)
        if self.enable_prefix_caching:
            if admitted:
                self._record_lookup(request, hit)
            if request.shares_tokens:  # a private stream is keyed when preempted (``free``)
                cached = num_tokens if cache_tokens is None else cache_tokens
                self._cache_full_blocks(request, rec, cached)
        taken = max(0, free_before - self.pool.num_free)
        return self._result(taken * self.block_size_tokens, taken, hit.num_tokens)

    def _remove_skipped(self, rec: _Held, skip_to: vec[i64]) -> None:
        """Free each group's blocks now wholly outside its window, tail first, the null block
        taking their place (vLLM ``remove_skipped_blocks``): all full, so vLLM has cached them
        (the back of the free queue), or, without caching, the front."""
        null, freed, pool = self.null_block, 0, self.pool
        caching, tables, first_live = self.enable_prefix_caching, rec.tables, rec.first_live
        # group by group, each tail first: cached blocks join the back of the queue, uncached
        # ones the front (``BlockPool.release_table``)
        for g in range(len(tables)):
            table, lead = tables[g], first_live[g]
            skip = min(skip_to[g], len(table))
            if skip > lead:
                pool.release_table(table, skip if caching else 0, lead, skip)
                for i in range(lead, skip):
                    table[i] = null
                freed += skip - lead
                first_live[g] = skip
            if skip_to[g] > len(table):  # positions skipped before they were ever allocated
                first_live[g] = skip_to[g]
                tables[g] = self._pad_null(table, skip_to[g])
        if freed:
            rec.held_blocks -= freed
            self._sum_held -= freed
            self._set_room(rec)

    def _set_room(self, rec: _Held) -> None:
        """Note the record's room (``_Held.has_room``): tokens the attention tables have room
        for, and the computed count at which the window's first held block falls wholly
        outside it (``lead + 1`` blocks skipped: ``(lead + 1) B + W - 1``; never without a
        sliding group)."""
        b = self.block_size_tokens
        full = self._kind_first.get("full", self._kind_first.get("sliding"))
        rec.room_tokens = len(rec.tables[full]) * b if full is not None else 0
        sliding = self._kind_first.get("sliding")
        rec.room_computed = 1 << 62
        if sliding is not None:
            rec.room_computed = (rec.first_live[sliding] + 1) * b + self._window - 1
        rec.has_room = True

    def _admit(self, request: Request, hit: PrefixHit) -> _Held:
        """A new request's record, its tables holding its prefix hit (null entries before a
        window)."""
        null = self.null_block
        n_hit = hit.num_tokens // self.block_size_tokens
        if not n_hit:  # (empty tables, nothing touched)
            tables = [vec[i64]() for _ in self.kinds]
            first_live = [0] * len(self.kinds)
            held = 0
        else:
            tables, first_live, held = [], [], 0
            for g in range(len(self.kinds)):
                table = vec[i64](hit.blocks[g * n_hit : (g + 1) * n_hit])
                live = [blk for blk in table if blk != null]
                self.pool.touch(live)
                lead = 0
                while lead < len(table) and table[lead] == null:
                    lead += 1
                tables.append(table)
                first_live.append(lead)
                held += len(live)
        rec = _Held(request, tables, first_live, n_hit, held)
        self._records[request] = rec
        self._records_by_id[request.req_id] = rec
        self._sum_held += held
        return rec

    def _record_lookup(self, request: Request, hit: PrefixHit) -> None:
        if request.readmitted:
            self.preempted_queries += request.num_tokens
            self.preempted_hits += hit.num_tokens
        else:
            self.prefix_cache_queries += request.num_tokens
            self.prefix_cache_hits += hit.num_tokens

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        """Key the full blocks in every attention group; a block a window already freed (the
        null block in its place) stays unkeyed, and nothing leaves a window here (vLLM frees
        those only when it allocates)."""
        rec = self._records.get(request)
        if rec is None or not self.enable_prefix_caching or not request.shares_tokens:
            return
        self._cache_full_blocks(request, rec, num_tokens)

    def _cache_full_blocks(self, request: Request, rec: _Held, num_tokens: int) -> None:
        """Register the blocks ``num_tokens`` fill in the attention groups (vLLM
        ``cache_full_blocks``, per group); a state group's block is never cached."""
        if self._known_only:
            num_tokens = min(num_tokens, self.keyed_tokens(request))
        upto = num_tokens // self.block_size_tokens
        start, tables = rec.num_cached, rec.tables
        if upto <= start:
            return
        keys = self._stream_keys(request).keys_between(start, upto)
        mixed = keys[0 : len(keys)]  # (each group's keys, in one reused vector)
        for g, kind in enumerate(self.kinds):
            if kind == "state":
                continue
            mix = self._mixes[g]
            for i in range(len(keys)):
                mixed[i] = mixed_key(keys[i], mix)
            self.pool.register_entries(tables[g], start, mixed, self.null_block)
        rec.num_cached = upto

    def free(self, req_id: int, computed_tokens: int | None = None) -> None:
        """Free every group's blocks, each table tail first (vLLM ``free``, group by group)."""
        rec = self._records_by_id.pop(req_id, None)
        if rec is None:
            raise KeyError(f"free(): unknown req_id {req_id}")
        assert rec.detached is None, f"free(): req {req_id} is a pooled member"
        request, tables, first_live = rec.request, rec.tables, rec.first_live
        del self._records[request]
        if computed_tokens and self.enable_prefix_caching and not request.shares_tokens:
            # only the request itself can hit a private stream, after this preemption: its
            # blocks are keyed now rather than as they filled (the same hits, less work)
            self._cache_full_blocks(request, rec, computed_tokens)
        self._keys.pop(req_id, None)
        written = 0  # vLLM has cached every block the computed tokens fill (and keyed)
        if self.enable_prefix_caching:
            written = request.num_computed_tokens if computed_tokens is None else computed_tokens
            if self.hash_lookahead_tokens:
                written = min(written, self.keyed_tokens(request))
        num_full = written // self.block_size_tokens
        for g, table in enumerate(tables):  # (the null block only before the first live one)
            self.pool.release_table(table, num_full, first_live[g])
        self._sum_held -= rec.held_blocks

    # -- accounting -------------------------------------------------------------------------
    def request_slots(self, request: Request, length: int) -> tuple[int, int, int, int]:
        """Summed over groups (``kind_slots``): held, token states (outside-window tokens
        still held and state blocks included), internal fragmentation, held."""
        held = token = internal = 0
        counts = self._kind_counts
        values = self.kind_slot_values(request, length)
        for k in range(len(counts)):
            n = counts[k]
            held += n * values[4 * k]
            token += n * values[4 * k + 1]
            internal += n * values[4 * k + 3]
        return held, token, internal, held

    def group_slots(self, request: Request, length: int) -> list[tuple[int, int, int, int]]:
        """``kind_slots`` for each group, in group order."""
        per_kind = self.kind_slots(request, length)
        return [per_kind[i] for i in self.group_kind_index]

    def kind_slots(self, request: Request, length: int) -> list[tuple[int, int, int, int]]:
        """``(held, token states, of which outside the window, internal)`` slots of the live
        ``request`` in one group of each kind (``kind_order``) at ``length`` computed tokens
        (every group of a kind holds the same positions).

        A full or sliding group holding positions ``[s B, n B)`` (``s`` leading null entries):
        token states ``length - s B``, of which *outside the window* those before
        ``num_computed_tokens - W + 1`` (no token the step computes attends to them: the part
        of the first held block that vLLM cannot free yet), internal ``max(0, n B - final)``;
        the rest is reservation. A state group's first block is token states whole (a draft
        position's is reservation). ``length``: tokens computed once the step runs;
        ``request.num_computed_tokens``: before it.
        """
        values = self.kind_slot_values(request, length)
        return [
            (values[i], values[i + 1], values[i + 2], values[i + 3])
            for i in range(0, len(values), 4)
        ]

    def kind_slot_values(self, request: Request, length: int) -> vec[i64]:
        """``kind_slots`` flattened: its four values a kind, in one packed vector (no int
        object a value; read, never changed: it may be memoised)."""
        return self._slots_at(request, request.num_computed_tokens, length)

    def _slots_at(self, request: Request, computed: int, length: int) -> vec[i64]:
        """``kind_slot_values`` with the computed count before the step given."""
        b, final = self.block_size_tokens, request.final_kv_tokens
        rec = self._records.get(request)
        if rec is None:
            return self._no_slots
        if (
            rec.memo_epoch == self._epoch
            and rec.memo_length == length
            and rec.memo_computed == computed
        ):
            return rec.memo_slots
        tables = rec.tables
        out = self._no_slots[0 : len(self._no_slots)]  # (a copy: filled by index)
        detached = rec.detached is not None
        kinds, firsts = self.kind_order, self._kind_first_group
        for k in range(len(kinds)):
            kind, g, j = kinds[k], firsts[k], 4 * k
            size = len(tables[g]) * b
            if kind == "state":  # (one block of state; a draft position's blocks reserved)
                out[j], out[j + 1] = size, min(size, b)
                continue
            if detached:  # a pooled member: its tables as its steps made them
                size = cdiv(length, b) * b
            start = self._lead(rec, g, computed) * b
            token = max(0, min(length, size) - start)
            outside = 0
            if kind == "sliding":
                first_needed = computed - self._window + 1
                outside = max(0, min(first_needed, size) - start)
            out[j], out[j + 1], out[j + 2] = size - start, token, outside
            out[j + 3] = max(0, size - max(final, start))
        rec.memo_epoch, rec.memo_length, rec.memo_computed = self._epoch, length, computed
        rec.memo_slots = out
        return out

    def shared_slots(self) -> int:
        used = self.num_blocks - 1 - self.pool.num_free
        return (self._sum_held - used) * self.block_size_tokens

    def stats(self) -> AllocatorStats:
        b = self.block_size_tokens
        held = (self.num_blocks - 1 - self.pool.num_free) * b
        return AllocatorStats(
            self.capacity_tokens,
            held,
            self.overhead_slots,
            self.num_free_tokens,
            len(self._records),
        )

    @property
    def overhead_slots(self) -> int:
        """The null block and the pool's remainder past its last whole block (fixed; the
        recorder reads it each event without building ``stats``)."""
        return self.capacity_tokens - (self.num_blocks - 1) * self.block_size_tokens

    def prefix_cache_summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kv_cache_groups": len(self.kinds),
            "kv_cache_group_kinds": ",".join(self.kinds),
            "kv_cache_group_layers": self.kv_groups.layers_per_group,
            "kv_cache_padding_layers": self.kv_groups.num_padding_layers,
        }
        if self.enable_prefix_caching:
            out.update(
                prefix_cache_counters(
                    self.prefix_cache_queries,
                    self.prefix_cache_hits,
                    self.kv_groups.attention_bytes_per_token,  # (a hit skips every layer's KV)
                    self.preempted_queries,
                    self.preempted_hits,
                )
            )
            out["num_cache_evictions"] = self.pool.num_evictions
        return out

    def check_invariants(self) -> None:
        """The base laws, the pool's, and reference counts equal to table entries."""
        super().check_invariants()
        self.pool.check()
        counts = [0] * self.num_blocks
        null = self.null_block
        for i in range(self._num_pooled):  # (held by pooled members, in no table in particular)
            counts[self._pooled[i]] += 1
        for rid, rec in self._records_by_id.items():
            assert self._records[rec.request] is rec, f"req {rid}: records disagree"
            held = 0
            for g, table in enumerate(rec.tables):
                lead = rec.first_live[g]
                assert all(blk == null for blk in table[:lead]), f"req {rid} group {g}: live "
                "block before its first live entry"
                for blk in table[lead:]:
                    assert blk != null, f"req {rid} group {g}: null block inside the window"
                    counts[blk] += 1
                    held += 1
            assert held == rec.held_blocks, (
                f"req {rid}: {held} blocks in tables != {rec.held_blocks} counted"
            )
        for blk in range(self.num_blocks):
            if blk == null:
                continue
            assert counts[blk] == self.pool.ref(blk), (
                f"block {blk}: ref count {self.pool.ref(blk)} != {counts[blk]} table entries"
            )


def groups_held(allocator: HybridPagedAllocator, requests: Sequence[Request]) -> list[int]:
    """Blocks the live ``requests`` hold in each group (for tests and the experiment)."""
    totals = [0] * len(allocator.kinds)
    for req in requests:
        for g, n in enumerate(allocator.group_held_blocks(req.req_id)):
            totals[g] += n
    return totals
