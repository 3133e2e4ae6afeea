"""``Allocator.cached_prefix_tokens``: the router's pure prefix query equals the admission's
``find_cached_prefix`` and keeps nothing of a request the pool does not hold."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.core.kv.paged import PagedAllocator
from kvsim.workload.request import Request

RUNS = ("a", "b", "c")


def _request(req_id: int, runs: list[tuple[int, int]]) -> Request:
    segments = tuple((RUNS[r], n) for r, n in runs)
    prompt = sum(n for _, n in runs)
    return Request(req_id, 0.0, prompt, 4, 4, token_segments=segments)


runs_strategy = st.lists(st.tuples(st.integers(0, 2), st.integers(1, 40)), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None)
@given(held=st.lists(runs_strategy, min_size=1, max_size=5), asked=runs_strategy)
def test_cached_prefix_tokens_is_find_cached_prefix_without_memo(held, asked):
    pool = PagedAllocator(capacity_tokens=4096, block_size_tokens=4, enable_prefix_caching=True)
    for i, runs in enumerate(held):  # some requests computed and still held, some freed
        req = _request(i, runs)
        assert pool.allocate(req, req.prompt_tokens) is not None
        if i % 2:
            pool.free(req.req_id, req.prompt_tokens)
    query = _request(99, asked)
    keys_before = dict(pool._keys)
    tokens = pool.cached_prefix_tokens(query)
    assert pool._keys == keys_before  # nothing kept for a request the pool does not hold
    assert tokens == pool.find_cached_prefix(query).num_tokens
    pool.check_invariants()
