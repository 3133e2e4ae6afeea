"""Property-based tests of the sharing allocators: random admissions with shared documents, salts,
parallel samples and beams, growth and frees.

After every operation: ``check_invariants`` (ref counts equal the block-table entries, group-local
counts match, free queue <-> ref 0, ``evictable + protected == cached``, radix locks equal the live
paths), every live request holds at least its tokens, and a refused allocation changed nothing.
The naive reference for ``paged`` (prefix caching on, groups sharing with copy-on-write) is the
set of blocks the tables point at: the pool's used blocks must be exactly those.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvsim.core.kv import allocator_from_knobs
from kvsim.core.kv.base import NO_HIT, PrefixHit
from kvsim.workload.beams import BeamModel
from kvsim.workload.request import Request

CAPACITY = 64
BLOCK = 4


class SharingMachine(RuleBasedStateMachine):
    kind = "paged"

    def __init__(self) -> None:
        super().__init__()
        knobs = {
            "capacity_tokens": CAPACITY,
            "block_size_tokens": BLOCK,
            "enable_prefix_caching": True,
        }
        self.alloc = allocator_from_knobs(self.kind, **knobs)
        self.live: dict[int, Request] = {}
        self.tokens: dict[int, int] = {}
        self.next_id = 0

    def snapshot(self) -> tuple[object, ...]:
        a = self.alloc
        base = (a.num_free_tokens, a.stats())
        if self.kind == "paged":
            return (
                *base,
                a.pool.ref_counts(),
                a.pool.free_order(),
                a.pool.cached_map(),
                a.prefix_cache_hits,
            )
        return (*base, a.cached_tokens, a.protected_tokens, a.prefix_cache_hits)

    def check_can_allocate(self, req: Request, num_tokens: int, hit: PrefixHit = NO_HIT) -> None:
        """``can_allocate``'s shortcuts for beam groups give the exact rule's answer: the free
        blocks against the blocks the allocation takes (``_need``, a dry run for beams)."""
        if self.kind == "paged":
            exact = self.alloc._need(req, num_tokens, hit) <= self.alloc.pool.num_free
            assert self.alloc.can_allocate(req, num_tokens, hit) == exact

    @rule(
        doc=st.integers(0, 2),
        doc_len=st.integers(1, 9),
        extra=st.integers(0, 5),
        output=st.integers(1, 6),
        salt=st.sampled_from([None, "t1"]),
        width=st.integers(1, 3),
        beam=st.booleans(),
    )
    def allocate(
        self,
        doc: int,
        doc_len: int,
        extra: int,
        output: int,
        salt: str | None,
        width: int,
        beam: bool,
    ) -> None:
        if self.kind == "radix":
            width = 1
        segs = [(("doc", doc), doc_len)] + ([(("own", self.next_id), extra)] if extra else [])
        req = Request(
            self.next_id,
            0.0,
            doc_len + extra,
            output,
            output,
            token_segments=tuple(segs),
            cache_salt=salt,
            n=1 if beam else width,
            beam_width=width if beam else 1,
        )
        if beam and width > 1:
            model = BeamModel(40.0, seed=5)  # 0.5 near the prompt, falling to 40 / n
            req.beam_parents = model.parents(req.req_id, width, output, doc_len + extra)
        self.next_id += 1
        before = self.snapshot()
        hit = self.alloc.find_cached_prefix(req)
        assert self.snapshot() == before, "a lookup changed the pool"
        assert hit.num_tokens <= req.prompt_tokens - 1, "the last prompt token must be computed"
        for num_tokens in (req.prompt_tokens, req.final_kv_tokens):
            self.check_can_allocate(req, num_tokens, hit)
        result = self.alloc.allocate(req, req.prompt_tokens, hit)
        if result is None:
            assert self.snapshot() == before, "a refused allocation changed the pool"
            return
        assert result.num_reused_tokens == hit.num_tokens
        self.live[req.req_id] = req
        self.tokens[req.req_id] = req.prompt_tokens

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def grow(self, data: st.DataObject) -> None:
        req_id = data.draw(st.sampled_from(sorted(self.live)))
        req = self.live[req_id]
        target = min(self.tokens[req_id] + data.draw(st.integers(1, 5)), req.final_kv_tokens)
        self.check_can_allocate(req, target)
        before = self.snapshot()
        if self.alloc.allocate(req, target) is None:
            assert self.snapshot() == before, "a refused growth changed the pool"
        else:
            self.tokens[req_id] = target

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        req_id = data.draw(st.sampled_from(sorted(self.live)))
        self.live.pop(req_id)
        tokens = self.tokens.pop(req_id)
        preempted = data.draw(st.booleans())  # a preempted request keeps its KV findable
        self.alloc.free(req_id, tokens if preempted else None)

    @invariant()
    def laws_hold(self) -> None:
        self.alloc.check_invariants()
        for req_id, t in self.tokens.items():
            assert self.alloc.held_slots(req_id) >= t
        if self.kind == "paged":
            pointed = {b for g in self.alloc.groups.values() for s in g.seqs for b in s}
            pointed |= {b for t in self.alloc.block_tables.values() for b in t}
            used = self.alloc.num_blocks - self.alloc.pool.num_free
            assert used == len(pointed), f"{used} used blocks, tables point at {len(pointed)}"


_settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestPagedSharing = SharingMachine.TestCase
TestPagedSharing.settings = _settings
TestRadix = type("RadixMachine", (SharingMachine,), {"kind": "radix"}).TestCase
TestRadix.settings = _settings
