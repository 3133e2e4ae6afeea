"""Radix-tree prefix cache with page size 1 (SGLang ``RadixCache`` style).

Cached tokens live in a radix tree whose edges carry token runs. A new request matches its known
tokens against the tree (at most ``num_tokens - 1``: the last one is always computed; the match is
the ``PrefixHit`` of ``find_cached_prefix``), splitting the node where the match ends inside an
edge, and *locks* the matched path (``lock_ref`` + 1 on each node up to the root). Every token a
step will compute is inserted into the tree inside the allocation call, below the request's
path, which moves its lock down (SGLang's ``cache_unfinished_req``, done at allocation as vLLM
caches full blocks inside ``allocate_slots``): a request admitted later in the same step already
hits it. When a request leaves (finish or preemption) its path is unlocked. When free slots run
short, unlocked leaves are evicted least recently used first (a logical clock ticks at every
match and insert: the allocator knows no simulated time), and a parent left childless and
unlocked becomes a leaf in turn.

Accounting (slots): ``free + evictable + protected == capacity``; ``evictable`` (tree tokens in
unlocked nodes) counts as free for the contract, since an allocation may reclaim it;
``evictable + protected == cached``. Tenants' salts give separate trees, so they never share.
Sequence groups are not served here (use ``paged``).

    root -- [sys prompt 0..39] --+-- [user A 0..9]        split at 40 when user B arrives:
                                 +-- [user B 0..12]       both requests lock [sys prompt]

Representation (what keeps it fast; page size stays 1 token). kvsim's tokens are runs of a
segment (``kvsim.workload.tokens``: token ``t`` of segment ``s`` is ``(s, t)``), so an edge stores
its tokens as runs ``(segment_id, start, end)`` and a request's stream is its segment runs: matching
compares run against run (a whole 512-token Mooncake block in one comparison, not token by
token), a decode step widens the leaf's last run, and no table of token or segment ids grows
with the requests seen (the tree and the live requests hold all there is). Evictable leaves
(unlocked, childless) sit in a heap keyed by last access, pushed whenever a node becomes one
and checked when popped (lazy invalidation), so an eviction costs O(log n) per leaf instead of a
walk of the whole tree. Two unlocked leaves never share a last-access stamp (a stamp is written
along one root path only; a split also stamps the edge's lower half, beside a leaf the
splitting request locks), so the heap pops leaves in the order a full sort would.

Steady decoders (``span_layout = "blocks"`` of one token: ``kvsim.core.scheduler.running``) take
their slots in bulk (``take_pooled``: counters, clock ticks and evictions of one ``allocate`` per
token) and write them into their leaves when the scheduler touches them (``attach_pooled``).
That changes nothing observable because a leaf growing in place keeps its stamp (a locked
leaf's stamp is read only when a split copies it; it is stamped again when unlocked), because
no lookup reaches the tokens not yet written (``decode_mode``: a leaf only its request
locks, whose output no other prompt repeats), and because bulk evictions pop the same LRU
leaves while nothing unlocks in between.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

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
from kvsim.workload.request import Request
from kvsim.workload.tokens import output_owner, stream_segments

Run = tuple[Hashable, int, int]
"""Tokens ``start .. end - 1`` of one segment: ``(segment_id, start, end)``."""
First = tuple[Hashable, int]
"""A single token ``(segment_id, offset)``: the key a node is filed under in its parent."""


@dataclass(slots=True, eq=False)
class RadixNode:
    """A tree node: the token runs on the edge from its parent (``length`` tokens in all), lock
    count and LRU stamp (logical clock). The stamp is exact at leaves; an inner node's last
    access is the latest stamp in its subtree (see ``RadixAllocator._lock``)."""

    runs: list[Run]
    length: int
    parent: RadixNode | None = None
    children: dict[First, RadixNode] = field(default_factory=dict)
    lock_ref: int = 0
    last_access: int = 0

    @property
    def key(self) -> list[First]:
        """The edge's tokens one by one (for tests and debugging; slow)."""
        return [(seg, t) for seg, start, end in self.runs for t in range(start, end)]


@dataclass(slots=True)
class _Stream:
    """A request's token stream as runs: run ``i`` covers stream positions ``starts[i]`` to
    ``starts[i + 1] - 1`` (empty segments dropped, so ``starts`` increases strictly)."""

    runs: list[Run]
    starts: list[int]

    @classmethod
    def of(cls, request: Request) -> _Stream:
        runs: list[Run] = []
        starts = [0]
        for seg_id, length in stream_segments(request):
            if length > 0:
                runs.append((seg_id, 0, length))
                starts.append(starts[-1] + length)
        return cls(runs, starts)

    def first(self, pos: int) -> First:
        """The token at stream position ``pos``."""
        i = bisect_right(self.starts, pos) - 1
        seg, start, _ = self.runs[i]
        return seg, start + pos - self.starts[i]

    def run_end(self, pos: int) -> int:
        """End of the run holding stream position ``pos - 1`` (0 when ``pos`` is 0)."""
        if pos <= 0:
            return 0
        starts = self.starts
        return starts[min(bisect_right(starts, pos - 1), len(starts) - 1)]

    def pieces(self, lo: int, hi: int) -> list[Run]:
        """Runs of stream positions ``lo .. hi - 1``."""
        runs, starts = self.runs, self.starts
        i = bisect_right(starts, lo) - 1
        out: list[Run] = []
        while lo < hi:
            seg, start, end = runs[i]
            off = start + lo - starts[i]
            take = min(end - off, hi - lo)
            out.append((seg, off, off + take))
            lo += take
            i += 1
        return out


@dataclass(slots=True)
class _Held:
    """A live request: its locked path end and the tokens on that path (all it holds).

    ``widen_until``: the stream position where the run holding its last matched token ends; up
    to there its next tokens continue the last run of ``node``, which ends with that token.
    """

    request: Request
    node: RadixNode
    matched: int
    stream: _Stream
    widen_until: int = 0


_Match = tuple[list[RadixNode], int, int, RadixNode | None]
"""``(full nodes matched, stream position after them, tokens matched inside the next node
(whose match ends mid-edge; 0 if none), that node)``."""


class RadixAllocator(Allocator):
    """SGLang-style radix cache with page size 1.

    Args:
        capacity_tokens: pool size in token slots (one slot per token: page size 1).
        bytes_per_token: KV bytes per slot.
    """

    name = "radix"
    caches_prefixes = True
    span_layout = "blocks"  # blocks of one token: a steady decoder takes one slot per step
    orders_pooled_takes = True
    usable_is_threshold = True

    def __init__(self, *, capacity_tokens: int, bytes_per_token: int = 1) -> None:
        super().__init__(capacity_tokens=capacity_tokens, bytes_per_token=bytes_per_token)
        self.roots: dict[str | None, RadixNode] = {}
        self.live: dict[int, _Held] = {}
        self._free = capacity_tokens  # slots not in any tree
        self.cached_tokens = 0
        self.protected_tokens = 0
        self._sum_matched = 0
        self._clock = 0
        # evictable-leaf candidates (last_access, serial, node); stale entries skipped when popped
        self._heap: list[tuple[int, int, RadixNode]] = []
        self._serial = 0
        self._num_nodes = 0  # non-root nodes, to bound the heap's stale entries
        # one lookup remembered: find_cached_prefix, can_allocate and allocate of one head ask
        # the same question; any change to the tree's tokens bumps the version
        self._version = 0
        self._memo: tuple[Request, int, int, _Stream, _Match] | None = None
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.preempted_queries = 0
        self.preempted_hits = 0
        self.num_evicted_tokens = 0
        self._one_new = self._result(1, 1, 0)  # a decode step's result
        self._pooled = 0  # slots taken by take_pooled and not yet attached to a leaf
        self._outputs_read: set[int] = set()  # req_ids whose output other prompts repeat

    # -- streams and tree walks -------------------------------------------------------------
    def _root(self, salt: str | None) -> RadixNode:
        root = self.roots.get(salt)
        if root is None:
            root = self.roots[salt] = RadixNode([], 0)
            root.lock_ref = 1  # the root is never evicted
        return root

    def _match(self, node: RadixNode, stream: _Stream, pos: int, end: int) -> _Match:
        """Walk stream positions ``pos .. end - 1`` down from ``node``, edge by edge and run by
        run (two runs agree token by token exactly while their segments and offsets agree)."""
        path: list[RadixNode] = []
        runs, starts = stream.runs, stream.starts
        i = bisect_right(starts, pos) - 1
        while pos < end:
            seg, start, stop = runs[i]
            child = node.children.get((seg, start + pos - starts[i]))
            if child is None:
                break
            limit = min(child.length, end - pos)
            m, p = 0, pos
            for cseg, cstart, cend in child.runs:
                while cstart < cend and m < limit:
                    seg, start, stop = runs[i]
                    off = start + p - starts[i]
                    if off != cstart or seg != cseg:
                        return path, pos, m, child
                    take = min(cend - cstart, stop - off, limit - m)
                    m += take
                    p += take
                    cstart += take
                    if p == starts[i + 1]:
                        i += 1
                if m >= limit:
                    break
            if m < child.length:
                return path, pos, m, child
            path.append(child)
            node, pos = child, p
        return path, pos, 0, None

    def _split(self, child: RadixNode, at: int) -> RadixNode:
        """Split ``child``'s edge after ``at`` tokens; return the new upper node. A split is
        made by a lookup or an insertion reaching into the edge, which (SGLang's
        ``_match_prefix_helper``, ``_insert_helper``) stamps the node it reaches before
        splitting it: both halves are stamped now, the lower one refiled if it is an
        eviction candidate."""
        parent = child.parent
        assert parent is not None, "the root is never split"
        assert 0 < at < child.length, "split inside an edge only"
        runs, acc, k = child.runs, 0, 0
        while acc + runs[k][2] - runs[k][1] <= at:
            acc += runs[k][2] - runs[k][1]
            k += 1
        seg, start, end = runs[k]
        cut = start + at - acc
        if cut == start:
            upper_runs, lower_runs = runs[:k], runs[k:]
        else:
            upper_runs = [*runs[:k], (seg, start, cut)]
            lower_runs = [(seg, cut, end), *runs[k + 1 :]]
        first = (runs[0][0], runs[0][1])
        upper = RadixNode(
            upper_runs,
            at,
            parent,
            {(seg, cut): child},
            child.lock_ref,
            self._clock,
        )
        parent.children[first] = upper
        child.runs, child.length, child.parent = lower_runs, child.length - at, upper
        child.last_access = self._clock
        if child.lock_ref == 0 and not child.children:  # (its heap entry is stale now)
            self._push(child)
        self._num_nodes += 1
        self._version += 1
        return upper

    def _lock(self, node: RadixNode, delta: int) -> None:
        """Add ``delta`` to the lock count of ``node`` and its ancestors; stamp ``node``.

        Stamps are kept at the path's end only: an ancestor's last access is the latest of its
        own stamp and its subtree's (folded into it as children are evicted), which is what
        stamping the whole path would give wherever a stamp is read: at unlocked leaves.
        """
        if node.parent is not None:
            node.last_access = self._clock
        while node.parent is not None:
            if node.lock_ref == 0:
                self.protected_tokens += node.length
            node.lock_ref += delta
            if node.lock_ref == 0:
                self.protected_tokens -= node.length
                if not node.children:
                    self._push(node)
            node = node.parent

    def _push(self, node: RadixNode) -> None:
        """File an unlocked leaf as an eviction candidate at its current stamp."""
        heap = self._heap
        if len(heap) > 2 * self._num_nodes + 64:  # mostly stale: keep the live entries
            heap[:] = [e for e in heap if self._evictable(e)]
            heapq.heapify(heap)
        self._serial += 1
        heapq.heappush(heap, (node.last_access, self._serial, node))

    @staticmethod
    def _evictable(entry: tuple[int, int, RadixNode]) -> bool:
        stamp, _, node = entry
        return (
            node.parent is not None  # still in the tree (evicted nodes lose their parent)
            and not node.children
            and node.lock_ref == 0
            and node.last_access == stamp
        )

    @property
    def evictable_tokens(self) -> int:
        return self.cached_tokens - self.protected_tokens

    def _evict(self, num_tokens: int) -> None:
        """Free at least ``num_tokens`` cached slots, LRU unlocked leaves first."""
        heap, evictable = self._heap, self._evictable
        freed = 0
        while freed < num_tokens and heap:
            entry = heapq.heappop(heap)
            if not evictable(entry):
                continue
            node = entry[2]
            parent = node.parent
            assert parent is not None
            seg, start, _ = node.runs[0]
            del parent.children[(seg, start)]
            node.parent = None
            self._num_nodes -= 1
            freed += node.length
            if node.last_access > parent.last_access:  # the parent's subtree was used then
                parent.last_access = node.last_access
            if not parent.children and parent.lock_ref == 0 and parent.parent is not None:
                self._push(parent)
        if freed:
            self._version += 1
        self.cached_tokens -= freed
        self._free += freed
        self.num_evicted_tokens += freed

    # -- contract queries -------------------------------------------------------------------
    @property
    def num_free_tokens(self) -> int:
        return self._free + self.cached_tokens - self.protected_tokens

    def held_slots(self, req_id: int) -> int:
        held = self.live.get(req_id)
        return 0 if held is None else held.matched

    def _lookup(self, request: Request) -> tuple[_Stream, _Match]:
        """Match the request's known tokens but the last against its tenant's tree (pure)."""
        known = max(0, request.num_tokens - 1)
        memo = self._memo
        if (
            memo is not None
            and memo[0] is request
            and memo[1] == known
            and memo[2] == self._version
        ):
            return memo[3], memo[4]
        stream = memo[3] if memo is not None and memo[0] is request else _Stream.of(request)
        root = self.roots.get(request.cache_salt)
        if root is None:
            return stream, ([], 0, 0, None)
        found = self._match(root, stream, 0, min(known, stream.starts[-1]))
        self._memo = (request, known, self._version, stream, found)
        return stream, found

    def find_cached_prefix(self, request: Request) -> PrefixHit:
        if request.req_id in self.live:
            return NO_HIT
        _, (_, matched, partial, _) = self._lookup(request)
        return PrefixHit(matched + partial) if matched + partial else NO_HIT

    def _plan(self, request: Request, num_tokens: int) -> tuple[int, int]:
        """``(slots to take, of the evictable ones those this allocation would lock)``."""
        held = self.live.get(request.req_id)
        if held is not None:
            return max(0, num_tokens - held.matched), 0
        if request.num_seqs > 1:
            raise ValueError(
                f"radix: request {request.req_id} is a sequence group "
                f"(num_seqs={request.num_seqs}); use the paged allocator"
            )
        _, (path, matched, partial, nxt) = self._lookup(request)
        locking = sum([n.length for n in path if n.lock_ref == 0])
        if partial and nxt is not None and nxt.lock_ref == 0:
            locking += partial
        return max(0, num_tokens - matched - partial), locking

    def num_slots_needed(self, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT) -> int:
        return self._plan(request, num_tokens)[0]

    def can_allocate(self, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT) -> bool:
        need, locking = self._plan(request, num_tokens)
        return need <= self.num_free_tokens - locking

    def usable_free_slots(self, request: Request | None, num_tokens: int) -> int:
        if request is None or self.can_allocate(request, num_tokens):
            return self.num_free_tokens
        return 0

    def admission_slots_needed(self, request: Request, num_tokens: int) -> int:
        """Slots the head's admission needs, cache hits ignored (the recorder's external
        fragmentation must not depend on which leaves a fast-forwarded span evicted)."""
        return max(0, num_tokens - self.held_slots(request.req_id))

    # -- mutations --------------------------------------------------------------------------
    def allocate(
        self,
        request: Request,
        num_tokens: int,
        hit: PrefixHit = NO_HIT,
        cache_tokens: int | None = None,
    ) -> AllocResult | None:
        held = self.live.get(request.req_id)
        if held is not None:  # hot path: a running request grows (a decode or a prefill chunk)
            need = num_tokens - held.matched
            free = self._free
            if need > free + self.cached_tokens - self.protected_tokens:
                return None
            self._clock += 1
            if need <= 0:
                return self._nothing_new
            node = held.node
            if (
                num_tokens <= held.widen_until
                and need <= free
                and node.lock_ref == 1
                and not node.children
            ):  # its own leaf, continuing the leaf's last run: widen it (as _insert would)
                seg, start, end = node.runs[-1]
                node.runs[-1] = (seg, start, end + need)
                node.length += need
                self._version += 1
                self.cached_tokens += need
                self.protected_tokens += need
                self._free = free - need
                self._sum_matched += need
                held.matched = num_tokens
                return self._one_new if need == 1 else self._result(need, 1, 0)
            return self._grow(held, num_tokens, need, 0)
        need, locking = self._plan(request, num_tokens)
        if need > self.num_free_tokens - locking:
            return None
        self._clock += 1
        held = self._admit(request)
        need = max(0, num_tokens - held.matched)
        if need == 0:
            return self._nothing_new
        return self._grow(held, num_tokens, need, held.matched)

    def _grow(self, held: _Held, num_tokens: int, need: int, reused: int) -> AllocResult:
        """Take ``need`` slots and insert the request's tokens up to ``num_tokens``."""
        if need > self._free:
            self._evict(need - self._free)
        self._free -= need
        already, node = self._insert(held.node, held.stream, held.matched, num_tokens)
        self._free += already  # tokens the tree already held need no slot of their own
        if node is not held.node:  # the lock moves down: +1 below held.node, no net change above
            node.last_access = self._clock
            top, n = held.node, node
            while n is not top:
                if n.lock_ref == 0:
                    self.protected_tokens += n.length
                n.lock_ref += 1
                parent = n.parent
                assert parent is not None, "the new path end lies below the old one"
                n = parent
        self._sum_matched += num_tokens - held.matched
        held.node, held.matched = node, num_tokens
        held.widen_until = held.stream.run_end(num_tokens)
        return self._result(need - already, 1 if need > already else 0, reused)

    def _admit(self, request: Request) -> _Held:
        root = self._root(request.cache_salt)
        stream, (path, matched, partial, nxt) = self._lookup(request)
        node = path[-1] if path else root
        if partial:
            assert nxt is not None
            node = self._split(nxt, partial)
            matched += partial
        self.live[request.req_id] = held = _Held(
            request, node, matched, stream, stream.run_end(matched)
        )
        self._lock(node, +1)
        self._sum_matched += matched
        looked_up = request.num_tokens
        if request.readmitted:
            self.preempted_queries += looked_up
            self.preempted_hits += matched
        else:
            self.prefix_cache_queries += looked_up
            self.prefix_cache_hits += matched
        return held

    def _insert(self, node: RadixNode, stream: _Stream, lo: int, hi: int) -> tuple[int, RadixNode]:
        """Insert stream positions ``lo .. hi - 1`` below ``node``; return how many were already
        there and the end node.

        A leaf only this request locks grows in place (its own output, one token per step): the
        last run widens when the new tokens continue it.
        """
        hi = min(hi, stream.starts[-1])
        if hi <= lo:
            return 0, node
        clock = self._clock
        self._version += 1
        if not node.children and node.lock_ref == 1 and node.parent is not None:
            _grow_in_place(node, stream.pieces(lo, hi), hi - lo)
            self.cached_tokens += hi - lo
            self.protected_tokens += hi - lo
            return 0, node
        path, pos, partial, nxt = self._match(node, stream, lo, hi)
        end_node = path[-1] if path else node
        if partial:
            assert nxt is not None
            end_node = self._split(nxt, partial)
            pos += partial
        if pos < hi:
            leaf = RadixNode(stream.pieces(pos, hi), hi - pos, end_node, last_access=clock)
            end_node.children[stream.first(pos)] = leaf
            self._num_nodes += 1
            self.cached_tokens += hi - pos
            end_node = leaf
        return pos - lo, end_node

    def free(self, req_id: int, computed_tokens: int | None = None) -> None:
        held = self.live.pop(req_id, None)
        if held is None:
            raise KeyError(f"free(): unknown req_id {req_id}")
        self._clock += 1
        self._sum_matched -= held.matched
        self._lock(held.node, -1)

    # -- lazy decodes (kvsim.core.scheduler.running: a cohort of one-token blocks) ----------------
    def see_workload(self, requests: Sequence[Request]) -> None:
        """Note whose outputs later prompts repeat (multi-turn histories): those never decode
        lazily, since a lookup may walk into their leaves while they grow."""
        for request in requests:
            for seg_id, _ in request.token_segments or ():
                owner = output_owner(seg_id)
                if owner is not None:
                    self._outputs_read.add(owner)

    def decode_mode(self, request: Request, computed: int | None = None) -> int:
        """``DECODE_POOLED`` when the live ``request``'s decode tokens may be taken in bulk and
        written into its leaf later: the leaf is its own (locked by it alone, childless), and
        no other request's prompt repeats its output, so no lookup reaches the tokens not yet
        written. A request whose path goes on in the tree (another request's prompt holds its
        coming tokens: its growth is then shared, step by step) is ``DECODE_EXPLICIT``; any
        other ``DECODE_EXACT``."""
        held = self.live.get(request.req_id)
        if held is None:
            return DECODE_EXPLICIT
        node = held.node
        if node.children:
            return DECODE_EXPLICIT
        if request.req_id in self._outputs_read or node.lock_ref != 1 or node.parent is None:
            return DECODE_EXACT
        return DECODE_POOLED

    def can_fast_forward(self, request: Request) -> bool:
        """No fast-forward while a request's path goes on in the tree (``decode_mode``)."""
        return not self.live[request.req_id].node.children

    def take_pooled(self, num_blocks: int) -> None:
        """Take ``num_blocks`` slots for steady decoders (``decode_mode``), to be written
        into their leaves by ``attach_pooled``: the counters, clock and evictions of that many
        one-token ``allocate`` calls. Their leaves keep their stamps either way (a leaf grown in
        place is not re-stamped), and evictions pop the same LRU leaves in bulk as one by one
        while nothing else unlocks in between."""
        if not num_blocks:
            return
        if num_blocks > self._free:
            self._evict(num_blocks - self._free)
        self._free -= num_blocks
        self.cached_tokens += num_blocks
        self.protected_tokens += num_blocks
        self._sum_matched += num_blocks
        self._pooled += num_blocks
        self._clock += num_blocks
        self._version += 1

    def attach_pooled(self, req_id: int, num_blocks: int) -> None:
        """Write ``num_blocks`` pooled slots (the request's next tokens) into its leaf."""
        if not num_blocks:
            return
        held = self.live[req_id]
        lo = held.matched
        hi = lo + num_blocks
        if hi <= held.widen_until:  # the tokens continue the leaf's last run (as allocate)
            runs = held.node.runs
            seg, start, end = runs[-1]
            runs[-1] = (seg, start, end + num_blocks)
            held.node.length += num_blocks
        else:
            _grow_in_place(held.node, held.stream.pieces(lo, hi), num_blocks)
            held.widen_until = held.stream.run_end(hi)
        held.matched = hi
        self._pooled -= num_blocks

    def grow_blocks(self, grants: Sequence[tuple[int, int]]) -> None:
        """Each ``(req_id, n)`` decodes ``n`` more tokens in place, in order."""
        for req_id, num_blocks in grants:
            self.take_pooled(num_blocks)
            self.attach_pooled(req_id, num_blocks)

    # -- vectorised hooks -------------------------------------------------------------------
    def shared_slots(self) -> int:
        return self._sum_matched - self.protected_tokens

    # -- accounting -------------------------------------------------------------------------
    def stats(self) -> AllocatorStats:
        held = self.protected_tokens
        return AllocatorStats(self.capacity_tokens, held, 0, self.num_free_tokens, len(self.live))

    @property
    def overhead_slots(self) -> int:
        """``stats``' overhead, none: every slot is a live request's, cached or free (the
        recorder reads it each event without building ``stats``)."""
        return 0

    def prefix_cache_summary(self) -> dict[str, Any]:
        """SGLang/vLLM-style counters for the run summary (tokens, bytes)."""
        counters = prefix_cache_counters(
            self.prefix_cache_queries,
            self.prefix_cache_hits,
            self.bytes_per_token,
            self.preempted_queries,
            self.preempted_hits,
        )
        return {
            **counters,
            "num_evicted_tokens": self.num_evicted_tokens,
        }

    def check_invariants(self) -> None:
        super().check_invariants()
        locks: dict[int, int] = {}
        for held in self.live.values():
            node: RadixNode | None = held.node
            while node is not None and node.parent is not None:
                locks[id(node)] = locks.get(id(node), 0) + 1
                node = node.parent
        cached = protected = nodes = 0
        leaves: set[int] = set()
        stack = list(self.roots.values())
        while stack:
            node = stack.pop()
            for first, child in node.children.items():
                assert child.parent is node, "radix: child's parent link is wrong"
                assert child.runs, "radix: empty edge"
                assert all(end > start for _, start, end in child.runs), "radix: empty run"
                assert sum(end - start for _, start, end in child.runs) == child.length, (
                    f"radix: runs of {child.runs} do not sum to {child.length}"
                )
                assert (child.runs[0][0], child.runs[0][1]) == first, (
                    "radix: child filed under the wrong token"
                )
                assert child.lock_ref == locks.get(id(child), 0), (
                    f"radix: lock_ref {child.lock_ref} != {locks.get(id(child), 0)} live paths"
                )
                cached += child.length
                protected += child.length if child.lock_ref else 0
                nodes += 1
                if not child.children and not child.lock_ref:
                    leaves.add(id(child))
                stack.append(child)
        filed = {id(e[2]) for e in self._heap if self._evictable(e)}
        assert leaves <= filed, f"radix: {len(leaves - filed)} evictable leaves not in the heap"
        assert nodes == self._num_nodes, f"radix: {nodes} nodes != {self._num_nodes}"
        cached += self._pooled  # taken for steady decoders, not yet in their leaves
        protected += self._pooled
        assert cached == self.cached_tokens, f"radix: cached {cached} != {self.cached_tokens}"
        assert protected == self.protected_tokens, (
            f"radix: protected {protected} != {self.protected_tokens}"
        )
        assert self.evictable_tokens + self.protected_tokens == self.cached_tokens
        total = self._free + cached
        assert total == self.capacity_tokens, (
            f"radix: free {self._free} + cached {cached} != {self.capacity_tokens}"
        )
        assert self._free >= 0, f"radix: negative free {self._free}"


def _grow_in_place(node: RadixNode, new: list[Run], num_tokens: int) -> None:
    """Append the runs ``new`` (``num_tokens`` tokens) to ``node``'s edge, widening its last run
    where the first new one continues it."""
    runs = node.runs
    seg, start, end = runs[-1]
    nseg, nstart, nend = new[0]
    if nstart == end and nseg == seg:
        runs[-1] = (seg, start, nend)
        runs.extend(new[1:])
    else:
        runs.extend(new)
    node.length += num_tokens
