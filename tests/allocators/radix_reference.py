"""The radix cache as first written, token by token: the naive reference that
``test_radix_reference.py`` checks ``kvsim.core.kv.radix`` against (same tree shapes, locks,
evictions and answers). Slow on purpose: every match compares single tokens, every eviction
walks the whole tree, every lock stamps the whole path."""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from kvsim.core.kv.base import (
    NO_HIT,
    Allocator,
    AllocatorStats,
    AllocResult,
    PrefixHit,
    prefix_cache_counters,
)
from kvsim.workload.request import Request
from kvsim.workload.tokens import stream_segments


@dataclass(slots=True, eq=False)
class RadixNode:
    """A tree node: the token run on the edge from its parent, lock count and LRU stamp."""

    key: list[int]
    parent: RadixNode | None = None
    children: dict[int, RadixNode] = field(default_factory=dict)
    lock_ref: int = 0
    last_access: int = 0


@dataclass(slots=True)
class _Held:
    """A live request: its locked path end and the tokens on that path (all it holds)."""

    request: Request
    node: RadixNode
    matched: int


class NaiveRadixAllocator(Allocator):
    """The token-by-token radix cache (see the module docstring).

    Args:
        capacity_tokens: pool size in token slots (one slot per token: page size 1).
        bytes_per_token: KV bytes per slot.
    """

    name = "radix_naive"
    caches_prefixes = True

    def __init__(self, *, capacity_tokens: int, bytes_per_token: int = 1) -> None:
        super().__init__(capacity_tokens=capacity_tokens, bytes_per_token=bytes_per_token)
        self.roots: dict[str | None, RadixNode] = {}
        self.live: dict[int, _Held] = {}
        self._free = capacity_tokens  # slots not in any tree
        self.cached_tokens = 0
        self.protected_tokens = 0
        self._tokens: dict[int, list[int]] = {}  # token ids of requests seen, until freed
        self._sum_matched = 0
        self._clock = 0
        self._seg_ids: dict[Hashable, int] = {}
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self.preempted_queries = 0
        self.preempted_hits = 0
        self.num_evicted_tokens = 0

    # -- token ids and tree walks -----------------------------------------------------------
    def tokens(self, request: Request) -> list[int]:
        """Synthetic token ids of the request's stream (prompt + output of sequence 0)."""
        out = self._tokens.get(request.req_id)
        if out is None:
            out = []
            for seg_id, length in stream_segments(request):
                sid = self._seg_ids.setdefault(seg_id, len(self._seg_ids))
                base = sid << 32
                out.extend(range(base, base + length))
            if request.req_id in self.live:
                self._tokens[request.req_id] = out
        return out

    def _root(self, salt: str | None) -> RadixNode:
        root = self.roots.get(salt)
        if root is None:
            root = self.roots[salt] = RadixNode([])
            root.lock_ref = 1  # the root is never evicted
        return root

    def _match(self, root: RadixNode, tokens: Sequence[int]) -> tuple[list[RadixNode], int, int]:
        """Walk ``tokens`` down from ``root``: (full nodes matched, matched tokens, tokens
        matched inside the next node, whose match ended mid-edge; 0 if none)."""
        path: list[RadixNode] = []
        node, pos = root, 0
        while pos < len(tokens):
            child = node.children.get(tokens[pos])
            if child is None:
                break
            m = 0
            key = child.key
            while m < len(key) and pos + m < len(tokens) and key[m] == tokens[pos + m]:
                m += 1
            if m < len(key):
                return path, pos, m
            path.append(child)
            node, pos = child, pos + m
        return path, pos, 0

    def _split(self, child: RadixNode, at: int) -> RadixNode:
        """Split ``child``'s edge after ``at`` tokens; return the new upper node. SGLang's
        ``_match_prefix_helper`` and ``_insert_helper`` stamp the node they reach before they
        split it, and the new upper node is made now: both halves are stamped now."""
        parent = child.parent
        assert parent is not None, "the root is never split"
        assert 0 < at < len(child.key), "split inside an edge only"
        upper = RadixNode(
            child.key[:at], parent, {child.key[at]: child}, child.lock_ref, self._clock
        )
        parent.children[child.key[0]] = upper
        child.key, child.parent = child.key[at:], upper
        child.last_access = self._clock
        return upper

    def _lock(self, node: RadixNode, delta: int) -> None:
        while node.parent is not None:
            if node.lock_ref == 0:
                self.protected_tokens += len(node.key)
            node.lock_ref += delta
            if node.lock_ref == 0:
                self.protected_tokens -= len(node.key)
            node.last_access = self._clock
            node = node.parent

    @property
    def evictable_tokens(self) -> int:
        return self.cached_tokens - self.protected_tokens

    def _evict(self, num_tokens: int) -> None:
        """Free at least ``num_tokens`` cached slots, LRU unlocked leaves first."""
        heap = [(n.last_access, id(n), n) for n in self._leaves() if n.lock_ref == 0]
        heapq.heapify(heap)
        freed = 0
        while freed < num_tokens and heap:
            _, _, node = heapq.heappop(heap)
            parent = node.parent
            assert parent is not None
            del parent.children[node.key[0]]
            freed += len(node.key)
            if not parent.children and parent.lock_ref == 0 and parent.parent is not None:
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        self.cached_tokens -= freed
        self._free += freed
        self.num_evicted_tokens += freed

    def _leaves(self) -> list[RadixNode]:
        out, stack = [], list(self.roots.values())
        while stack:
            node = stack.pop()
            if not node.children and node.parent is not None:
                out.append(node)
            stack.extend(node.children.values())
        return out

    # -- contract queries -------------------------------------------------------------------
    @property
    def num_free_tokens(self) -> int:
        return self._free + self.evictable_tokens

    def held_slots(self, req_id: int) -> int:
        held = self.live.get(req_id)
        return 0 if held is None else held.matched

    def _lookup(self, request: Request) -> tuple[list[RadixNode], int, int]:
        """Match the request's known tokens but the last against its tenant's tree (pure)."""
        known = self.tokens(request)[: max(0, request.num_tokens - 1)]
        root = self.roots.get(request.cache_salt)
        if root is None:
            return [], 0, 0
        return self._match(root, known)

    def find_cached_prefix(self, request: Request) -> PrefixHit:
        if request.req_id in self.live:
            return NO_HIT
        _, matched, partial = self._lookup(request)
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
        path, matched, partial = self._lookup(request)
        locking = sum(len(n.key) for n in path if n.lock_ref == 0)
        if partial:
            root = self._root(request.cache_salt)
            nxt = (path[-1] if path else root).children[self.tokens(request)[matched]]
            locking += partial if nxt.lock_ref == 0 else 0
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

    def allocate(
        self, request: Request, num_tokens: int, hit: PrefixHit = NO_HIT
    ) -> AllocResult | None:
        need, locking = self._plan(request, num_tokens)
        if need > self.num_free_tokens - locking:
            return None
        self._clock += 1
        held = self.live.get(request.req_id)
        reused = 0
        if held is None:
            held = self._admit(request)
            reused = held.matched
        need = max(0, num_tokens - held.matched)
        if need == 0:
            return self._nothing_new
        if need > self._free:
            self._evict(need - self._free)
        self._free -= need
        tokens = self.tokens(request)[held.matched : num_tokens]
        already, node = self._insert(held.node, tokens)
        self._free += already  # tokens the tree already held need no slot of their own
        if node is not held.node:
            self._lock(node, +1)
            self._lock(held.node, -1)
        self._sum_matched += num_tokens - held.matched
        held.node, held.matched = node, num_tokens
        return self._result(need - already, 1 if need > already else 0, reused)

    def _admit(self, request: Request) -> _Held:
        root = self._root(request.cache_salt)
        self.live[request.req_id] = held = _Held(request, root, 0)
        path, matched, partial = self._lookup(request)
        node = path[-1] if path else root
        if partial:
            node = self._split(node.children[self.tokens(request)[matched]], partial)
            matched += partial
        self._lock(node, +1)
        held.node, held.matched = node, matched
        self._sum_matched += matched
        looked_up = request.num_tokens
        if request.num_preemptions:
            self.preempted_queries += looked_up
            self.preempted_hits += matched
        else:
            self.prefix_cache_queries += looked_up
            self.prefix_cache_hits += matched
        return held

    def _insert(self, node: RadixNode, tokens: Sequence[int]) -> tuple[int, RadixNode]:
        """Insert ``tokens`` below ``node``; return how many were already there and the end node.

        A leaf only this request locks grows in place (its own output, one token per step).
        """
        if not tokens:
            return 0, node
        if not node.children and node.lock_ref == 1 and node.parent is not None:
            node.key.extend(tokens)  # (keeps its stamp: a locked leaf's is read only by a split)
            self.cached_tokens += len(tokens)
            self.protected_tokens += len(tokens)
            return 0, node
        path, matched, partial = self._match(node, tokens)
        end = path[-1] if path else node
        if partial:
            end = self._split(end.children[tokens[matched]], partial)
            matched += partial
        for n in path:
            n.last_access = self._clock
        if matched < len(tokens):
            leaf = RadixNode(list(tokens[matched:]), end, last_access=self._clock)
            end.children[tokens[matched]] = leaf
            self.cached_tokens += len(tokens) - matched
            end = leaf
        return matched, end

    def free(self, req_id: int, computed_tokens: int | None = None) -> None:
        held = self.live.pop(req_id, None)
        if held is None:
            raise KeyError(f"free(): unknown req_id {req_id}")
        self._clock += 1
        self._sum_matched -= held.matched
        self._lock(held.node, -1)
        self._tokens.pop(req_id, None)

    # -- vectorised hooks -------------------------------------------------------------------
    def shared_slots(self) -> int:
        return self._sum_matched - self.protected_tokens

    def stats(self) -> AllocatorStats:
        held = self.protected_tokens
        return AllocatorStats(self.capacity_tokens, held, 0, self.num_free_tokens, len(self.live))

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
        cached = protected = 0
        stack = list(self.roots.values())
        while stack:
            node = stack.pop()
            for first, child in node.children.items():
                assert child.parent is node, "radix: child's parent link is wrong"
                assert child.key, "radix: empty edge"
                assert child.key[0] == first, "radix: child filed under the wrong token"
                assert child.lock_ref == locks.get(id(child), 0), (
                    f"radix: lock_ref {child.lock_ref} != {locks.get(id(child), 0)} live paths"
                )
                cached += len(child.key)
                protected += len(child.key) if child.lock_ref else 0
                stack.append(child)
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
