"""Beam groups' two shortcuts against the plain rules they replace.

- ``SequenceGroup._branch`` moves only the blocks past two tables' shared prefix; the plain rule
  gives every forked slot a reference to each block of its parent's table, then drops each
  block of the displaced table, tail first. Both must leave the same tables, group-local and
  pool reference counts, copies, and blocks taken and freed in the same order.
- ``PagedAllocator`` skips the exact dry run of a beam group's growth when ``width`` blocks per
  token fit; the dry run's peak must never exceed that bound.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.core.kv.groups import SequenceGroup, peak_new_blocks, shared_prefix
from kvsim.workload.beams import BeamModel


class RecordingPool:
    """Reference counts with a FIFO free queue (freed ids are reused in order), logging every
    take and every block whose count reaches zero."""

    def __init__(self) -> None:
        self.refs: dict[int, int] = {}
        self.free: list[int] = []
        self.next_id = 0
        self.log: list[tuple[str, int]] = []

    def take_one(self) -> int:
        if self.free:
            block = self.free.pop(0)
        else:
            block, self.next_id = self.next_id, self.next_id + 1
        self.refs[block] = 1
        self.log.append(("take", block))
        return block

    def incref(self, block_id: int) -> None:
        self.refs[block_id] += 1

    def decref(self, block_id: int) -> None:
        self.refs[block_id] -= 1
        if self.refs[block_id] == 0:
            del self.refs[block_id]
            self.free.append(block_id)
            self.log.append(("free", block_id))

    def ref(self, block_id: int) -> int:
        return self.refs[block_id]


def plain_branch(group: SequenceGroup, parents: np.ndarray, pool: RecordingPool) -> None:
    """The rule without the shortcut, written out on the group's fields: every forked slot
    first refers to each block of its parent's table (or, unshared, gets a fresh copy of each),
    then every displaced table gives up each of its blocks, tail first."""
    old = group.seqs
    rows = [int(p) for p in parents]
    new = []
    for i, p in enumerate(rows):
        if p == i:
            new.append(old[i])
        elif group.shared:
            for block in old[p]:
                pool.incref(block)
                group.local[block] += 1
            new.append(list(old[p]))
        else:
            copies = [pool.take_one() for _ in old[p]]
            group.local.update(dict.fromkeys(copies, 1))
            new.append(copies)
    group.seqs = new
    for i, p in enumerate(rows):
        if p != i:
            for block in reversed(old[i]):
                pool.decref(block)
                group.local[block] -= 1
                if group.local[block] == 0:
                    del group.local[block]


def _started(
    width: int, block: int, prompt: int, shared: bool
) -> tuple[SequenceGroup, RecordingPool]:
    pool = RecordingPool()
    group = SequenceGroup(block, width, shared=shared)
    group.start([pool.take_one() for _ in range(-(prompt // -block))], prompt, pool)
    return group, pool


@settings(max_examples=150, deadline=None)
@given(
    width=st.integers(2, 7),
    block=st.integers(1, 9),
    prompt=st.integers(1, 30),
    output=st.integers(1, 120),
    branch_tokens=st.floats(0.0, 60.0),
    seed=st.integers(0, 2**16),
    shared=st.booleans(),
)
def test_branch_matches_the_plain_rule(width, block, prompt, output, branch_tokens, seed, shared):
    parents = BeamModel(branch_tokens, seed).parents(seed, width, output, prompt)
    fast, fast_pool = _started(width, block, prompt, shared)
    plain, plain_pool = _started(width, block, prompt, shared)
    for step, position in enumerate(range(prompt, prompt + output)):
        if step > 0 and (parents[step - 1] != np.arange(width)).any():
            fast._branch(parents[step - 1], fast_pool)
            plain_branch(plain, parents[step - 1], plain_pool)
        for seq in range(width):
            fast.append(seq, position, fast_pool)
            plain.append(seq, position, plain_pool)
        assert fast.seqs == plain.seqs
        assert fast.local == plain.local
        assert fast_pool.refs == plain_pool.refs
        assert fast_pool.log == plain_pool.log
        assert fast.num_copies == plain.num_copies
        if shared:  # what the binary search relies on: shared blocks form a prefix
            for a in fast.seqs:
                for b in fast.seqs:
                    k = shared_prefix(a, b)
                    assert a[:k] == b[:k]
                    assert all(x != y for x, y in zip(a[k:], b[k:], strict=True))


def test_shared_prefix_by_hand():
    assert shared_prefix([], []) == 0
    assert shared_prefix([1, 2, 3], [1, 2, 3]) == 3
    assert shared_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert shared_prefix([1, 2, 3], [5, 6, 7]) == 0
    assert shared_prefix([1, 2], [1, 2, 9]) == 2


@settings(max_examples=150, deadline=None)
@given(
    width=st.integers(2, 7),
    block=st.integers(1, 9),
    prompt=st.integers(1, 30),
    grown=st.integers(0, 60),
    more=st.integers(1, 40),
    branch_tokens=st.floats(0.0, 60.0),
    seed=st.integers(0, 2**16),
)
def test_beam_growth_takes_at_most_width_blocks_per_token(
    width, block, prompt, grown, more, branch_tokens, seed
):
    """The bound behind the skipped dry run, checked by the dry run itself (``peak_new_blocks``)
    from a group part-way through its output."""
    group, pool = _started(width, block, prompt, shared=True)
    group.parents = BeamModel(branch_tokens, seed).parents(seed, width, grown + more, prompt)
    group.advance(prompt + grown, pool)
    peak = peak_new_blocks(group, prompt + grown + more, dict(pool.refs))
    assert 0 <= peak <= width * more
