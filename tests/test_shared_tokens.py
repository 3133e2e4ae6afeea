"""Which tokens another request may share (``note_shared_tokens``), and the paged pool keying a
block past them only when its request is preempted. Every number worked by hand."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.workload.request import EVERY_TOKEN, Request
from kvsim.workload.tokens import note_shared_tokens, stream_segments
from tests.allocators.pools import v1_pool


def test_shared_tokens_end_with_the_last_run_another_stream_names():
    # Mooncake ids stand for 512-token runs ("mc", id); a prompt's last run is cut to fit.
    # a: mc0 mc1 mc2(376) + 20 output; b: mc0 mc1 mc5(376); c: mc7(300) alone; e: a's whole
    # history (its prompt and output) then 30 new tokens, as a later turn repeats it.
    history = ((("mc", 0), 512), (("mc", 1), 512), (("mc", 2), 376), (("gen", 0), 20))
    a = Request(0, 0.0, 1400, 20, 20, prefix_hash_ids=(0, 1, 2))
    b = Request(1, 0.0, 1400, 5, 5, prefix_hash_ids=(0, 1, 5))
    c = Request(2, 0.0, 300, 5, 5, prefix_hash_ids=(7,))
    e = Request(4, 0.0, 1450, 5, 5, token_segments=(*history, (("turn", 4), 30)))
    private = Request(5, 0.0, 100, 5, 5)
    group = Request(6, 0.0, 100, 5, 5, n=2, token_segments=((("q", 6), 100),))
    note_shared_tokens([a, b, c, e, private, group])
    # a: mc0, mc1 (a b e), mc2 (a e) and its output (a e) are named again: 1,400 + 20
    assert a.shared_tokens == 1420
    # b: mc0 and mc1 are, mc5 and its output are not: 2 x 512
    assert b.shared_tokens == 1024
    assert c.shared_tokens == 0  # mc7 and its output: its own
    assert e.shared_tokens == 1420  # a's history; its own turn and output after it
    assert private.shared_tokens == 0  # no token identity: its own
    assert group.shared_tokens == EVERY_TOKEN  # a sequence group keeps every token


def test_a_block_past_the_shared_tokens_is_keyed_when_its_request_is_preempted():
    # vLLM 0.34.0 keys every full block as it fills (KVCacheManager.cache_blocks); kvsim keys a
    # block that no other request's tokens can match only when its request is preempted:
    # the same hits. 4-token blocks, usable 1..8 (block 0 is the null block).
    alloc = v1_pool()
    r = Request(0, 0.0, 6, 5, 5, token_segments=((("p", 0), 6),))
    other = Request(1, 0.0, 4, 1, 1, token_segments=((("p", 0), 4),))
    note_shared_tokens([r, other])
    assert r.shared_tokens == 6  # the run ("p", 0) is named twice; r's output only by r
    alloc.allocate(r, 6)  # blocks 1 2; block 1 (tokens 0-3) full and shared: keyed
    r.num_computed_tokens = 6
    assert alloc.pool.key_of(1) is not None
    alloc.allocate(r, 9)  # 3 outputs later: block 3; block 2 (tokens 4-7) fills, past token 6
    r.num_computed_tokens, r.num_output_tokens = 9, 3
    assert alloc.pool.key_of(2) is None  # vLLM would have keyed it; nobody else can hit it
    assert alloc.pool.num_cached() == 1
    alloc.free(0, 9)  # preempted with 9 computed tokens: blocks 1 and 2 full, 2 keyed now
    assert alloc.pool.key_of(2) is not None
    # the partial block 3 goes to the front, 2 then 1 to the back (vLLM BlockPool.free_blocks)
    assert alloc.free_block_ids() == [3, 4, 5, 6, 7, 8, 2, 1]
    r.num_computed_tokens, r.num_preemptions = 0, 1
    # re-admitted: (9 - 1) // 4 = 2 blocks looked up, both found, as vLLM finds them
    assert alloc.find_cached_prefix(r).blocks == (1, 2)
    alloc.check_invariants()


def test_without_the_workload_read_every_token_of_a_sharing_stream_counts():
    # A request built alone (no intake) keeps every block keyed as it fills, as vLLM does
    r = Request(0, 0.0, 8, 4, 4, token_segments=((("p", 0), 8),))
    assert r.shared_tokens == EVERY_TOKEN
    assert Request(1, 0.0, 8, 4, 4).shared_tokens == 0


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(st.tuples(st.integers(0, 6), st.integers(1, 40)), min_size=1, max_size=5),
            st.integers(1, 30),
            st.booleans(),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_shared_tokens_match_a_naive_count_of_the_runs(specs):
    # A naive reference: count every run id over all streams (prompt runs, then the output
    # ("gen", id)); a request shares up to the end of its last run counted more than once.
    requests = []
    for rid, (runs, output, private) in enumerate(specs):
        segments = tuple((("s", seg), n) for seg, n in runs)
        prompt = sum(n for _, n in segments)
        requests.append(
            Request(rid, 0.0, prompt, output, output, token_segments=None if private else segments)
        )
    note_shared_tokens(requests)
    streams = {r.req_id: stream_segments(r) for r in requests if r.shares_tokens}
    counts = Counter(seg for stream in streams.values() for seg, _ in stream)
    for r in requests:
        if not r.shares_tokens:
            assert r.shared_tokens == 0
            continue
        end = shared = 0
        for seg, n in streams[r.req_id]:
            end += n
            if counts[seg] > 1:
                shared = end
        assert r.shared_tokens == shared


def test_taking_a_block_vllm_hashed_is_an_eviction_keyed_here_or_not():
    # vLLM 0.34.0 hashes every full block under prefix caching (cache_full_blocks), and taking
    # a hashed block from the free queue evicts it (BlockPool._maybe_evict_cached_block), so
    # a private stream's blocks count too, though kvsim keys them only at a preemption.
    alloc = v1_pool()
    r = Request(0, 0.0, 8, 2, 2)  # private: 8 prompt tokens in blocks 1 and 2
    alloc.allocate(r, 10)  # 8 computed + room for 2 outputs: blocks 1 2 3
    r.num_computed_tokens = 9  # finished after its 2nd output: blocks 1 2 full, 3 not
    alloc.free(0)  # 3 -> front; 2 then 1 -> back: [3 4 5 6 7 8 2 1]
    assert alloc.pool.key_of(1) is None
    assert alloc.pool.key_of(2) is None
    other = Request(1, 0.0, 32, 1, 1)
    alloc.allocate(other, 32)  # all 8 blocks: 3..8 were never full, 2 and 1 were
    assert alloc.prefix_cache_summary()["num_cache_evictions"] == 2
    alloc.check_invariants()
