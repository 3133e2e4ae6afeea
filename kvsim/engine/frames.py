"""The physical KV pool at chosen moments of a run: who owns which slot range (memory-map frames).

``pool_ownership`` reads an allocator's ownership: a contiguous allocator's slabs
(``SlabAllocator.slabs_of``), a paged allocator's block tables (``PagedAllocator.block_tables``
and its groups' tables) or a hybrid pool's table per KV cache group
(``HybridPagedAllocator.tables``; a slot there is one token of one group); a block shared by
several sequences, requests or groups once. The engine
captures frames during the run that produces the results (``simulate(map_at_s=..,
map_every_s=..)``): a fast-forwarded span is cut so that the pool is read during the step in
flight at the frame's moment, with the token counts the recorder uses.

    mapframes: frame, req_id, start_slot, num_slots, num_tokens       (one row per slab/block)
    frames:    frame, time_s, num_requests_running, num_requests_waiting, head_need_slots,
               waiting_req_ids (the queue, front first)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

from kvsim.base.units import SimTime
from kvsim.core.kv.hybrid import HybridPagedAllocator
from kvsim.core.kv.paged import PagedAllocator
from kvsim.core.kv.slab import SlabAllocator

if TYPE_CHECKING:
    import pandas as pd

SNAPSHOT_COLUMNS = ("req_id", "start_slot", "num_slots", "num_tokens")
MAPFRAME_COLUMNS = ("frame", *SNAPSHOT_COLUMNS)
FRAME_COLUMNS = (
    "frame",
    "time_s",
    "num_requests_running",
    "num_requests_waiting",
    "head_need_slots",
    "waiting_req_ids",
)


def ownership_rows(allocator: Any, tokens: dict[int, int]) -> list[tuple[int, int, int, int]]:
    """``(req_id, start_slot, num_slots, num_tokens)`` of every slab or block in use.

    Args:
        allocator: a ``SlabAllocator``, ``PagedAllocator`` or ``HybridPagedAllocator`` (other
            policies have no map).
        tokens: req_id -> token states it holds now.
    """
    rows: list[tuple[int, int, int, int]] = []
    if isinstance(allocator, HybridPagedAllocator):
        rows = hybrid_ownership_rows(allocator, tokens)
    elif isinstance(allocator, PagedAllocator):
        b = allocator.block_size_tokens
        tables = list(allocator.block_tables.items())
        tables += [(rid, t) for rid, g in allocator.groups.items() for t in g.seqs]
        seen: set[int] = set()
        for req_id, table in tables:
            n = tokens.get(req_id, 0)
            for i, block_id in enumerate(table):
                if block_id not in seen:  # a block shared by sequences or requests: once
                    seen.add(block_id)
                    rows.append((req_id, block_id * b, b, min(max(n - i * b, 0), b)))
    elif isinstance(allocator, SlabAllocator):
        for req_id in sorted(tokens):
            for start, size in allocator.slabs_of(req_id):
                rows.append((req_id, start, size, min(tokens[req_id], size)))
    else:
        raise TypeError(f"no memory map for allocator {type(allocator).__name__}")
    return rows


def hybrid_ownership_rows(
    allocator: HybridPagedAllocator, tokens: dict[int, int]
) -> list[tuple[int, int, int, int]]:
    """``ownership_rows`` of a hybrid pool: each group's table in turn, skipping the null
    block (a sliding group's entries behind the window). Entry ``i`` of a full or sliding
    group's table holds positions ``[i B, (i + 1) B)``; a state group's one block is token
    states whole (``HybridPagedAllocator.kind_slots`` counts it so)."""
    b, null = allocator.block_size_tokens, allocator.null_block
    rows: list[tuple[int, int, int, int]] = []
    seen: set[int] = set()
    for req_id, tables in allocator.tables.items():
        n = tokens.get(req_id, 0)
        for kind, table in zip(allocator.kinds, tables, strict=True):
            for i, block_id in enumerate(table):
                if block_id == null or block_id in seen:  # shared by requests: once
                    continue
                seen.add(block_id)
                live = b if kind == "state" else min(max(n - i * b, 0), b)
                rows.append((req_id, block_id * b, b, live))
    return rows


def pool_ownership(allocator: Any, tokens: dict[int, int]) -> pd.DataFrame:
    """``ownership_rows`` as a DataFrame (``SNAPSHOT_COLUMNS``), sorted by ``start_slot``."""
    import pandas as pd  # only when a map is asked for

    rows = ownership_rows(allocator, tokens)
    frame = pd.DataFrame(rows, columns=list(SNAPSHOT_COLUMNS), dtype=np.int64)
    return frame.sort_values("start_slot", ignore_index=True)


def has_map(allocator: Any) -> bool:
    """Whether ``allocator`` has a physical memory map (slabs or blocks)."""
    # (mypyc: not a union)
    return isinstance(allocator, (PagedAllocator, SlabAllocator, HybridPagedAllocator))


_SKIP: Final = -1  # a periodic moment thinned out after it fell due


class FrameRecorder:
    """Collects memory-map frames while the engine runs (see the module docstring).

    Args:
        at_s: moments to capture, simulated seconds (always kept).
        every_s: also capture every this many seconds from 0 until the run ends.
        max_every_frames: keep at most this many of the periodic frames: past it, every other
            one is dropped and the period doubles, so a long run keeps between half and all of
            this many, evenly spaced over the whole run (``None``: no bound).

    Raises:
        ValueError: ``every_s`` not positive, or ``max_every_frames`` below 2.
    """

    def __init__(
        self,
        at_s: Sequence[float] = (),
        every_s: float | None = None,
        max_every_frames: int | None = None,
    ) -> None:
        if every_s is not None and not every_s > 0:
            raise ValueError(f"map_every_s: must be > 0 seconds, got {every_s}")
        if max_every_frames is not None and max_every_frames < 2:
            raise ValueError(f"map_max_frames: must be >= 2, got {max_every_frames}")
        self.pending = sorted(float(t) for t in at_s)
        self.every_s = every_s
        self.max_every_frames = max_every_frames
        self._next_every = 0.0 if every_s is not None else None
        self._next_index = 0  # index of _next_every on the periodic grid
        self._index_of: dict[float, int] = {}  # periodic moments due, not yet captured
        # per frame: periodic index (None: an at_s moment), its rows int64[n, 4] by start slot,
        # and its meta after the frame number
        self._frames: list[tuple[int | None, npt.NDArray[np.int64], tuple[Any, ...]]] = []
        self._num_every = 0

    def next_time(self) -> float | None:
        """The next moment to capture, or ``None``."""
        times = self.pending[:1]
        if self._next_every is not None:
            times.append(self._next_every)
        return min(times) if times else None

    def pop_due(self, until_s: float) -> list[float]:
        """Moments before ``until_s``, removed from the schedule."""
        due: list[float] = []
        while self.pending and self.pending[0] < until_s:
            due.append(self.pending.pop(0))
        while self._next_every is not None and self._next_every < until_s:
            if self._next_every not in due:  # (an at_s moment on the grid is kept as such)
                self._index_of[self._next_every] = self._next_index
            due.append(self._next_every)
            assert self.every_s is not None
            self._next_every += self.every_s
            self._next_index += 1
        return sorted(set(due))

    def capture(
        self,
        time_s: SimTime,
        allocator: Any,
        tokens: dict[int, int],
        num_running: int,
        waiting: Sequence[int],
        head_need_slots: int,
    ) -> None:
        """Record the pool at ``time_s`` (``tokens``: req_id -> token states then)."""
        index = self._index_of.pop(time_s, None)
        if index == _SKIP:
            return
        rows = np.array(ownership_rows(allocator, tokens), dtype=np.int64).reshape(-1, 4)
        rows = rows[np.argsort(rows[:, 1], kind="stable")]  # by start slot (each slot once)
        meta = (time_s, num_running, len(waiting), head_need_slots, list(waiting))
        self._frames.append((index, rows, meta))
        if index is not None:
            self._num_every += 1
            if self.max_every_frames is not None and self._num_every > self.max_every_frames:
                self._thin()

    def _thin(self) -> None:
        """Drop the periodic frames at odd grid indices and double the period."""
        assert self.every_s is not None
        assert self._next_every is not None
        kept = [f for f in self._frames if f[0] is None or f[0] % 2 == 0]
        self._frames = [(None if i is None else i // 2, r, m) for i, r, m in kept]
        self._num_every = sum(f[0] is not None for f in self._frames)
        if self._next_index % 2:  # the next moment would be an odd one: skip to the even one
            self._next_every += self.every_s
            self._next_index += 1
        self._next_index //= 2
        self.every_s *= 2
        # moments already due but not captured yet: the odd ones are skipped when they come
        self._index_of = {t: i // 2 if i % 2 == 0 else _SKIP for t, i in self._index_of.items()}

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """``(mapframes, frames)`` tables (``MAPFRAME_COLUMNS``, ``FRAME_COLUMNS``)."""
        import pandas as pd  # only when a map is asked for

        columns = list(MAPFRAME_COLUMNS)
        parts = [
            np.column_stack([np.full(len(rows), frame, np.int64), rows])
            for frame, (_, rows, _) in enumerate(self._frames)
        ]
        data = np.concatenate(parts) if parts else np.empty((0, len(columns)), np.int64)
        rows = pd.DataFrame(data, columns=columns)  # frames in order, each by start slot
        meta = pd.DataFrame(
            [(frame, *m) for frame, (_, _, m) in enumerate(self._frames)],
            columns=list(FRAME_COLUMNS),
        )
        return rows, meta
