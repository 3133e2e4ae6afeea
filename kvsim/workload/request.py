"""A request as the scheduler sees it: its true sizes from the workload plus its serving state.

``RequestSpec`` is the workload's part alone (frozen): what a trace row or a generator fixes.
A run serves fresh ``Request`` objects made from specs (``RequestSpec.new_request``), so one
workload can be replayed into any number of runs; ``Request.spec`` gives a request's spec back.

Requests are plain records, not SimPy processes. They follow vLLM's token accounting
(``vllm/v1/request.py``): a request knows ``num_tokens = prompt_tokens + num_output_tokens`` tokens
and has computed the KV of ``num_computed_tokens`` of them. A step computes some of the rest (a
prefill chunk, or the one token sampled by the previous step); a token is sampled when the computed
tokens reach ``num_tokens``. The last sampled token is never computed: the request finishes and
frees its KV in the step that samples it. So a request of ``P`` prompt and ``O`` output tokens
writes at most ``P + O - 1`` KV slots (``final_kv_tokens``), and holds ``cdiv(P, B)`` blocks
after its prefill step (the paper's Fig. 6: a 7-token prompt in 4-token blocks holds 2, 2 and 3
blocks after the prefill, the first and the second decode step).
"""

from __future__ import annotations

import numbers
import operator
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from kvsim.base.units import SimTime

EVERY_TOKEN: Final = (
    2**62
)  # ``Request.shared_tokens`` of a stream any of whose tokens may be shared


@dataclass(frozen=True, eq=False)
class RequestSpec:
    """The fixed facts of one request of a workload (no serving state).

    Attributes: as ``Request``'s first thirteen (``req_id`` .. ``parent_id``); sizes in tokens,
    ``arrival_time_s`` in simulated seconds. ``beam_parents`` is int64[output_tokens,
    beam_width] or ``None`` and is shared, never written, by the requests made from the spec.
    """

    req_id: int
    arrival_time_s: SimTime
    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    prefix_hash_ids: tuple[int, ...] | None = None
    session_id: int | None = None
    n: int = 1
    beam_width: int = 1
    token_segments: tuple[tuple[object, int], ...] | None = None
    cache_salt: str | None = None
    beam_parents: npt.NDArray[np.int64] | None = None
    parent_id: int | None = None

    def new_request(self) -> Request:
        """A ``Request`` with these facts and the state of one not yet arrived."""
        return Request(*_spec_values(self))


@dataclass(slots=True, eq=False)
class Request:
    """One request of a workload and its serving state.

    Attributes:
        req_id: unique id, also the FCFS tie-breaker.
        arrival_time_s: arrival time in simulated seconds.
        prompt_tokens: prompt length in tokens (>= 1).
        output_tokens: true number of tokens the request generates (>= 1), after the
            ``max_tokens`` cap; unknown to a real scheduler, known to the Oracle reservation.
        max_tokens: the client's output cap in tokens (>= output_tokens).
        prefix_hash_ids: optional ids of shared prefix blocks (Mooncake ``hash_ids``).
        session_id: optional conversation id (multi-turn workloads).
        n: parallel samples of the prompt (vLLM ``SamplingParams.n``, >= 1).
        beam_width: beam-search width (>= 1; 1 means no beam search). Under the ``vllm-v0``
            profile a request is a sequence group of ``num_seqs = max(n, beam_width)`` sequences
            of equal length, scheduled and preempted as a unit (``kvsim.core.kv.groups``).
        token_segments: optional identity of the prompt's tokens as ``(segment_id, num_tokens)``
            runs (``kvsim.workload.tokens``); equal runs mean equal tokens. ``None``: derived from
            ``prefix_hash_ids`` when set, else a prompt unique to this request.
        cache_salt: optional tenant salt; prefixes with different salts never share KV.
        beam_parents: int64[output_tokens, beam_width] parent candidate of each beam candidate
            after each step (``kvsim.workload.beams.BeamModel``, drawn by the workload), or
            ``None``.
        parent_id: for a sample fanned out of an ``n > 1`` request (vLLM v1), the parent's id.
        num_computed_tokens: tokens whose KV is computed (0 while waiting or after preemption).
        num_output_tokens: output tokens sampled so far (kept across recompute preemption).
        num_held_slots: KV slots the allocator holds for it (the scheduler's cached copy of
            ``Allocator.held_slots``, refreshed after every allocation; 0 while waiting).
        num_preemptions: times this request was preempted.
        num_loads_dropped: times the blocks of its CPU-tier load were freed before it ran
            (``Engine._drop_parked``).
        num_cached_tokens: prompt tokens found in the prefix cache at its first admission.
        num_prefill_tokens_computed: prompt and recomputed tokens its prefills computed (cache
            hits excluded), summed over admissions.
        num_draft_tokens: speculative drafts proposed for its next step (vLLM's
            ``spec_token_ids``; ``kvsim.core.scheduler.spec``), 0 without speculative decoding.
        num_verifying_drafts: speculative drafts the step being run verifies (vLLM's
            ``scheduled_spec_decode_tokens``; ``StepPlan.add_verify``), 0 when it verifies none.
        verifies_placeholders: those drafts are placeholders no model proposed (a new request
            padded to the verification size), all rejected.
        num_draft_outputs: output tokens beyond one a step: accepted drafts that came with a
            verification's sampled token (kept across recompute preemption), so its output
            steps are ``num_output_tokens - num_draft_outputs``, vLLM's inter-token latency
            observations one fewer (one a step's output, ``IterationStats``). Where
            ``max_tokens`` cuts a verification short, every token it kept is counted a draft
            but one, the step's own: vLLM keeps the first tokens generated, so it counts one
            more of them a draft where the cut leaves no sampled token (its
            ``spec_decode_num_accepted_tokens`` are the summary's, not this column's).
        first_scheduled_time_s: start of the first step that scheduled it (seconds).
        first_token_time_s: end of the step that sampled its first output token.
        finish_time_s: end of the step that sampled its last output token.
        num_seqs: sequences of the group, ``max(n, beam_width)`` (1 for a plain request).
        shares_tokens: other requests may hold some of its tokens (it has ``token_segments`` or
            ``prefix_hash_ids``); a request without is the only one that names its tokens.
        shared_tokens: leading tokens of its stream (prompt, then output) that another request
            may also hold; a block past them is keyed by no other request's tokens. 0 for a
            private stream, else every token (``EVERY_TOKEN``) until
            ``kvsim.workload.tokens.note_shared_tokens`` has read the whole workload.
    """

    req_id: int
    arrival_time_s: SimTime
    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    prefix_hash_ids: tuple[int, ...] | None = None
    session_id: int | None = None
    n: int = 1
    beam_width: int = 1
    token_segments: tuple[tuple[object, int], ...] | None = None
    cache_salt: str | None = None
    beam_parents: npt.NDArray[np.int64] | None = None
    parent_id: int | None = None
    num_computed_tokens: int = 0
    num_output_tokens: int = 0
    num_held_slots: int = 0
    num_preemptions: int = 0
    num_loads_dropped: int = 0
    num_cached_tokens: int = 0
    num_prefill_tokens_computed: int = 0
    num_draft_tokens: int = 0
    num_verifying_drafts: int = 0
    verifies_placeholders: bool = False
    num_draft_outputs: int = 0
    first_scheduled_time_s: SimTime | None = None
    first_token_time_s: SimTime | None = None
    finish_time_s: SimTime | None = None
    num_seqs: int = field(init=False, default=1)
    shares_tokens: bool = field(init=False, default=False)
    shared_tokens: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        # plain attributes because the scheduler reads them every step
        self.num_seqs = max(self.n, self.beam_width)
        self.shares_tokens = self.token_segments is not None or bool(self.prefix_hash_ids)
        self.shared_tokens = EVERY_TOKEN if self.shares_tokens else 0

    @property
    def spec(self) -> RequestSpec:
        """The workload's facts of this request, without its serving state."""
        return RequestSpec(*_spec_values(self))

    @property
    def readmitted(self) -> bool:
        """Whether its next admission is a re-admission: it was preempted, or its blocks were
        freed before it ran. Its first admission's prefix-cache lookup counted already; a
        re-admission's counts apart (vLLM 0.34.0 ``PrefixCacheStats.record``'s ``preempted``)."""
        return self.num_preemptions > 0 or self.num_loads_dropped > 0

    @property
    def num_tokens(self) -> int:
        """Tokens the request knows: prompt + outputs sampled so far (vLLM ``num_tokens``)."""
        return self.prompt_tokens + self.num_output_tokens

    @property
    def final_tokens(self) -> int:
        """Prompt + true output tokens (what ``max_model_len`` bounds)."""
        return self.prompt_tokens + self.output_tokens

    @property
    def final_kv_tokens(self) -> int:
        """KV slots the request ever writes: ``prompt + output - 1`` (the last token is never
        computed). The ``F`` of DESIGN.md's accounting rule."""
        return self.prompt_tokens + self.output_tokens - 1

    @property
    def is_finished(self) -> bool:
        return self.finish_time_s is not None


SPEC_FIELDS: tuple[str, ...] = tuple(RequestSpec.__dataclass_fields__)
_spec_values = attrgetter(*SPEC_FIELDS)  # a request's or spec's facts, in SPEC_FIELDS order


def fresh_requests(requests: Sequence[Request | RequestSpec]) -> list[Request]:
    """New ``Request`` objects (no serving state) for a workload given as requests or specs:
    a run never inherits, nor leaves behind, another run's state. NumPy numbers among their
    facts become Python ints and floats (a caller's array values): counters summed from them
    stay exact at any size and times stay float64, as generated workloads have them.

    Raises:
        ValueError: two requests share a ``req_id``.
    """
    out = [Request(*_plain_facts(r)) for r in requests]  # no RequestSpec between
    seen: set[int] = set()
    for r in out:
        if r.req_id in seen:
            raise ValueError(f"requests: req_id {r.req_id} appears more than once (ids are unique)")
        seen.add(r.req_id)
    return out


_HASH_IDS = SPEC_FIELDS.index("prefix_hash_ids")
_SEGMENTS = SPEC_FIELDS.index("token_segments")


def _plain_facts(spec: Request | RequestSpec) -> list[Any]:
    """A request's facts in ``SPEC_FIELDS`` order as Python numbers, the hash ids and segment
    lengths inside their tuples too (a caller's arrays or lists). The compiled engine
    (``kvsim.native``) reads them as the annotated types."""
    values = [_plain(value) for value in _spec_values(spec)]
    if values[_HASH_IDS] is not None:
        values[_HASH_IDS] = tuple(operator.index(h) for h in values[_HASH_IDS])
    if values[_SEGMENTS] is not None:
        values[_SEGMENTS] = tuple(
            (_plain(segment), operator.index(length)) for segment, length in values[_SEGMENTS]
        )
    return values


_PLAIN_TYPES = frozenset({int, float, str, tuple, type(None)})


def _plain(value: Any) -> Any:
    """NumPy numbers as Python ones; other non-float reals (``Fraction``) as floats."""
    if type(value) in _PLAIN_TYPES:  # nearly every value: skip the checks (1 M requests)
        return value
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating) or (
        isinstance(value, numbers.Real) and not isinstance(value, int | float)
    ):
        return float(value)
    return value
