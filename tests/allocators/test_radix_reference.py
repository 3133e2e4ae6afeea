"""The radix allocator against its naive token-by-token reference (``radix_reference.py``, the
first implementation): random admissions sharing documents and each other's outputs (a later
turn's prompt holds an earlier request's answer, possibly still being generated), salts, growth
by single decodes and by chunks, finishes, preemptions and re-admissions, in a pool small enough
to evict. After every operation both must give the same answers and the same state: the same
tree (edges token by token, lock counts), the same stamps on unlocked leaves (the eviction
order), the same counters."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvsim.core.kv.base import DECODE_POOLED
from kvsim.core.kv.radix import RadixAllocator
from kvsim.workload.request import Request
from tests.allocators.radix_reference import NaiveRadixAllocator

CAPACITY = 48


def fast_tree(a: RadixAllocator) -> dict[Any, Any]:
    """Salt -> nested {edge tokens: (lock_ref, unlocked-leaf stamp or None, subtree)}."""

    def walk(node: Any) -> dict[Any, Any]:
        out = {}
        for child in node.children.values():
            stamp = child.last_access if not child.children and not child.lock_ref else None
            out[tuple(child.key)] = (child.lock_ref, stamp, walk(child))
        return out

    return {salt: walk(root) for salt, root in a.roots.items()}


def naive_tree(a: NaiveRadixAllocator) -> dict[Any, Any]:
    names: dict[int, Hashable] = {sid: seg for seg, sid in a._seg_ids.items()}

    def walk(node: Any) -> dict[Any, Any]:
        out = {}
        for child in node.children.values():
            stamp = child.last_access if not child.children and not child.lock_ref else None
            key = tuple((names[t >> 32], t & 0xFFFFFFFF) for t in child.key)
            out[key] = (child.lock_ref, stamp, walk(child))
        return out

    return {salt: walk(root) for salt, root in a.roots.items()}


def observed(a: Any, live: dict[int, Request]) -> tuple[Any, ...]:
    return (
        a.num_free_tokens,
        a.stats(),
        a.cached_tokens,
        a.protected_tokens,
        a.evictable_tokens,
        a.shared_slots(),
        {k: v for k, v in a.prefix_cache_summary().items() if k != "prefix_cache_hit_rate"},
        a._clock,
        {r: a.held_slots(r) for r in live},
    )


class RadixVersusNaive(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.fast = RadixAllocator(capacity_tokens=CAPACITY, bytes_per_token=2)
        self.naive = NaiveRadixAllocator(capacity_tokens=CAPACITY, bytes_per_token=2)
        self.live: dict[int, Request] = {}
        self.waiting: dict[int, Request] = {}  # preempted, to be admitted again
        self.outputs: dict[int, int] = {}  # req_id -> output tokens, for later prompts to quote
        self.next_id = 0

    def both(self, method: str, *args: Any) -> Any:
        got = getattr(self.fast, method)(*args)
        want = getattr(self.naive, method)(*args)
        assert got == want, f"{method}{args}: radix {got} != naive {want}"
        return got

    def admit(self, req: Request) -> bool:
        hit = self.both("find_cached_prefix", req)
        self.both("num_slots_needed", req, req.num_tokens, hit)
        self.both("can_allocate", req, req.num_tokens, hit)
        self.both("usable_free_slots", req, req.num_tokens)
        return self.both("allocate", req, req.num_tokens, hit) is not None

    @rule(
        parts=st.lists(
            st.tuples(st.integers(0, 4), st.integers(0, 6), st.integers(1, 9)),
            min_size=1,
            max_size=3,
        ),
        own=st.integers(0, 4),
        output=st.integers(1, 8),
        salt=st.sampled_from([None, None, "t1"]),
    )
    def arrive(self, parts: list[tuple[int, int, int]], own: int, output: int, salt: Any) -> None:
        segs: list[tuple[Hashable, int]] = []
        for kind, which, length in parts:
            if kind == 0 and self.outputs:  # quote an earlier request's answer (a later turn)
                quoted = sorted(self.outputs)[which % len(self.outputs)]
                segs.append((("gen", quoted), min(length, self.outputs[quoted])))
            else:
                segs.append((("doc", which % 3), length))
        if own:
            segs.append((("own", self.next_id), own))
        prompt = sum(n for _, n in segs)
        req = Request(
            self.next_id, 0.0, prompt, output, output, token_segments=tuple(segs), cache_salt=salt
        )
        self.outputs[req.req_id] = output
        self.next_id += 1
        if self.admit(req):
            self.live[req.req_id] = req

    @precondition(lambda self: bool(self.waiting))
    @rule(data=st.data())
    def readmit(self, data: st.DataObject) -> None:
        req = self.waiting[data.draw(st.sampled_from(sorted(self.waiting)))]
        if self.admit(req):
            del self.waiting[req.req_id]
            self.live[req.req_id] = req

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), step=st.sampled_from([1, 1, 1, 2, 5]))
    def grow(self, data: st.DataObject, step: int) -> None:
        req = self.live[data.draw(st.sampled_from(sorted(self.live)))]
        held = self.fast.held_slots(req.req_id)
        target = min(held + step, req.final_kv_tokens)
        self.both("num_slots_needed", req, target)
        self.both("can_allocate", req, target)
        if self.both("allocate", req, target) is not None:
            req.num_output_tokens = max(req.num_output_tokens, target - req.prompt_tokens + 1)

    @precondition(lambda self: bool(self.live))
    @rule()
    def decode_step(self) -> None:
        """One decode step of every live request that can grow, in order: a request the radix
        allocator lets decode in bulk (``DECODE_POOLED``) takes its slot with ``grow_blocks``
        (the decode cohort's path), any other with ``allocate``; the reference allocates each
        one after another. Stops at the first request that does not fit."""
        for req_id in sorted(self.live):
            req = self.live[req_id]
            held = self.fast.held_slots(req_id)
            if held >= req.final_kv_tokens:
                continue
            req.num_computed_tokens = held
            if self.fast.decode_mode(req) == DECODE_POOLED and self.fast.num_free_tokens >= 1:
                self.fast.grow_blocks([(req_id, 1)])
                placed = self.naive.allocate(req, held + 1) is not None
                assert placed, f"naive refused a decode radix placed in bulk: req {req_id}"
            elif self.both("allocate", req, held + 1) is None:
                return
            req.num_output_tokens = max(req.num_output_tokens, held + 2 - req.prompt_tokens)

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data(), preempt=st.booleans())
    def leave(self, data: st.DataObject, preempt: bool) -> None:
        req = self.live.pop(data.draw(st.sampled_from(sorted(self.live))))
        held = self.fast.held_slots(req.req_id)
        self.both("free", req.req_id, held if preempt else None)
        if preempt:
            req.num_preemptions += 1
            self.waiting[req.req_id] = req

    @invariant()
    def same_state(self) -> None:
        self.fast.check_invariants()
        assert observed(self.fast, self.live) == observed(self.naive, self.live)
        assert fast_tree(self.fast) == naive_tree(self.naive)


TestRadixVersusNaive = RadixVersusNaive.TestCase
TestRadixVersusNaive.settings = settings(max_examples=150, stateful_step_count=60, deadline=None)
