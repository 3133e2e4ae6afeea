"""Property-based tests: random allocate / grow / free sequences against naive reference models.

The references keep a plain per-slot owner list (slabs) or a per-request block count (paged) and
decide by brute force whether a request fits and where; the real allocators must agree with them
and keep their accounting laws after every operation.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

from kvsim.base.units import cdiv, next_power_of_2
from kvsim.core.kv import allocator_from_knobs
from kvsim.workload.request import Request

CAPACITY = 40  # slots; buddy top chunks 16 + 16 + 8 with max_model_len 16
BLOCK = 4
MAX_LEN = 16


def free_runs(owner: list[int | None]) -> list[tuple[int, int]]:
    runs, start = [], None
    for i, o in enumerate([*owner, -1]):
        if o is None and start is None:
            start = i
        elif o is not None and start is not None:
            runs.append((start, i - start))
            start = None
    return runs


def naive_place(kind: str, owner: list[int | None], size: int) -> int | None:
    """Where a brute-force allocator of ``kind`` puts ``size`` slots (or None)."""
    runs = [(s, n) for s, n in free_runs(owner) if n >= size]
    if kind == "first_fit":
        return runs[0][0] if runs else None
    if kind == "best_fit":
        return min(runs, key=lambda r: (r[1], r[0]))[0] if runs else None
    # buddy: any aligned chunk of next_power_of_2(size) inside one top chunk (16, 16, 8), all free
    chunk = next_power_of_2(size)
    tops = [(0, 16), (16, 16), (32, 8)]
    for top_start, top_size in tops:
        if chunk > top_size:
            continue
        for a in range(top_start, top_start + top_size, chunk):
            if all(owner[i] is None for i in range(a, a + chunk)):
                return a
    return None


class AllocatorMachine(RuleBasedStateMachine):
    kind = "paged"
    requests = Bundle("requests")

    def __init__(self) -> None:
        super().__init__()
        knobs = {
            "capacity_tokens": CAPACITY,
            "block_size_tokens": BLOCK,
            "reservation": "oracle",
            "max_model_len": MAX_LEN,
        }
        self.alloc = allocator_from_knobs(self.kind, **knobs)
        self.live: dict[int, Request] = {}
        self.tokens: dict[int, int] = {}
        self.owner: list[int | None] = [None] * CAPACITY  # slabs: slot -> req_id
        self.next_id = 0

    def _expected_size(self, req: Request) -> int:
        return req.prompt_tokens + req.output_tokens - 1  # oracle slab: the KV it will write

    @rule(prompt=st.integers(1, 10), output=st.integers(1, 6))
    def allocate(self, prompt: int, output: int) -> None:
        req = Request(self.next_id, 0.0, prompt, output, output)
        self.next_id += 1
        num_tokens = prompt  # admission: slots for the prompt the prefill step computes
        if self.kind == "paged":
            used = sum(cdiv(t, BLOCK) for t in self.tokens.values())
            expect_ok = cdiv(num_tokens, BLOCK) <= CAPACITY // BLOCK - used
        else:
            size = self._expected_size(req)
            chunk = next_power_of_2(size) if self.kind == "buddy" else size
            where = naive_place(self.kind, self.owner, size)
            expect_ok = where is not None
        before = self.alloc.num_free_tokens
        result = self.alloc.allocate(req, num_tokens)
        assert (result is not None) == expect_ok, (self.kind, prompt, output, self.owner)
        if result is None:
            assert self.alloc.num_free_tokens == before
            return
        self.live[req.req_id] = req
        self.tokens[req.req_id] = num_tokens
        if self.kind != "paged":
            start, held = self.alloc.slab_of(req.req_id)
            if self.kind != "buddy":
                assert start == where, f"{self.kind} placed at {start}, reference at {where}"
            for i in range(start, start + chunk):
                assert self.owner[i] is None, f"slot {i} owned twice"
                self.owner[i] = req.req_id
            assert held == size

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def grow(self, data: st.DataObject) -> None:
        req_id = data.draw(st.sampled_from(sorted(self.live)))
        req = self.live[req_id]
        target = min(self.tokens[req_id] + data.draw(st.integers(1, 5)), req.final_kv_tokens)
        if self.kind == "paged":
            used = sum(cdiv(t, BLOCK) for t in self.tokens.values())
            need = cdiv(target, BLOCK) - cdiv(self.tokens[req_id], BLOCK)
            expect_ok = need <= CAPACITY // BLOCK - used
        else:
            expect_ok = True  # a slab sized to the final length never needs to move
        result = self.alloc.allocate(req, target)
        assert (result is not None) == expect_ok
        if result is not None:
            self.tokens[req_id] = target

    @precondition(lambda self: bool(self.live))
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        req_id = data.draw(st.sampled_from(sorted(self.live)))
        self.alloc.free(req_id)
        del self.live[req_id], self.tokens[req_id]
        self.owner = [None if o == req_id else o for o in self.owner]

    @invariant()
    def laws_hold(self) -> None:
        self.alloc.check_invariants()
        if self.kind == "paged":
            used = sum(cdiv(t, BLOCK) for t in self.tokens.values())
            assert self.alloc.num_free_tokens == (CAPACITY // BLOCK - used) * BLOCK
        else:
            assert self.alloc.num_free_tokens == self.owner.count(None)
        for req_id, t in self.tokens.items():
            assert self.alloc.held_slots(req_id) >= t


def machine(kind: str) -> type[AllocatorMachine]:
    return type(f"{kind}Machine", (AllocatorMachine,), {"kind": kind})


_settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestPaged = machine("paged").TestCase
TestPaged.settings = _settings
TestFirstFit = machine("first_fit").TestCase
TestFirstFit.settings = _settings
TestBestFit = machine("best_fit").TestCase
TestBestFit.settings = _settings
TestBuddy = machine("buddy").TestCase
TestBuddy.settings = _settings
