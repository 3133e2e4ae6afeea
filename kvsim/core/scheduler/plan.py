"""``StepPlan``: what one engine step (or a fast-forwarded span of decode steps) runs."""

from __future__ import annotations

from kvsim.workload.request import Request

# The classes here are built once or more an engine event: plain classes with an explicit
# ``__init__``, which mypyc compiles (a dataclass's generated ``__init__`` runs interpreted).


class LazySpan:
    """Slot totals of a lazy plan's span before its steps ``1..k-1`` allocate, and what they take.

    Attributes:
        held0: slots the cohort holds in step 0 (per sequence, shared slots counted by each).
        internal0: of those, slots beyond the members' final lengths.
        blocks: blocks taken by each step (index = step, 0 for step 0).
        internal: internal fragmentation each step adds (a member's last block reaching past
            its final length), slots.
    """

    def __init__(
        self,
        held0: int,
        internal0: int,
        blocks: list[int] | None = None,
        internal: list[int] | None = None,
    ) -> None:
        self.held0 = held0
        self.internal0 = internal0
        self.blocks: list[int] = [] if blocks is None else blocks
        self.internal: list[int] = [] if internal is None else internal


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
            ``"preempted"``, ``"swapped"``; ``"batch"`` while a request-level batch runs),
            ``None`` when nobody waits.
        extendable: later steps would schedule exactly "every member decodes one token".
        num_steps: steps this plan covers.
        swap_blocks: KV blocks moved over PCIe by this plan (swapped out plus swapped in).
        all_running_scheduled: every running request computes in step 0 (the scheduled ones
            and the cohort's members).
        work: step 0's ``(new tokens, context tokens, attention pairs, sequences, drafting
            sequences)`` sums (``StepCostModel.step_s``), accumulated by ``add``.
        cohort_clock: the cohort's clock when the plan was made.
        cohort_advance: decode steps the cohort takes in step 0 (0 or 1).
        num_cohort: cohort members decoding in step 0.
        span: what the fast-forward of a lazy plan took, for the recorder (``LazySpan``).
        drafts: speculative decoding: ``(drafts, placeholders)`` verified by each scheduled
            request that verifies some (``placeholders``: a new request padded to the
            verification size with drafts no model proposed, all rejected), or ``None``.
    """

    def __init__(self) -> None:
        self.scheduled: list[Request] = []
        self.num_new_tokens: list[int] = []
        self.num_prefills = 0
        self.num_preempted = 0
        self.head_blocked: str | None = None
        self.extendable = False
        self.num_steps = 1
        self.swap_blocks = 0
        self.all_running_scheduled = False
        self.work: list[float] = [0.0, 0.0, 0.0, 0.0, 0.0]
        self.cohort_clock = 0
        self.cohort_advance = 0
        self.num_cohort = 0
        self.span: LazySpan | None = None
        self.drafts: dict[Request, tuple[int, bool]] | None = None

    def __repr__(self) -> str:
        return (
            f"StepPlan(scheduled={[r.req_id for r in self.scheduled]}, "
            f"num_new_tokens={self.num_new_tokens}, num_steps={self.num_steps}, "
            f"num_cohort={self.num_cohort}, num_preempted={self.num_preempted}, "
            f"head_blocked={self.head_blocked!r})"
        )

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
        work = self.work
        work[0] += num_seqs
        work[1] += context_tokens
        work[2] += 2 * context_tokens + num_seqs
        work[3] += num_seqs

    def add_verify(self, request: Request, num_new_tokens: int, drafts: int, pad: bool) -> None:
        """Schedule a speculative verification: the request's last sampled token and
        ``drafts`` drafts (``num_new_tokens`` in all) after its ``o`` computed tokens, priced
        as ``c = num_new_tokens`` tokens after ``o`` (``pad``: the drafts are placeholders)."""
        self.scheduled.append(request)
        self.num_new_tokens.append(num_new_tokens)
        o, c = request.num_computed_tokens, num_new_tokens
        work = self.work
        work[0] += c
        work[1] += o
        work[2] += 2 * c * o + c * c
        work[3] += 1
        if self.drafts is None:
            self.drafts = {}
        self.drafts[request] = (drafts, pad)

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
        work = self.work
        work[0] += c
        work[1] += o
        work[2] += 2 * c * o + c * c
        work[3] += w
