"""``StepPlan``: what one engine step (or a fast-forwarded span of decode steps) runs."""

from __future__ import annotations

from dataclasses import dataclass

from librt.vecs import vec
from mypy_extensions import i64

from kvsim.workload.request import Request


class LazySpan:
    """Slot totals of a lazy plan's span before its steps ``1..k-1`` allocate, and what they take.

    Attributes:
        held0: slots the cohort holds in step 0 (per sequence, shared slots counted by each).
        internal0: of those, slots beyond the members' final lengths.
        blocks: blocks taken by each step (index = step, 0 for step 0).
        internal: internal fragmentation each step adds (a member's last block reaching past
            its final length), slots.

    In a pool of several KV cache groups (``DecodeCohort.groups``) ``blocks`` are net (blocks
    leaving a sliding window are freed), and also:

    Attributes:
        token0: token states of step 0 (every group's).
        token_slope: token states each later step adds, but for ``tokens``.
        tokens: token states each step adds or drops beyond ``token_slope`` (a window's freed
            block drops its tokens), slots.
        group_rows: per step, the members' per-kind totals (``GroupSums.kind_totals``), one
            row after another in one packed vector.
        across: per step, slots shared across requests (``Allocator.shared_slots``: a window
            may free a block another request still holds).
    """

    def __init__(
        self,
        held0: int,
        internal0: int,
        blocks: list[int] | None = None,
        internal: list[int] | None = None,
    ) -> None:
        # (a plain class: mypyc compiles this __init__; a dataclass's runs interpreted)
        self.held0 = held0
        self.internal0 = internal0
        self.blocks: list[int] = [] if blocks is None else blocks
        self.internal: list[int] = [] if internal is None else internal
        self.token0 = 0
        self.token_slope = 0
        self.tokens: list[int] = []
        self.group_rows: vec[i64] = vec[i64]()
        self.across: list[int] = []
        self.explicit = False  # a speculative span: its requests are explicit, not members


@dataclass(slots=True, init=False)
class StepPlan:
    """One planned step, possibly extended over ``num_steps`` steps.

    Step 0 computes ``num_new_tokens[i]`` tokens of ``scheduled[i]`` (a prefill chunk, a whole
    prompt, or one decode token) and one decode token of each decode-cohort member
    (``kvsim.core.scheduler.running``), who are in no list, only in the work sums. In every later
    step of the span every running request, a cohort member by then, decodes one token.

    Attributes:
        scheduled: requests computing in step 0, in scheduling order.
        num_new_tokens: tokens each computes in step 0 (aligned with ``scheduled``).
        num_prefills: scheduled requests whose step-0 work is (part of) a prefill.
        num_preempted: requests preempted while planning it.
        head_blocked: why the waiting head was not admitted (``"kv"``; ``"kv_prefix"`` for a
            head whose cached prefix may change; ``"max_num_seqs"``, ``"budget"``,
            ``"preempted"``, ``"swapped"``; ``"batch"`` while a request-level batch runs;
            ``"deferred"`` when every waiting request was skipped: ``num_deferred``), ``None``
            when nobody waits.
        num_deferred: waiting requests skipped this step because the CPU tier could not say
            yet what they hit (vLLM's ``num_skipped_waiting_reqs``); they keep their places
            at the queue's front.
        head_need_blocks: blocks the head blocked by ``"kv"`` needed from the free pool
            (a pool of several KV cache groups; 0 when not noted).
        extendable: later steps would schedule exactly "every member decodes one token".
        num_steps: steps this plan covers.
        swap_blocks: KV blocks moved over PCIe by this plan (swapped out plus swapped in).
        all_running_scheduled: every running request computes in step 0 (the scheduled ones
            and the cohort's members).
        work_new_tokens, work_context_tokens, work_attention_pairs, work_seqs,
            work_drafting_seqs: step 0's sums for ``StepCostModel.step_s`` (its arguments, in
            order), accumulated by ``add`` (native floats: a list of floats would box a float
            at every ``+=``).
        cohort_clock: the cohort's clock when the plan was made.
        cohort_advance: decode steps the cohort takes in step 0 (0 or 1).
        num_cohort: cohort members decoding in step 0.
        cohort_seqs: their sequences (a group of ``w`` counts ``w``), 0 when none decodes.
        span: what the fast-forward of a lazy plan took, for the recorder (``LazySpan``).
        completed: a speculative span (``V1Scheduler.speculative_span``) already completed its
            last step (its acceptance draws made): ``complete`` frees ``completed_finished``.
        completed_finished: the requests that finished then, in scheduling order.

    Speculative decoding: a scheduled request that verifies drafts notes them on itself
    (``add_verify``: ``Request.num_verifying_drafts``, ``Request.verifies_placeholders``),
    read and cleared when the step completes. A speculative span leaves its last step's
    ``scheduled`` and ``num_new_tokens`` in the plan (the same requests, in the same order) for
    ``complete``; the work sums stay step 0's.
    """

    scheduled: list[Request]
    num_new_tokens: list[int]
    num_prefills: int
    num_preempted: int
    head_blocked: str | None
    head_need_blocks: int
    num_deferred: int
    extendable: bool
    num_steps: int
    swap_blocks: int
    all_running_scheduled: bool
    work_new_tokens: float
    work_context_tokens: float
    work_attention_pairs: float
    work_seqs: float
    work_drafting_seqs: float
    cohort_clock: int
    cohort_advance: int
    num_cohort: int
    cohort_seqs: int
    span: LazySpan | None
    completed: bool
    completed_finished: list[Request]

    def __init__(self) -> None:
        # (written out, not generated by the dataclass: mypyc compiles this one, while a
        # generated __init__ runs interpreted, once a step)
        self.scheduled = []
        self.num_new_tokens = []
        self.num_prefills = 0
        self.num_preempted = 0
        self.head_blocked = None
        self.head_need_blocks = 0
        self.num_deferred = 0
        self.extendable = False
        self.num_steps = 1
        self.swap_blocks = 0
        self.all_running_scheduled = False
        self.work_new_tokens = 0.0
        self.work_context_tokens = 0.0
        self.work_attention_pairs = 0.0
        self.work_seqs = 0.0
        self.work_drafting_seqs = 0.0
        self.cohort_clock = 0
        self.cohort_advance = 0
        self.num_cohort = 0
        self.cohort_seqs = 0
        self.span = None
        self.completed = False
        self.completed_finished = []

    @property
    def cohort_steps(self) -> int:
        """Steps of the plan the decode cohort takes part in: all of them, but one for a
        speculative span (its requests are explicit, the cohort empty and left out of it)."""
        span = self.span
        return 1 if span is not None and span.explicit else self.num_steps

    def tokens_by_request(self) -> dict[Request, int]:
        """Each scheduled request's tokens in step 0 (indexed, not ``zip(strict=True)``, which
        mypyc compiles as a call to the builtin)."""
        out: dict[Request, int] = {}
        scheduled, num_new = self.scheduled, self.num_new_tokens
        for i in range(len(scheduled)):
            out[scheduled[i]] = num_new[i]
        return out

    @property
    def is_empty(self) -> bool:
        """Nothing computes in this step."""
        return not self.scheduled

    def add_decode(self, request: Request) -> None:
        """``add(request, 1)`` for a request that has sampled a token (not a 1-token prefill)."""
        self.scheduled.append(request)
        self.num_new_tokens.append(1)
        w = request.num_seqs
        self.add_decoding(w, w * request.num_computed_tokens)

    def add_decoding(self, num_seqs: int, context_tokens: int) -> None:
        """Add the work of ``num_seqs`` sequences that each decode one token, after
        ``context_tokens`` computed tokens in all: ``c = 1`` after its ``o`` each, so
        ``sum c = num_seqs`` and ``sum (2 c o + c**2) = 2 * context_tokens + num_seqs``."""
        self.work_new_tokens += num_seqs
        self.work_context_tokens += context_tokens
        self.work_attention_pairs += 2 * context_tokens + num_seqs
        self.work_seqs += num_seqs

    def add_verify(self, request: Request, num_new_tokens: int, drafts: int, pad: bool) -> None:
        """Schedule a speculative verification: the request's last sampled token and
        ``drafts`` drafts (``num_new_tokens`` in all) after its ``o`` computed tokens, priced
        as ``c = num_new_tokens`` tokens after ``o`` (``pad``: the drafts are placeholders).
        The drafts are noted on the request (``Request.num_verifying_drafts``), which the
        step's completion reads and clears."""
        self.scheduled.append(request)
        self.num_new_tokens.append(num_new_tokens)
        o, c = request.num_computed_tokens, num_new_tokens
        self.work_new_tokens += c
        self.work_context_tokens += o
        self.work_attention_pairs += 2 * c * o + c * c
        self.work_seqs += 1
        request.num_verifying_drafts = drafts
        request.verifies_placeholders = pad

    def add(self, request: Request, num_new_tokens: int) -> None:
        """Schedule ``num_new_tokens`` of ``request`` in step 0 (before its computed tokens
        advance) and add its work: each sequence computes ``c`` tokens after ``o``."""
        if num_new_tokens == 1 and request.num_output_tokens:
            self.add_decode(request)  # every sequence computes one token after its o
            return
        self.scheduled.append(request)  # a prefill (or a chunk of one)
        self.num_new_tokens.append(num_new_tokens)
        o, w = request.num_computed_tokens, request.num_seqs
        self.num_prefills += 1
        c = num_new_tokens + (w - 1) * request.num_output_tokens  # a group: prompt once
        self.work_new_tokens += c
        self.work_context_tokens += o
        self.work_attention_pairs += 2 * c * o + c * c
        self.work_seqs += w
