"""A request as the scheduler sees it: its true sizes from the workload plus its serving state.

Requests are plain records, not SimPy processes. A generated token holds a KV slot from the step
that samples it, so a request with ``prompt_tokens`` P and ``output_tokens`` O ends holding
``P + O`` token states (the paper's accounting: token states = prompt + generated; the seed's
"40 + 1,000 tokens -> 65 blocks").
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
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
        beam_width: beam-search width (>= 1; 1 means no beam search). A request is a sequence
            group of ``num_seqs = max(n, beam_width)`` sequences of equal length, scheduled and
            preempted as a unit (``kvsim.groups``).
        token_segments: optional identity of the prompt's tokens as ``(segment_id, num_tokens)``
            runs (``kvsim.tokens``); equal runs mean equal tokens. ``None``: derived from
            ``prefix_hash_ids`` when set, else a prompt unique to this request.
        cache_salt: optional tenant salt; prefixes with different salts never share KV.
        num_computed_tokens: token states currently held in KV (0 while waiting).
        num_held_slots: KV slots the allocator holds for it (the scheduler's cached copy of
            ``Allocator.held_slots``, refreshed after every allocation; 0 while waiting).
        num_generated_tokens: output tokens sampled so far (survives recompute preemption).
        num_preemptions: times this request was preempted.
        num_seqs: sequences of the group, ``max(n, beam_width)`` (1 for a plain request); set at
            construction.
    """

    req_id: int
    arrival_time_s: float
    prompt_tokens: int
    output_tokens: int
    max_tokens: int
    prefix_hash_ids: tuple[int, ...] | None = None
    session_id: int | None = None
    n: int = 1
    beam_width: int = 1
    token_segments: tuple[tuple[object, int], ...] | None = None
    cache_salt: str | None = None
    num_computed_tokens: int = 0
    num_held_slots: int = 0
    num_generated_tokens: int = 0
    num_preemptions: int = 0
    first_token_time_s: float | None = None
    finish_time_s: float | None = None
    num_seqs: int = field(init=False, default=1)

    def __post_init__(self) -> None:
        # sequences of the group, a plain attribute because the scheduler reads it every step
        self.num_seqs = max(self.n, self.beam_width)

    @property
    def final_tokens(self) -> int:
        """True final length in token states: prompt + output tokens."""
        return self.prompt_tokens + self.output_tokens

    @property
    def num_prefill_tokens(self) -> int:
        """Tokens a prefill computes now: prompt + output so far (recompute after preemption)."""
        return self.prompt_tokens + self.num_generated_tokens
