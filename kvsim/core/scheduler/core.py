"""What both engine profiles share: queues, recompute preemption, step completion, fast-forward.

Plain Python; talks only to the allocator contract. A profile (``v1.py``, ``v0.py``) plans one
step in ``schedule``; ``complete`` applies it (vLLM's ``update_from_output``): every scheduled
request's computed tokens advance by its new tokens, a request whose computed tokens catch up
with its known tokens samples one (its first sets ``first_token_time_s``), and a request that has
sampled all its output tokens finishes and frees its KV at once, so its last token never gets a
KV slot.

The running requests are kept as a decode cohort plus explicit ones
(``kvsim.core.scheduler.running``): steady decoders advance together and are touched only when they
finish, cross a block boundary or are preempted. A plan whose later steps would all be "every
running request decodes one token" is fast-forwarded ``k`` steps at once
(``max_extension``/``extend``): up to the first finish and as far as every request can grow without
an allocation failing.
"""

from __future__ import annotations

from collections import deque

from librt.vecs import vec
from mypy_extensions import i64

from kvsim.config import EngineArgs
from kvsim.core.kv.base import NO_HIT, Allocator, PrefixHit
from kvsim.core.kv.grow import grown
from kvsim.core.kv.swap import SwapSpace
from kvsim.core.scheduler.offload import OffloadConnector
from kvsim.core.scheduler.plan import StepPlan
from kvsim.core.scheduler.running import LazyDecodes
from kvsim.core.scheduler.spec import SpecDecoder
from kvsim.workload.request import Request


class PreemptionLivelockError(ValueError):
    """A request was preempted more often than ``max_preemptions_per_request`` (a pool too
    small for the running set: the config's fault, hence a ``ValueError``)."""


class SchedulerCore:
    """FCFS continuous batching over one allocator; ``schedule`` is the profile's.

    Args:
        allocator: the KV allocation policy.
        args: the run's resolved engine arguments (``SimConfig.engine_args``).
    """

    def __init__(
        self,
        allocator: Allocator,
        args: EngineArgs,
        pooled: bool = False,
        spec: SpecDecoder | None = None,
    ) -> None:
        self.allocator = allocator
        self.args = args
        self.spec = spec
        # speculative decoding: slots reserved past every allocation's tokens (vLLM
        # allocate_slots(num_lookahead_tokens=...)), capped at max_model_len
        self.lookahead = args.num_lookahead_tokens if spec is not None else 0
        if spec is not None:
            allocator.speculate(args.num_hash_lookahead_tokens)
        self._every_step = allocator.allocates_every_step
        self.token_budget = args.max_num_batched_tokens
        # read every step: native attributes, not the pydantic args' (a Python attribute lookup)
        self._chunked_prefill = args.enable_chunked_prefill
        self._long_prefill_threshold = args.long_prefill_token_threshold
        self.max_model_len = args.max_model_len  # (a native int: read per request per step)
        self.max_num_seqs = args.max_num_seqs
        self.waiting: deque[Request] = deque()
        # the waiting queue's first entries: requests that hold KV blocks (``add_holder``)
        self._num_holders = 0
        # running requests in the order they started running (a dict: O(1) removal; the last
        # entry is the lowest priority, popitem() its preemption)
        self.running: dict[Request, None] = {}
        self._running_seqs = 0  # their sequences (a group of w counts w)
        self.num_preemptions = 0
        # vLLM's iteration_tokens_total (``observe_step_tokens``): steps by tokens a step, a
        # packed vector indexed by the tokens (a dict's keys, a few thousand ints made over the
        # whole run and kept, held the process's peak RSS 13 % higher on a 100k run), and
        # their total
        self._steps_by_tokens: vec[i64] = vec[i64]()
        self.num_observed_steps = 0
        self.has_groups = False  # any sequence group seen: sequences != requests from then on
        # a verification's computed tokens are cached (``_complete_verifications``) by any pool
        # that caches prefixes, hybrid groups' too
        self._caches_prefixes = allocator.caches_prefixes and args.enable_prefix_caching
        caching = allocator.paged and self._caches_prefixes
        # blocks are cached when they fill, so a caching pool hears of every filled block
        self.cache_block_tokens = allocator.block_size_tokens if caching else 0
        # a speculating request advances 1 + accepted tokens a step: never a cohort member
        self.lazy = LazyDecodes(allocator, bool(self.cache_block_tokens), pooled, spec is None)
        # KV offloading to a CPU tier (vLLM v1's OffloadingConnector), set by the engine
        self.offload: OffloadConnector | None = None
        self.swap: SwapSpace | None = None  # vLLM v0's CPU swap pool (``V0Scheduler``)

    # -- the running requests -----------------------------------------------------------------
    def _flush(self) -> None:
        """Make every running request's counters true (before a pass that may preempt)."""
        if self.lazy.cohort.members:
            self.lazy.flush(self.running)

    def _run(self, req: Request) -> None:
        """Append ``req`` to the running requests."""
        self.running[req] = None
        self._running_seqs += req.num_seqs
        self.lazy.started(req)

    def _pop_last_running(self) -> Request:
        """Take the last running request (the one to preempt) out of the running ones."""
        victim = self.running.popitem()[0]
        self._running_seqs -= victim.num_seqs
        self.lazy.preempted(victim)
        return victim

    def _finish_plan(self, plan: StepPlan) -> None:
        """A plan whose span would carry a request that cannot join the cohort after step 0
        covers one step; so does one in a pool of several KV cache groups while a request waits
        for anything but KV or ``max_num_seqs`` (a span for a head waiting for KV ends before
        the members' windows could free enough blocks to admit it: ``max_extension``)."""
        if plan.extendable and not self.lazy.can_join_after_step0(plan):
            plan.extendable = False
        if (
            plan.extendable
            and self.waiting
            and self.lazy.cohort.groups is not None
            and plan.head_blocked not in ("max_num_seqs", "kv")
        ):
            plan.extendable = False

    def _add_cohort_step(self, plan: StepPlan, clock: int, advance: int) -> None:
        """Note that the plan was made at the cohort's ``clock`` and that its members take
        ``advance`` (0 or 1) decode steps in step 0, and add their work: each sequence decodes
        one token after its share of ``sum_computed``."""
        cohort = self.lazy.cohort
        plan.cohort_clock = clock
        plan.cohort_advance = advance
        if not advance:
            return
        plan.add_decoding(cohort.num_seqs, cohort.sum_computed(clock))
        plan.num_cohort = len(cohort)
        plan.cohort_seqs = cohort.num_seqs

    def sync_requests(self) -> None:
        """Write every cohort member's counters into its ``Request`` (they are stale between
        touches); the cohort is unchanged. It visits every member: for tests and inspection."""
        cohort = self.lazy.cohort
        for member in cohort.members.values():
            cohort.materialize(member)

    def step_tokens(self, plan: StepPlan) -> dict[int, int]:
        """req_id -> tokens each request computes in the plan's step 0 (per sequence), the
        cohort's members included, in running order. Call it right after ``schedule``; it
        visits every running request (for tests and step-by-step diffs, not the engine)."""
        lazy = self.lazy
        seq = lazy.seq
        pairs = zip(plan.scheduled, plan.num_new_tokens, strict=True)
        entries = [(seq[r], r.req_id, n) for r, n in pairs]
        if plan.cohort_advance:
            entries += [(m.seq, m.request.req_id, 1) for m in lazy.cohort.members.values()]
        entries.sort()
        return {req_id: n for _, req_id, n in entries}

    def add_request(self, request: Request) -> None:
        """Queue an arrived request at the back of the waiting queue."""
        self.waiting.append(request)
        if request.num_seqs > 1:
            self.has_groups = True

    def add_holder(self, request: Request) -> None:
        """Queue a waiting request that holds KV blocks (its KV loaded from the CPU tier or
        received from a prefill replica) after the others that do and before every request
        that does not: vLLM 0.34.0 keeps them in ``kv_holding_waiting``, scanned before
        ``waiting``, so that a block holder never waits behind a head whose failed allocation
        stops the scan (``vllm/v1/core/sched/scheduler.py``, ``_enqueue_waiting_request``)."""
        self.waiting.insert(self._num_holders, request)
        self._num_holders += 1

    def unhold(self, requests: set[Request]) -> None:
        """``requests``, waiting block holders, hold no blocks any more: they leave the holders
        and wait at the front of the rest of the queue, in their order."""
        holders = [self.waiting.popleft() for _ in range(self._num_holders)]
        kept = [r for r in holders if r not in requests]
        assert len(kept) + len(requests) == len(holders), "unhold: not every one is a holder"
        self.waiting.extendleft(reversed(kept + [r for r in holders if r in requests]))
        self._num_holders = len(kept)

    def pop_waiting(self) -> Request:
        """Take the waiting queue's head (a block holder while any waits)."""
        if self._num_holders:
            self._num_holders -= 1
        return self.waiting.popleft()

    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    def num_running_seqs(self) -> int:
        """Running sequences (a group of ``w`` counts ``w``)."""
        return self._running_seqs

    def schedule(self) -> StepPlan:
        """Plan one step (the profile's rules)."""
        raise NotImplementedError

    # -- allocation and preemption ------------------------------------------------------------
    def _allocate(
        self, req: Request, num_tokens: int, hit: PrefixHit = NO_HIT, lookahead: bool = True
    ) -> bool:
        """Allocate through the allocator and refresh the request's cached held slots (with
        speculative decoding, ``lookahead`` slots more, up to ``max_model_len``, unless
        ``lookahead`` is off: a load from the CPU tier runs no step, and vLLM 0.34.0 takes its
        lookahead slots only when it is next scheduled, ``Scheduler.schedule``'s
        ``effective_lookahead_tokens``)."""
        cache_tokens = None  # (all of num_tokens)
        if self.lookahead and lookahead:  # lookahead slots are held, not cached
            cache_tokens = num_tokens
            num_tokens = self.with_lookahead(num_tokens)
        if num_tokens <= req.num_held_slots and not self._every_step:  # hot path: room
            cb = self.cache_block_tokens
            if not cb:
                return True
            done = req.num_computed_tokens // cb
            if num_tokens // cb <= done or req.shared_tokens // cb <= done:
                return True  # and no shareable block fills, so there is nothing to cache
        if self.allocator.allocate(req, num_tokens, hit, cache_tokens) is None:
            return False
        req.num_held_slots = self.allocator.held_slots(req.req_id)
        return True

    def with_lookahead(self, num_tokens: int) -> int:
        """The slots an allocation of ``num_tokens`` holds: ``lookahead`` more under
        speculative decoding, up to ``max_model_len`` (vLLM ``allocate_slots(...,
        num_lookahead_tokens)``)."""
        return min(num_tokens + self.lookahead, self.max_model_len)

    def _preempt_recompute(self, req: Request) -> None:
        """Drop the request's KV; it re-prefills prompt + outputs from the front of the queue,
        behind the requests that hold KV blocks (``add_holder``)."""
        self.allocator.free(req.req_id, req.num_computed_tokens)
        req.num_computed_tokens = 0
        req.num_held_slots = 0
        req.num_draft_tokens = 0  # (vLLM _preempt_request drops its spec_token_ids)
        self._count_preemption(req)
        self.waiting.insert(self._num_holders, req)  # (vLLM: the front of ``waiting``)

    def _preempt(self, req: Request) -> None:
        """Preempt ``req`` by the profile's rule (recompute; v0 may swap)."""
        self._preempt_recompute(req)

    def _preempt_last(self, plan: StepPlan, clock: int) -> Request:
        """Preempt the last running request (``_preempt``) in a pass at the cohort's ``clock``
        and return it; a member leaves the cohort first, unstepped (it comes after the request
        being handled, so its turn has not come)."""
        lazy = self.lazy
        victim = next(reversed(self.running))
        member = lazy.cohort.members.get(victim)
        if member is not None:
            lazy.release_unstepped(member, clock)
        self._preempt(self._pop_last_running())
        plan.num_preempted += 1
        return victim

    def _count_preemption(self, req: Request) -> None:
        req.num_preemptions += 1
        self.num_preemptions += 1
        if req.num_preemptions > self.args.max_preemptions_per_request:
            raise PreemptionLivelockError(
                f"request {req.req_id} (prompt {req.prompt_tokens}, output {req.output_tokens} "
                f"tokens) was preempted {req.num_preemptions} times (max_preemptions_per_request "
                f"= {self.args.max_preemptions_per_request}): the KV pool of "
                f"{self.allocator.capacity_tokens:,} slots cannot hold the running set; lower "
                "max_num_seqs or raise the KV budget"
            )

    def head_of_queue(self) -> tuple[Request, int] | None:
        """The waiting head and the tokens its admission must place (its first chunk, or its
        whole sequence under ``scheduler_reserve_full_isl``), or ``None``."""
        if not self.waiting:
            return None
        head = self.waiting[0]
        tokens = head.num_tokens
        if self.args.enable_chunked_prefill and not self.args.scheduler_reserve_full_isl:
            tokens = min(tokens, self.token_budget)
        return head, tokens

    # -- completion ---------------------------------------------------------------------------
    def complete(self, plan: StepPlan, now_s: float, step0_end_s: float) -> list[Request]:
        """Apply a finished plan; free and return the requests that finished, in running order.

        Args:
            now_s: simulated time at the end of the plan, seconds.
            step0_end_s: end of its first step (when step 0's tokens are sampled), seconds.
        """
        lazy = self.lazy
        cohort = lazy.cohort
        members = cohort.members
        if plan.completed:  # a speculative span made its last step's draws already
            finished = plan.completed_finished
        elif self.spec is not None:
            finished = self._complete_verifications(plan, step0_end_s)
        else:
            scheduled, num_new = plan.scheduled, plan.num_new_tokens
            tokens = plan.cohort_seqs  # (each member's sequences sample one token in step 0)
            for i in range(len(scheduled)):  # (indexed: mypyc compiles zip(strict=) as a call)
                req, n = scheduled[i], num_new[i]
                req.num_computed_tokens += n
                if req.num_computed_tokens >= req.num_tokens:
                    req.num_output_tokens += 1
                    tokens += req.num_seqs + _first_output(req, step0_end_s)
            self.observe_step_tokens(tokens, 1)
            if plan.num_steps > 1:  # every sequence of the cohort decodes in the later steps
                self.observe_step_tokens(cohort.num_seqs, plan.num_steps - 1)
            finished = [
                r
                for r in plan.scheduled
                if r.num_output_tokens >= r.output_tokens and r not in members
            ]
        cohort.clock = plan.cohort_clock + plan.cohort_advance + plan.cohort_steps - 1
        if lazy.prejoined:  # (the plan they joined after has run)
            lazy.prejoined = []
        for member in cohort.pop_finished():
            lazy.release(member)
            finished.append(member.request)
        if finished:
            if len(finished) > 1:
                finished.sort(key=lazy.seq.__getitem__)
            for req in finished:
                req.finish_time_s = now_s
                req.num_held_slots = 0
                self.allocator.free(req.req_id)
                lazy.finished(req)
            for req in finished:
                del self.running[req]
                self._running_seqs -= req.num_seqs
        if not lazy.joins:  # (speculating requests never join)
            return finished
        for req in plan.scheduled:  # steady after step 0: join (a span's joined already)
            if req.finish_time_s is None and req not in members and lazy.is_steady(req):
                lazy.join_now(req)
        return finished

    def observe_step_tokens(self, tokens: int, steps: int) -> None:
        """Note ``steps`` engine steps of ``tokens`` tokens each, as vLLM 0.34.0 observes
        ``vllm:iteration_tokens_total`` once a step (``PrometheusStatLogger.record``): the
        prompt tokens computed of the requests whose first output the step samples (their
        prompt less what their first admission found cached: ``PromptTokenStats.computed``)
        plus the tokens it samples (every sequence's, a verification's accepted drafts too).
        A step that samples nothing (prefill chunks alone) is not observed: it emits no output,
        so vLLM makes no ``IterationStats`` for it (``vllm/v1/engine/async_llm.py``)."""
        if tokens == 0:
            return
        counts = self._steps_by_tokens
        if tokens >= len(counts):
            counts = self._steps_by_tokens = grown(counts, tokens + 1, 0)
        counts[tokens] += steps
        self.num_observed_steps += steps

    @property
    def iteration_tokens(self) -> dict[int, int]:
        """Engine steps observed (``observe_step_tokens``) by tokens a step, those observed
        only (a new dict)."""
        counts = self._steps_by_tokens
        return {tokens: counts[tokens] for tokens in range(len(counts)) if counts[tokens]}

    def _complete_verifications(self, plan: StepPlan, step0_end_s: float) -> list[Request]:
        """``complete``'s pass over the scheduled requests under speculative decoding; returns
        those that finished, in scheduling order (none is a cohort member).

        Each request that samples samples ``1 + accepted`` tokens (at most its remaining
        output) and rolls its computed tokens back by the rejected drafts (vLLM
        ``update_from_output``), then proposes ``k`` drafts for its next step unless it has
        finished. With a prefix cache it then caches the full blocks of its computed tokens,
        the verified drafts included, before a finished one is freed (vLLM 0.34.0
        ``update_from_output``: ``cache_blocks(request, num_computed_tokens)`` when
        ``num_spec_tokens > 0``); an allocation caches the tokens known when it was made only.

        One pass, request by request: a request's acceptance draw, counters and caching read
        and write only its own state and the allocator's, so this is the order of three passes
        (draws, counters, caching) over the same requests, with the draws in the same order.
        """
        spec = self.spec
        assert spec is not None
        k = spec.num_speculative_tokens
        cache = self._caches_prefixes
        allocator = self.allocator
        finished: list[Request] = []
        scheduled, num_new = plan.scheduled, plan.num_new_tokens
        assert len(scheduled) == len(num_new), "a plan's lists are aligned"
        tokens = plan.cohort_seqs
        for i in range(len(scheduled)):  # (indexed: native list reads, no zip tuples)
            req = scheduled[i]
            computed = req.num_computed_tokens + num_new[i]
            num_drafts, placeholders = req.num_verifying_drafts, req.verifies_placeholders
            if num_drafts:
                req.num_verifying_drafts = 0
                req.verifies_placeholders = False
            if computed >= req.num_tokens:  # it samples (a prefill chunk samples nothing)
                accepted = 0
                left = req.output_tokens - req.num_output_tokens - 1  # after its sampled token
                if num_drafts:
                    if placeholders:  # (counted as vLLM counts them: all rejected)
                        accepted = spec.reject_placeholders(num_drafts)
                    else:
                        accepted = spec.accept(num_drafts)
                    # tokens past the last output are trimmed, and the computed ones with them
                    # (vLLM _update_request_with_output: computed covers all but the last token)
                    computed -= num_drafts - min(accepted, left)
                kept = min(accepted, left)
                req.num_output_tokens += kept
                req.num_draft_outputs += kept
                tokens += kept
                req.num_draft_tokens = k if left > accepted else 0
            req.num_computed_tokens = computed
            if computed >= req.num_tokens:
                req.num_output_tokens += 1
                tokens += 1 + _first_output(req, step0_end_s)
            # a request sharing no tokens has no block another can hit: nothing to cache (as
            # in ``_allocate``'s hot path); an ``allocate`` within the holding takes nothing
            if cache and req.shares_tokens and computed == req.num_tokens - 1:
                allocator.cache_blocks(req, computed)
            if req.num_output_tokens >= req.output_tokens:
                finished.append(req)
        self.observe_step_tokens(tokens, 1)
        return finished

    # -- fast-forward -------------------------------------------------------------------------
    def growth_reserve_slots(self, plan: StepPlan) -> int:
        """Free slots every decode step of a span must leave (the profile's growth check)."""
        return 0

    def max_extension(self, plan: StepPlan, k_max: int) -> int:
        """Steps ``plan`` can cover without any event: no finish, failed growth or admission.

        Returns ``k >= 1``; when ``k > 1`` the k-th step is the first in which a request finishes
        or the last one its holdings allow.
        """
        if not plan.extendable or k_max <= 1 or not self.running:
            return 1
        lazy = self.lazy
        lazy.prejoin(plan)  # every scheduled request is a member from the clock after step 0
        if lazy.others:  # a running request left out of a v0 prefill step that cannot join
            return 1
        after = plan.cohort_clock + plan.cohort_advance
        top = lazy.cohort.next_finish_clock()
        assert top is not None
        remaining = top - after  # decodes left after step 0 by the first to finish
        if remaining <= 0:
            return 1
        k = min(k_max, remaining + 1)
        k = 1 + lazy.growth_steps(after, k - 1, self.growth_reserve_slots(plan))
        if k > 1 and not lazy.can_fast_forward():
            return 1
        cohort = lazy.cohort
        if k > 1 and self.waiting and cohort.groups is not None and plan.head_blocked == "kv":
            # the head needed more free blocks than step 0 left, and a later step's budget only
            # lets it ask for more: it stays blocked while the windows free fewer blocks than
            # it lacked (at least one) more than the crossings take
            free = self.allocator.num_free_tokens // self.allocator.block_size_tokens
            slack = max(0, plan.head_need_blocks - free - 1)
            k = 1 + cohort.steps_freeing_nothing_net(after, k - 1, slack)
        if k <= 1 or not lazy.caching or not cohort.filling:
            return k  # (only members that fill shareable blocks can meet an unsafe fill)
        filling = list(cohort.filling)
        tokens = [cohort.computed_at(m, after) for m in filling]
        step = self.allocator.first_unsafe_fill_step([m.request for m in filling], tokens, k - 1)
        return k if step is None else min(k, step)

    def extend(self, plan: StepPlan, num_steps: int) -> None:
        """Let ``plan`` cover ``num_steps`` steps, allocating their slots now."""
        if num_steps <= 1:
            return
        span = plan.span
        if span is None or not span.explicit:  # (a speculative span allocated as it planned)
            self.lazy.extend(plan, num_steps)
        plan.num_steps = num_steps

    def span_context(self, plan: StepPlan) -> tuple[float, float]:
        """``(S, N)`` of a span: KV tokens its sequences hold after step 0 (each sequence's)
        and the sequences that decode in its later steps."""
        cohort = self.lazy.cohort
        after = plan.cohort_clock + plan.cohort_advance
        return float(cohort.sum_computed(after)), float(cohort.num_seqs)


def _first_output(req: Request, end_s: float) -> int:
    """Note that ``req`` sampled a token at ``end_s``: its first output's time if it is the
    first; returns the prompt tokens its first admission computed then (vLLM 0.34.0
    ``PromptTokenStats.computed``, observed at the first output), else 0."""
    if req.first_token_time_s is not None:
        return 0
    req.first_token_time_s = end_s
    return req.prompt_tokens - req.num_cached_tokens
