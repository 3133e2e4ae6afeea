"""Which prompt tokens trace rows share: hash blocks, prefix groups and conversation history.

Token identity is written as ``Request.token_segments`` runs (``kvsim.workload.tokens``); equal runs
are equal tokens. Per request, in order of precedence:

1. ``hash_ids`` with blocks of ``B`` tokens (``B`` other than Mooncake's 512, which
   ``kvsim.workload.tokens`` derives itself): one run ``("mc", h)`` of ``B`` tokens per id.
2. A session turn (``session_id``; turns in arrival order; a first turn names its own prompt
   explicitly, so its blocks are keyed for the next) whose prompt holds the previous turn's
   prompt and output: that history (the previous prompt's runs, then ``("gen", prev_req_id)`` of
   the previous output, as the previous request's own stream names it), then a new run for the
   rest. A turn whose prompt is shorter than its history shares none of it (warned, with a count).
3. A ``prefix_group`` ``g`` with ``prefix_tokens`` ``p``: the run ``("group", g)`` of ``p`` tokens,
   then a run of its own.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

import numpy as np

from kvsim.base.say_once import warn_once
from kvsim.base.units import cdiv
from kvsim.workload.request import Request
from kvsim.workload.spec import WorkloadSpec
from kvsim.workload.tokens import MOONCAKE_BLOCK_SIZE_TOKENS
from kvsim.workload.trace_table import Trace

logger = logging.getLogger(__name__)

Segments = tuple[tuple[object, int], ...]


@dataclass(frozen=True, slots=True)
class RowExtras:
    """Per selected row (aligned with the selection's arrays): the trace's optional columns."""

    session_ids: list[int | None] | None = None
    n: np.ndarray | None = None
    beam_width: np.ndarray | None = None
    prefix_groups: list[str | None] | None = None
    prefix_tokens: np.ndarray | None = None

    def reorder(self, order: np.ndarray) -> RowExtras:
        """The same extras with rows permuted by ``order`` (int64 indices)."""
        picks = order.tolist()
        return RowExtras(
            None if self.session_ids is None else [self.session_ids[i] for i in picks],
            None if self.n is None else self.n[order],
            None if self.beam_width is None else self.beam_width[order],
            None if self.prefix_groups is None else [self.prefix_groups[i] for i in picks],
            None if self.prefix_tokens is None else self.prefix_tokens[order],
        )

    @classmethod
    def of(cls, trace: Trace) -> RowExtras | None:
        """The trace's optional columns for all its rows (``None`` when it has none)."""
        extras = cls(
            None if trace.session_ids is None else list(trace.session_ids),
            trace.n,
            trace.beam_width,
            None if trace.prefix_groups is None else list(trace.prefix_groups),
            trace.prefix_tokens,
        )
        fields = (extras.session_ids, extras.n, extras.beam_width, extras.prefix_groups)
        return None if all(f is None for f in fields) else extras

    def without_sessions(self) -> RowExtras:
        """The same extras with no session ids."""
        return replace(self, session_ids=None)


def session_arrivals(
    session_ids: list[int | None], starts_s: np.ndarray, turn_gap_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """Arrival times of rows grouped in conversations, for synthetic arrivals.

    Conversations (a row outside any is a conversation of its own) start at ``starts_s`` in order
    of their first row; turn ``k`` of a conversation arrives ``k * turn_gap_s`` after its start.

    Args:
        session_ids: per row in file order.
        starts_s: float64[num_starts] start times (s); conversations beyond them are dropped.
        turn_gap_s: seconds between consecutive turns.

    Returns:
        ``(kept, arrival_time_s)``: int64 indices of the rows kept and their arrivals (s).
    """
    unit_of: dict[int, int] = {}
    turns: dict[int, int] = {}
    kept: list[int] = []
    times: list[float] = []
    next_unit = 0
    for row, session in enumerate(session_ids):
        if session is None:
            unit, next_unit = next_unit, next_unit + 1
        elif session not in unit_of:
            unit = unit_of[session] = next_unit
            next_unit += 1
        else:
            unit = unit_of[session]
        turn = turns.get(unit, 0)
        turns[unit] = turn + 1
        if unit < starts_s.size:
            kept.append(row)
            times.append(float(starts_s[unit]) + turn * turn_gap_s)
    return np.asarray(kept, dtype=np.int64), np.asarray(times, dtype=np.float64)


def num_conversations(session_ids: list[int | None]) -> int:
    """Conversations among rows (a row outside any counts as one)."""
    return len({s for s in session_ids if s is not None}) + sum(s is None for s in session_ids)


def attach_identity(
    requests: list[Request],
    extras: RowExtras | None,
    block_size_tokens: int | None,
    source: str,
) -> list[Request]:
    """Set ``token_segments`` (and ``session_id``) of trace requests; rules: module docstring.

    Args:
        requests: sorted by arrival, ``req_id`` 0..N-1.
        extras: the requests' rows' extras, in the requests' order (``None``: none).
        block_size_tokens: tokens per ``hash_ids`` block, ``None`` when the trace has none.
        source: the trace file's name, for the warning.
    """
    sessions = extras.session_ids if extras is not None else None
    groups = extras.prefix_groups if extras is not None else None
    out: list[Request] = []
    last_turn: dict[int, Request] = {}
    short_turns = 0
    for i, req in enumerate(requests):
        session = sessions[i] if sessions is not None else None
        segs = _hash_segments(req, block_size_tokens)
        if segs is None and session is not None and session in last_turn:
            segs = _history(last_turn[session], req)
            short_turns += segs is None
        group = groups[i] if groups is not None else None
        if segs is None and group is not None:
            assert extras is not None
            assert extras.prefix_tokens is not None
            segs = _group_segments(req, group, int(extras.prefix_tokens[i]))
        if segs is None and session is not None:  # a first turn: later turns share its tokens
            segs = _own_segments(req)
        if segs is not None or session is not None:
            req = replace(
                req,
                token_segments=segs if segs is not None else req.token_segments,
                session_id=session if session is not None else req.session_id,
            )
        if session is not None:
            last_turn[session] = req
        out.append(req)
    if short_turns:
        logger.warning(
            "%s: %d turn(s) have a prompt shorter than their conversation's history (previous "
            "prompt + output) and share none of it",
            source,
            short_turns,
        )
    return out


def _group_segments(req: Request, group: str, shared_tokens: int) -> Segments:
    segs: Segments = ((("group", group), shared_tokens),)
    if req.prompt_tokens > shared_tokens:
        segs = (*segs, (("user", req.req_id), req.prompt_tokens - shared_tokens))
    return segs


def _hash_segments(req: Request, block_size_tokens: int | None) -> Segments | None:
    if not req.prefix_hash_ids or block_size_tokens in (None, MOONCAKE_BLOCK_SIZE_TOKENS):
        return None
    return tuple((("mc", h), block_size_tokens) for h in req.prefix_hash_ids)


def _own_segments(req: Request) -> Segments:
    """``req``'s prompt runs as ``kvsim.workload.tokens`` names them, made explicit so that the
    request counts as sharing (``Request.shares_tokens``) and its blocks are keyed for later
    turns."""
    from kvsim.workload.tokens import prompt_segments  # kvsim.workload.tokens imports this package

    return prompt_segments(req)


def _history(prev: Request, req: Request) -> Segments | None:
    """The previous turn's prompt and output as ``req``'s prefix, or ``None`` when ``req``'s
    prompt is shorter than them."""
    from kvsim.workload.tokens import prompt_segments  # kvsim.workload.tokens imports this package

    history_tokens = prev.prompt_tokens + prev.output_tokens
    if req.prompt_tokens < history_tokens:
        return None
    segs: Segments = (*prompt_segments(prev), (("gen", prev.req_id), prev.output_tokens))
    if req.prompt_tokens > history_tokens:
        segs = (*segs, (("turn", req.req_id), req.prompt_tokens - history_tokens))
    return segs


def count_hash_mismatches(trace: Trace, block_size_tokens: int) -> int:
    """Rows whose ``hash_ids`` do not number ``cdiv(prompt_tokens, block_size_tokens)`` blocks
    (an empty list included; a row without ``hash_ids`` names none and is not counted)."""
    if trace.prefix_hash_ids is None:
        return 0
    return sum(
        1
        for ids, prompt in zip(trace.prefix_hash_ids, trace.prompt_tokens.tolist(), strict=True)
        if ids is not None and len(ids) != cdiv(prompt, block_size_tokens)
    )


def check_trace_columns(spec: WorkloadSpec, trace: Trace) -> None:
    """A trace's own ``n``/``beam_width`` and ``hash_ids`` agree with the spec.

    Raises:
        ValueError: ``n``/``beam_width`` set both per row and in the spec, or ``hash_ids``
            without a known block size.
    """
    if (trace.n is not None or trace.beam_width is not None) and (
        spec.n > 1 or spec.beam_width > 1
    ):
        raise ValueError(
            f"workload.n = {spec.n}, workload.beam_width = {spec.beam_width}: {trace.path} "
            "gives n / beam_width per row; leave the workload's at 1"
        )
    hashes = trace.prefix_hash_ids
    if hashes is None or all(ids is None for ids in hashes):
        return
    block = spec.hash_block_size_tokens or trace.hash_block_size_tokens
    if block is None:
        if not any(hashes):  # empty lists only: no block to size, none to check
            return
        raise ValueError(
            f"workload.hash_block_size_tokens: {trace.path} has hash_ids; give the tokens "
            "per hash block (Mooncake 512, Qwen-Bailian 16), got none"
        )
    mismatched = count_hash_mismatches(trace, block)
    if mismatched:
        warn_once(
            logger,
            "%s: %d of %d rows have a number of hash_ids other than cdiv(prompt tokens, %d); "
            "their prompts are cut or padded to their length",
            trace.path,
            mismatched,
            trace.num_rows,
            block,
        )
