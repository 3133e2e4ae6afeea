"""Block keys against the token streams they name: two blocks get equal keys exactly when their
whole prefixes are equal tokens, however the streams cut their runs and however far the keys
were extended at a time."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.workload.tokens import KeyChain, StreamKeys

# runs drawn from a few ids, so streams share runs, cut them at different lengths (a copy of a
# run is its first tokens: token t of run s is (s, t)) and hold empty ones
RUN = st.tuples(st.sampled_from(["a", "b", "c", ("mc", 1), ("mc", 2)]), st.integers(0, 40))
STREAM = st.lists(RUN, min_size=1, max_size=6)


def _tokens(segments: list[tuple[object, int]]) -> list[tuple[object, int]]:
    return [(seg, t) for seg, length in segments for t in range(length)]


def _keys_in_steps(keys: StreamKeys, num_blocks: int, steps: list[int]) -> list[int]:
    """Extend ``keys`` a few blocks at a time (as decode steps and prefill chunks do)."""
    done = 0
    for step in steps:
        done = min(num_blocks, done + step)
        keys.keys(done)
    return keys.keys(num_blocks)


@settings(max_examples=300, deadline=None)
@given(
    streams=st.lists(STREAM, min_size=2, max_size=4),
    block=st.sampled_from([1, 3, 4, 8, 16]),
    steps=st.lists(st.integers(1, 12), max_size=6),
)
def test_equal_keys_exactly_for_equal_prefixes(streams, block, steps) -> None:
    chain = KeyChain()
    named: dict[int, tuple[tuple[object, int], ...]] = {}  # key -> the prefix it names
    for i, segments in enumerate(streams):
        tokens = _tokens(segments)
        num_blocks = len(tokens) // block
        whole = chain.block_keys(segments, num_blocks, block)
        stepped = _keys_in_steps(StreamKeys(chain, segments, block), num_blocks, steps)
        assert stepped == whole, f"stream {i}: keys depend on how far they were extended"
        for b, key in enumerate(whole):
            prefix = tuple(tokens[: (b + 1) * block])
            assert named.setdefault(key, prefix) == prefix, f"stream {i} block {b}: collision"
    # and equal prefixes did get one key: the map's values are distinct prefixes
    assert len(set(named.values())) == len(named)


def test_a_run_cut_at_a_block_boundary_keys_as_its_longer_copy() -> None:
    # 32 tokens of run "s" then output vs 48 tokens of "s": blocks 0 and 1 hold the same tokens
    chain = KeyChain()
    short = chain.block_keys([("s", 32), ("gen", 16)], 3, 16)
    long = chain.block_keys([("s", 48)], 3, 16)
    assert short[:2] == long[:2]
    assert short[2] != long[2]


def test_an_empty_run_changes_no_key() -> None:
    chain = KeyChain()
    with_empty = chain.block_keys([("a", 10), ("b", 0), ("c", 10)], 2, 8)
    assert with_empty == chain.block_keys([("a", 10), ("c", 10)], 2, 8)


@settings(max_examples=200, deadline=None)
@given(
    tag=st.sampled_from(["mc", "gen", "user"]),
    value=st.integers(0, 2**62),
    first=st.sampled_from(["int", "bool_or_numpy", "nested"]),
)
def test_an_id_interns_to_one_int_however_its_int_is_typed(tag, value, first) -> None:
    import numpy as np

    # ("mc", 7) is interned by a shortcut for (str, int) ids; a bool or numpy int, equal to
    # the int, goes the general way: equal ids, one int, whichever shape was seen first
    chain = KeyChain()
    if first == "bool_or_numpy":
        chain.intern((tag, np.int64(0)))
    elif first == "nested":
        chain.intern(((tag, 0), 0))  # another shape numbered first
    plain = chain.intern((tag, value))
    assert plain == chain.intern((tag, np.int64(value)))
    if value in (0, 1):
        assert plain == chain.intern((tag, bool(value)))
    assert plain != chain.intern((tag, value + 1))
    assert plain != chain.intern((tag + "x", value))
    assert plain != chain.intern(((tag, value), 0))


@settings(max_examples=300, deadline=None)
@given(
    streams=st.lists(STREAM, min_size=2, max_size=4),
    block=st.sampled_from([1, 3, 4, 8, 16]),
    lookahead=st.integers(1, 20),
    steps=st.lists(st.integers(1, 12), max_size=6),
)
def test_lookahead_keys_name_the_tokens_past_their_block(streams, block, lookahead, steps) -> None:
    # vLLM's num_hash_lookahead_tokens = L: block b's key covers its prefix and the L tokens
    # after it, so equal keys exactly for equal first (b + 1) * block + L tokens, and a stream
    # of n tokens keys (n - L) // block blocks
    chain = KeyChain()
    named: dict[int, tuple[tuple[object, int], ...]] = {}
    for i, segments in enumerate(streams):
        tokens = _tokens(segments)
        num_blocks = max(0, len(tokens) - lookahead) // block
        whole = chain.block_keys(segments, num_blocks, block, lookahead_tokens=lookahead)
        stepped = _keys_in_steps(
            StreamKeys(chain, segments, block, lookahead_tokens=lookahead), num_blocks, steps
        )
        assert stepped == whole, f"stream {i}: keys depend on how far they were extended"
        for b, key in enumerate(whole):
            prefix = tuple(tokens[: (b + 1) * block + lookahead])
            assert named.setdefault(key, prefix) == prefix, f"stream {i} block {b}: collision"
    assert len(set(named.values())) == len(named)


def test_two_prompts_parting_at_a_block_boundary_share_one_block_less_with_lookahead() -> None:
    # 32 tokens of "s" then different runs: blocks 0 and 1 (tokens 0-31) are the same tokens;
    # with L = 1 block 1's key also covers token 32, which differs, so only block 0 is shared
    chain = KeyChain()
    a, b = [("s", 32), ("x", 16)], [("s", 32), ("y", 16)]
    assert chain.block_keys(a, 2, 16)[:2] == chain.block_keys(b, 2, 16)[:2]
    ahead_a = chain.block_keys(a, 2, 16, lookahead_tokens=1)
    ahead_b = chain.block_keys(b, 2, 16, lookahead_tokens=1)
    assert ahead_a[0] == ahead_b[0]
    assert ahead_a[1] != ahead_b[1]
    # and a lookahead key is never a plain one: block 0 + 1 token is not block 0
    assert ahead_a[0] != chain.block_keys(a, 1, 16)[0]
