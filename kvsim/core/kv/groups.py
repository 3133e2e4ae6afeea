"""Sequence groups: parallel samples and beam search sharing KV blocks through reference counts.

A request with ``n`` samples or beam width ``k`` is one *sequence group* of ``w = num_seqs``
sequences of equal length; the scheduler admits, grows and preempts it as a unit and counts ``w``
against ``max_num_seqs``. The allocator does the group's block accounting (``SequenceGroup``):

    prefill  : one root sequence writes the prompt's P tokens into cdiv(P, B) blocks
    fork     : the other w - 1 sequences point at the same blocks (ref count += 1 each)
    append   : writing token t into a block with ref count > 1 copies that one block first
               (copy-on-write, counted with its bytes); a block with ref count 1 is written in
               place, and a full last block means a fresh block
    drop     : a sequence leaving releases every block of its table, tail first

Only a partly filled last block is ever copied, so n samples from a 1,100-token prompt with
16-token blocks share 68 full blocks and hold 4 copies of the 12-token partial block (seed 001).

Beam search moves candidates between steps as ``Request.beam_parents`` says (drawn by the
workload, ``kvsim.workload.beams.BeamModel``).

Under vLLM v0 a preempted group is swapped out (v0 cannot recompute a multi-sequence group).
When the CPU swap space is full, kvsim restarts the group from its prompt instead (counted as a
swap fallback): the root re-prefills the prompt, is forked, and every sequence re-prefills its
own generated tokens (a beam group replays its tree), so it holds exactly what it held before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from kvsim.base.units import cdiv


class BlockSource(Protocol):
    """The pool a group draws blocks from (a real pool, or a counting one for dry runs)."""

    def take_one(self) -> int:
        """A fresh block with ref count 1."""
        ...

    def incref(self, block_id: int) -> None: ...

    def decref(self, block_id: int) -> None: ...

    def ref(self, block_id: int) -> int: ...


@dataclass(slots=True)
class SequenceGroup:
    """Block tables of one request's sequences and their group-local reference counts.

    Attributes:
        block_size_tokens: tokens per block.
        width: sequences in the group.
        seqs: one block table per sequence (physical block ids, logical order).
        local: block id -> table entries of this group pointing at it.
        length: tokens each sequence holds (all equal).
        prefill_tokens: tokens the root wrote before the fork (``P``).
        parents: beam parent table (``BeamModel.parents``), ``None`` for parallel sampling.
        num_copies: copy-on-write copies made so far.
        shared: forks share blocks (copy-on-write); ``False`` copies every block (the unshared
            baseline of the paper's Figure 15).
        moves: per row of ``parents``, whether any candidate changes lineage (derived on first
            use; rows that move nothing skip the branch).
    """

    block_size_tokens: int
    width: int
    seqs: list[list[int]] = field(default_factory=list)
    local: dict[int, int] = field(default_factory=dict)
    length: int = 0
    prefill_tokens: int = 0
    parents: npt.NDArray[np.int64] | None = None
    num_copies: int = 0
    shared: bool = True
    moves: list[bool] | None = None

    @property
    def num_distinct_blocks(self) -> int:
        """Physical blocks this group points at (each counted once)."""
        return len(self.local)

    @property
    def num_shared_blocks(self) -> int:
        """Full prompt blocks shared by every sequence of a non-beam group: ``P // B``."""
        if self.width == 1 or not self.shared:
            return 0
        return self.prefill_tokens // self.block_size_tokens

    @property
    def cow_pending(self) -> bool:
        """The next write copies the shared, partly filled last prompt block (parallel groups)."""
        return (
            self.shared
            and self.width > 1
            and self.length == self.prefill_tokens
            and self.prefill_tokens % self.block_size_tokens != 0
        )

    def start(self, root: list[int], prefill_tokens: int, pool: BlockSource) -> None:
        """Adopt ``root`` (blocks already counted once) as the prompt and fork it ``width`` ways."""
        self.seqs = [root]
        self.length = self.prefill_tokens = prefill_tokens
        for b in root:
            self.local[b] = self.local.get(b, 0) + 1
        for _ in range(self.width - 1):
            self.fork(0, pool)

    # -- primitives -------------------------------------------------------------------------
    def fork(self, src: int, pool: BlockSource) -> int:
        """Append a new sequence sharing every block of sequence ``src`` (or, unshared, holding
        a private copy of each); return its index."""
        self.seqs.append(self._copy_table(self.seqs[src], pool))
        return len(self.seqs) - 1

    def _copy_table(self, src: list[int], pool: BlockSource) -> list[int]:
        if not self.shared:
            return [self._take(pool) for _ in src]
        for b in src:
            pool.incref(b)
            self.local[b] += 1
        return list(src)

    def _take(self, pool: BlockSource) -> int:
        b = pool.take_one()
        self.local[b] = 1
        return b

    def _unref(self, b: int, pool: BlockSource) -> None:
        pool.decref(b)
        left = self.local[b] - 1
        if left:
            self.local[b] = left
        else:
            del self.local[b]

    def append(self, seq: int, position: int, pool: BlockSource) -> None:
        """Write token ``position`` (0-based) of sequence ``seq``: new block, copy, or in place."""
        table = self.seqs[seq]
        if position % self.block_size_tokens == 0:
            table.append(self._take(pool))
        elif pool.ref(table[-1]) > 1:  # shared, partly filled: copy-on-write
            old = table[-1]
            table[-1] = self._take(pool)
            self._unref(old, pool)
            self.num_copies += 1

    def drop(self, seq: int, pool: BlockSource) -> None:
        """Release every block of sequence ``seq``, tail first, and remove it."""
        for b in reversed(self.seqs.pop(seq)):
            self._unref(b, pool)

    def release_all(self, pool: BlockSource) -> None:
        """Drop every sequence (the group finished or was preempted)."""
        while self.seqs:
            self.drop(len(self.seqs) - 1, pool)

    def row_moves(self) -> list[bool]:
        """``moves``, derived from ``parents`` on first use (beam groups only)."""
        if self.moves is None:
            assert self.parents is not None
            self.moves = (self.parents != np.arange(self.width)).any(axis=1).tolist()
        return self.moves

    # -- growth -----------------------------------------------------------------------------
    def advance(self, num_tokens: int, pool: BlockSource) -> None:
        """Grow every sequence to ``num_tokens`` tokens (beam branching between steps)."""
        if self.parents is None:
            self._advance_parallel(num_tokens, pool)
            return
        parents = self.parents
        last = len(parents) - 1
        moves = self.row_moves()
        for position in range(self.length, num_tokens):
            step = min(position - self.prefill_tokens, last + 1)
            if step > 0 and moves[step - 1]:
                self._branch(parents[step - 1], pool)
            for seq in range(self.width):
                self.append(seq, position, pool)
        self.length = max(self.length, num_tokens)

    def _advance_parallel(self, num_tokens: int, pool: BlockSource) -> None:
        if num_tokens <= self.length:
            return
        for seq in range(self.width):  # first write: copy-on-write of a shared partial block
            self.append(seq, self.length, pool)
        want = cdiv(num_tokens, self.block_size_tokens)
        for table in self.seqs:
            while len(table) < want:
                table.append(self._take(pool))
        self.length = num_tokens

    def _branch(self, parents: npt.NDArray[np.int64], pool: BlockSource) -> None:
        """Replace dropped candidates by forks of survivors (``parents[i]`` feeds slot ``i``).

        Only the blocks past the two tables' shared prefix change hands (``shared_prefix``):
        a fork's references to the prefix would be taken and given back at once, leaving every
        count, and the order in which blocks are freed, as they were. Forks are made before the
        dropped paths are released, so shared blocks never hit zero.
        """
        old = self.seqs
        new = list(old)
        cuts: list[tuple[int, int]] = []
        for i, p in enumerate(parents.tolist()):
            if p != i:
                k = shared_prefix(old[i], old[p]) if self.shared else 0
                new[i] = old[p][:k] + self._copy_table(old[p][k:], pool)
                cuts.append((i, k))
        self.seqs = new
        for i, k in cuts:
            for b in reversed(old[i][k:]):
                self._unref(b, pool)


def shared_prefix(a: list[int], b: list[int]) -> int:
    """How many leading blocks two sequences of one group share (binary search).

    Within a group a block keeps its logical index in every table that holds it, and two
    candidates share exactly the blocks written before their lineages split (the partly filled
    one included until the first write copies it), so the shared blocks form a prefix.
    """
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi) // 2
        if a[mid] == b[mid]:
            lo = mid + 1
        else:
            hi = mid
    return lo


class CountingPool:
    """A dry-run ``BlockSource``: copies ref counts and measures the peak of new blocks taken."""

    def __init__(self, refs: dict[int, int]) -> None:
        self.refs = dict(refs)
        self.net = 0
        self.peak = 0
        self._next = -(10**15)  # fresh ids never meet real (>= 0) or fake root (< 0) ids

    def take_one(self) -> int:
        self.net += 1
        self.peak = max(self.peak, self.net)
        b, self._next = self._next, self._next - 1
        self.refs[b] = 1
        return b

    def incref(self, block_id: int) -> None:
        self.refs[block_id] += 1

    def decref(self, block_id: int) -> None:
        self.refs[block_id] -= 1
        if self.refs[block_id] == 0:
            self.net -= 1

    def ref(self, block_id: int) -> int:
        return self.refs[block_id]


def peak_new_blocks(group: SequenceGroup, num_tokens: int, refs: dict[int, int]) -> int:
    """Most free blocks ``group.advance(num_tokens)`` holds at once beyond what it holds now.

    Args:
        refs: current global ref counts of the group's blocks.
    """
    trial = SequenceGroup(
        group.block_size_tokens,
        group.width,
        [list(t) for t in group.seqs],
        dict(group.local),
        group.length,
        group.prefill_tokens,
        group.parents,
        0,
        group.shared,
        group.row_moves() if group.parents is not None else None,
    )
    pool = CountingPool(refs)
    trial.advance(num_tokens, pool)
    return pool.peak
