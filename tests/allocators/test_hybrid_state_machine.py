"""Property-based test of the hybrid KV cache groups: random admissions (shared documents or
private prompts, with the prefix hits they find), chunked prefills, decodes and frees over a pool
with a full, a sliding-window and a state group.

After every operation, per group and for the pool (the reference is the tables themselves):
``check_invariants`` (ref counts equal the table entries of every group, no null block inside a
window, free queue <-> ref 0); every request's slots in each group split exactly into token
states + reservation + internal fragmentation with none negative; the groups' held slots minus
the slots shared across requests are the pool's used slots, and used + free + overhead equal
the capacity (no block leaked); a refused allocation took nothing (it may have freed blocks
outside the window, as vLLM's ``allocate_slots`` does before counting).
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvsim.config.layers import KVCacheGroup, KVCacheGroups
from kvsim.core.kv.hybrid import HybridPagedAllocator
from kvsim.workload.request import Request

BLOCK = 4
NUM_BLOCKS = 40
KINDS = KVCacheGroups(
    (KVCacheGroup("full", 1), KVCacheGroup("sliding", 1, 9), KVCacheGroup("state", 1)),
    1,
    BLOCK,
    1,
)
KINDS_NO_STATE = KVCacheGroups(KINDS.groups[:2], 1, BLOCK, 1)


class HybridMachine(RuleBasedStateMachine):
    kinds = KINDS

    def __init__(self) -> None:
        super().__init__()
        self.alloc = HybridPagedAllocator(
            capacity_tokens=NUM_BLOCKS * BLOCK, kv_groups=self.kinds, enable_prefix_caching=True
        )
        self.live: dict[int, Request] = {}
        self.next_id = 0

    @rule(
        doc=st.sampled_from(["a", "b", None]),
        prompt=st.integers(1, 40),
        output=st.integers(1, 12),
        chunk=st.integers(1, 40),
    )
    def admit(self, doc: str | None, prompt: int, output: int, chunk: int) -> None:
        self.next_id += 1
        segs = None if doc is None else ((doc, prompt),)
        req = Request(self.next_id, 0.0, prompt, output, output, token_segments=segs)
        hit = self.alloc.find_cached_prefix(req)
        assert hit.num_tokens <= prompt - 1
        num_tokens = min(prompt, hit.num_tokens + chunk)
        before = self.alloc.pool.num_free
        if self.alloc.allocate(req, num_tokens, hit) is None:
            assert self.alloc.pool.num_free == before
            assert req.req_id not in self.alloc.tables
            return
        req.num_computed_tokens = hit.num_tokens
        req.num_held_slots = num_tokens  # (the tokens this step computes, for ``advance``)
        self.live[req.req_id] = req

    @precondition(lambda self: self.live)
    @rule(data=st.data(), chunk=st.integers(1, 16))
    def advance(self, data: st.DataObject, chunk: int) -> None:
        """The last step's tokens are computed; the next step computes ``chunk`` more (a prefill
        chunk) or one (a decode)."""
        req = self.live[data.draw(st.sampled_from(sorted(self.live)))]
        req.num_computed_tokens = req.num_held_slots
        if req.num_computed_tokens >= req.prompt_tokens:
            req.num_output_tokens += 1
        final = req.prompt_tokens + req.output_tokens - 1
        if req.num_computed_tokens >= final:
            return
        step = chunk if req.num_computed_tokens < req.prompt_tokens else 1
        num_tokens = min(final, req.num_computed_tokens + step)
        tables = self.alloc.group_tables(req.req_id)
        free = self.alloc.pool.num_free
        if self.alloc.allocate(req, num_tokens) is None:
            # refused: only blocks outside the window may have been freed (vLLM frees them
            # before counting the step's blocks); nothing taken
            assert self.alloc.pool.num_free >= free
            after = self.alloc.group_tables(req.req_id)
            for kind, old, now in zip(self.alloc.kinds, tables, after, strict=True):
                if kind != "sliding":
                    assert now == old
                else:
                    assert len(now) == len(old)
                    assert all(
                        n in (o, self.alloc.null_block) for o, n in zip(old, now, strict=True)
                    )
            return
        req.num_held_slots = num_tokens

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        req = self.live.pop(data.draw(st.sampled_from(sorted(self.live))))
        self.alloc.free(req.req_id)

    @invariant()
    def conserved_per_group(self) -> None:
        alloc = self.alloc
        alloc.check_invariants()
        held_total = 0
        for req in self.live.values():
            length = req.num_held_slots  # tokens computed once the step runs
            for g, (held, token, outside, internal) in enumerate(alloc.group_slots(req, length)):
                reservation = held - token - internal
                assert min(token, outside, internal, reservation) >= 0, (req, g, held, token)
                assert outside <= token
                if alloc.kinds[g] == "full":
                    assert held == -(length // -BLOCK) * BLOCK  # cdiv(length, B) blocks
            held_total += alloc.held_slots(req.req_id)
        stats = alloc.stats()
        assert held_total - alloc.shared_slots() == stats.held_slots
        assert stats.held_slots + stats.overhead_slots + stats.free_slots == stats.capacity_slots


class HybridNoStateMachine(HybridMachine):
    kinds = KINDS_NO_STATE  # prefix hits are possible only without a state group


_settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
TestHybridGroups = HybridMachine.TestCase
TestHybridGroups.settings = _settings
TestHybridGroupsHits = HybridNoStateMachine.TestCase
TestHybridGroupsHits.settings = _settings
