"""Property-based tests of the sharing allocators: random admissions with shared documents, salts,
parallel samples and beams, growth and frees.

After every operation: ``check_invariants`` (ref counts equal the block-table entries, group-local
counts match, free queue <-> ref 0, ``evictable + protected == cached``, radix locks equal the live
paths), every live request holds at least its tokens, and a refused allocation changed nothing.
The naive reference for ``shared_prefix`` is the set of blocks the tables point at: the pool's
used blocks must be exactly those.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvsim.allocators import make_allocator
from kvsim.request import Request

CAPACITY = 64
BLOCK = 4


class SharingMachine(RuleBasedStateMachine):
    kind = "shared_prefix"

    def __init__(self) -> None:
        super().__init__()
        self.alloc = make_allocator(self.kind, capacity_tokens=CAPACITY, block_size_tokens=BLOCK)
        self.live: dict[int, Request] = {}
        self.tokens: dict[int, int] = {}
        self.next_id = 0

    def snapshot(self) -> tuple[object, ...]:
        a = self.alloc
        base = (a.num_free_tokens, a.stats())
        if self.kind == "shared_prefix":
            return (
                *base,
                list(a.pool.ref_cnt),
                a.pool.free_order(),
                dict(a.pool.cached),
                a.prefix_cache_hits,
            )
        return (*base, a.cached_tokens, a.protected_tokens, a.prefix_cache_hits)

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
        self.next_id += 1
        before = self.snapshot()
        result = self.alloc.allocate(req, req.prompt_tokens + 1)
        if result is None:
            assert self.snapshot() == before, "a refused allocation changed the pool"
            return
        self.live[req.req_id] = req
        self.tokens[req.req_id] = req.prompt_tokens + 1

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def grow(self, data: st.DataObject) -> None:
        req_id = data.draw(st.sampled_from(sorted(self.live)))
        req = self.live[req_id]
        target = min(self.tokens[req_id] + data.draw(st.integers(1, 5)), req.final_tokens)
        before = self.snapshot()
        if self.alloc.allocate(req, target) is None:
            assert self.snapshot() == before, "a refused growth changed the pool"
        else:
            self.tokens[req_id] = target

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        req_id = data.draw(st.sampled_from(sorted(self.live)))
        req = self.live.pop(req_id)
        req.num_computed_tokens = data.draw(st.integers(0, self.tokens.pop(req_id)))
        self.alloc.free(req_id)

    @invariant()
    def laws_hold(self) -> None:
        self.alloc.check_invariants()
        for req_id, t in self.tokens.items():
            assert self.alloc.held_slots(req_id) >= t
        if self.kind == "shared_prefix":
            pointed = {b for g in self.alloc.groups.values() for s in g.seqs for b in s}
            used = self.alloc.num_blocks - self.alloc.pool.num_free
            assert used == len(pointed), f"{used} used blocks, tables point at {len(pointed)}"


_settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestSharedPrefix = SharingMachine.TestCase
TestSharedPrefix.settings = _settings
TestRadix = type("RadixMachine", (SharingMachine,), {"kind": "radix"}).TestCase
TestRadix.settings = _settings
