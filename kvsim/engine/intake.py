"""From a config to the requests the engine serves: generate, fan out, and reject what cannot run.

- ``requests_for(config)``: the workload's requests, drawn from the config's seed.
- ``fan_out``: vLLM v1 serves a request with ``n > 1`` samples as ``n`` independent requests
  (``vllm/v1/engine/parallel_sampling.py``, ``ParentRequest``) with the same prompt, so they share
  its blocks only through the prefix cache.
- ``split_runnable``: vLLM rejects a request longer than ``max_model_len`` before it reaches the
  engine (and v0 ignores a prompt whose blocks exceed the pool); kvsim counts such requests,
  names them in one warning, and runs the rest (``strict``: an error instead).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from kvsim.base.limits import MAX_NUM_REQUESTS
from kvsim.base.say_once import warn_once
from kvsim.config import SimConfig
from kvsim.config.allocators import PAGED_ALLOCATORS, serves_sequence_groups
from kvsim.config.sim import group_over_max_num_seqs
from kvsim.core.kv.base import Allocator
from kvsim.engine.build import allocator_from_config
from kvsim.workload import generate_requests
from kvsim.workload.request import Request, RequestSpec, fresh_requests
from kvsim.workload.tokens import note_shared_tokens, prompt_segments

logger = logging.getLogger(__name__)


def requests_for(config: SimConfig) -> list[Request]:
    """The workload's requests for ``config`` (same config and seed, same requests).

    Raises:
        DataNotFoundError: a trace the workload names is missing.
        ValueError: a malformed trace or an empty selection.
    """
    rng = np.random.default_rng(config.seed)
    requests = generate_requests(config.workload, rng, max_model_len=config.max_model_len)
    check_trace_groups(config, requests)
    check_num_sequences(config, requests)
    warn_nothing_to_cache(config, requests)
    return requests


def warn_nothing_to_cache(config: SimConfig, requests: list[Request]) -> None:
    """Say so, once, when prefix caching is on for a trace whose requests share no token: a
    trace of lengths only (no ``hash_ids``, token ids, sessions or shared prefix) gives every
    prompt tokens of its own, so no request hits another's blocks: the Azure trace's 22 M
    tokens reported 0 hits without a word. Synthetic lengths are unique by design: not said;
    nor is vLLM v1's default (caching the user did not ask for: the hits are just 0)."""
    spec = config.workload
    if spec.trace is None or not config.caches_prefixes or not config.cache.enable_prefix_caching:
        return
    if any(r.shares_tokens or r.n > 1 for r in requests):
        return
    warn_once(
        logger,
        "workload.trace %s: prefix caching is on (cache.enable_prefix_caching) but the trace "
        "gives lengths only, with no token identity to match (no hash_ids, token ids, sessions "
        "or shared prefix), so no request can hit another's cached blocks and the hits "
        "measure the trace, not the cache; set workload.shared_prefix_tokens to model a "
        "shared system prompt, or use a trace with hash_ids (Mooncake)",
        spec.trace,
    )


def check_num_sequences(config: SimConfig, requests: list[Request]) -> None:
    """The run holds at most ``kvsim.base.limits.MAX_NUM_REQUESTS`` sequences: requests times their
    ``n`` or beam width (vLLM v1 serves each sample as a request; every sequence is simulated).

    Raises:
        ValueError: naming the workload's count of requests and sequences, and the limit.
    """
    num_seqs = sum(r.num_seqs for r in requests)
    if num_seqs <= MAX_NUM_REQUESTS:
        return
    spec = config.workload
    source = f"workload.trace ({spec.trace})" if spec.trace is not None else "workload"
    widest = max(requests, key=lambda r: r.num_seqs)
    groups = (
        f" in {len(requests):,} requests (n or beam_width up to {widest.num_seqs:,}: request "
        f"{widest.req_id})"
        if num_seqs > len(requests)
        else ""
    )
    raise ValueError(
        f"{source}: {num_seqs:,} sequences{groups}, more than the {MAX_NUM_REQUESTS:,} one run "
        "holds (kvsim keeps every sequence in memory); set workload.num_requests or "
        "workload.duration_s to simulate a shorter window"
    )


def check_trace_groups(config: SimConfig, requests: list[Request]) -> None:
    """A trace's per-row ``n``/``beam_width`` fit the engine profile and allocator, by the rules
    ``SimConfig`` applies to ``workload.n``/``workload.beam_width``.

    Raises:
        ValueError: naming the trace, how many rows and the first request.
    """
    if config.workload.n > 1 or config.workload.beam_width > 1:
        return  # the spec's own values were checked with the config
    groups = [r for r in requests if r.num_seqs > 1]
    if not groups:
        return
    beams = [r for r in groups if r.beam_width > 1]
    args, allocator = config.engine_args, config.cache.allocator
    where = f"workload.trace ({config.workload.trace})"
    if beams and args.engine == "vllm-v1":
        raise ValueError(
            f"{where}: {len(beams)} request(s) with beam_width > 1 (first: request "
            f"{beams[0].req_id}, beam_width {beams[0].beam_width}); beam search runs outside "
            "vLLM v1's engine: use scheduler.engine = 'vllm-v0'"
        )
    widest = max(groups, key=lambda r: r.num_seqs)
    if args.engine == "vllm-v0" and widest.num_seqs > args.max_num_seqs:
        what = f"{where}: request {widest.req_id} has {widest.num_seqs} sequences (n or beam_width)"
        raise ValueError(group_over_max_num_seqs(what, args))
    paged = allocator in PAGED_ALLOCATORS
    if args.engine == "vllm-v0" and paged and config.scheduler.preemption_mode == "recompute":
        raise ValueError(
            f"{where}: {len(groups)} request(s) with n or beam_width > 1; vLLM v0 cannot "
            "recompute a multi-sequence group: leave scheduler.preemption_mode unset or 'swap'"
        )
    if not serves_sequence_groups(allocator):
        raise ValueError(
            f"{where}: {len(groups)} request(s) with n or beam_width > 1; 'radix' serves single "
            "sequences: use cache.allocator = 'paged'"
        )


def fan_out(requests: list[Request]) -> list[Request]:
    """Split every ``n > 1`` request into ``n`` single requests (vLLM v1), renumbered in order.

    The samples keep the parent's prompt identity (so they share its cached blocks) and their
    ``parent_id``; each generates its own output.
    """
    if all(r.n == 1 for r in requests):
        return requests
    out: list[Request] = []
    for req in requests:
        if req.n == 1:
            out.append(replace(req, req_id=len(out)))
            continue
        segments = prompt_segments(req)
        for _ in range(req.n):
            out.append(
                replace(req, req_id=len(out), n=1, token_segments=segments, parent_id=req.req_id)
            )
    return out


@dataclass
class Rejected:
    """Requests that cannot run, by reason (``max_model_len``: prompt + output exceeds it;
    ``kv_pool``: the empty pool cannot hold its KV)."""

    max_model_len: list[Request] = field(default_factory=list)
    kv_pool: list[Request] = field(default_factory=list)
    watermark: float = 0.0  # share of blocks admission keeps free (vLLM v0)
    num_watermark_only: int = 0  # of kv_pool: would fit the empty pool but for the watermark
    budget_field: str = ""  # the config field that sets the KV budget, for the advice

    @property
    def count(self) -> int:
        return len(self.max_model_len) + len(self.kv_pool)

    def summary(self) -> dict[str, int]:
        return {
            "num_requests_rejected": self.count,
            "num_rejected_max_model_len": len(self.max_model_len),
            "num_rejected_kv_pool": len(self.kv_pool),
        }

    def message(
        self, total: int, max_model_len: int, usable_tokens: int, *, skipped: bool = True
    ) -> str:
        """One line naming how many requests cannot run, why, the first of each kind, and what
        would let them run (``usable_tokens``: the slots requests can hold in the empty pool,
        ``Allocator.usable_capacity_tokens``)."""
        parts = []
        if self.max_model_len:
            r = self.max_model_len[0]
            parts.append(
                f"{len(self.max_model_len)} longer than max_model_len = {max_model_len:,} "
                f"(first: request {r.req_id}, prompt {r.prompt_tokens:,} + output "
                f"{r.output_tokens:,} tokens)"
            )
        if self.kv_pool:
            r = self.kv_pool[0]
            parts.append(
                f"{len(self.kv_pool)} whose KV the empty pool's {usable_tokens:,} usable slots "
                f"cannot hold (first: request {r.req_id}, {r.num_seqs} sequence(s) of "
                f"{r.final_tokens:,} tokens)"
            )
            if self.num_watermark_only:
                parts[-1] += (
                    f", {self.num_watermark_only} of them only because admission keeps the "
                    f"watermark free (cache.watermark = {self.watermark:g} of the blocks, "
                    "vLLM v0's BlockSpaceManager; lower cache.watermark or raise the KV budget)"
                )
        fixes = []
        if self.max_model_len:
            fixes.append("raise scheduler.max_model_len")
        if len(self.kv_pool) > self.num_watermark_only:
            named = f" ({self.budget_field})" if self.budget_field else ""
            fixes.append(f"raise the KV budget{named}")
        advice = ", ".join(fixes) + ("," if len(fixes) > 1 else "")
        advice = f"{advice} or filter the workload" if fixes else "filter the workload"
        one = self.count == 1  # ("1 of 5,000 requests cannot run and is skipped")
        return (
            f"{self.count:,} of {total:,} requests cannot run"
            + ((" and is skipped: " if one else " and are skipped: ") if skipped else ": ")
            + "; ".join(parts)
            + f" ({advice})"
        )


def budget_field(config: SimConfig) -> str:
    """The config field that sets the run's KV budget: ``cache.kv_cache_bytes`` or
    ``cache.kv_cache_gib`` where given, else ``cache.gpu_memory_utilization``."""
    for name in ("kv_cache_bytes", "kv_cache_gib"):
        if getattr(config.cache, name) is not None:
            return f"cache.{name}"
    return "cache.gpu_memory_utilization"


def split_runnable(
    requests: list[Request], config: SimConfig, empty_pool: Allocator
) -> tuple[list[Request], Rejected]:
    """Separate the requests that can run from those that never can.

    A request fits when the empty pool holds its KV at its peak (``Allocator.
    can_fit_sequence``: every block of a full-attention pool; a hybrid pool's sliding groups
    at most their admission cap, ``cdiv(W - 1 + max_num_batched_tokens, B) + 1`` blocks, as
    vLLM's ``SlidingWindowSpec.max_memory_usage_bytes`` counts a ``max_model_len`` request).

    Args:
        requests: the workload.
        config: the run (``max_model_len``).
        empty_pool: a fresh allocator of the run's kind, queried only (nothing is allocated).
    """
    limit = config.max_model_len
    v0 = config.engine_args.engine == "vllm-v0"
    rejected = Rejected(watermark=config.engine_args.watermark, budget_field=budget_field(config))
    runnable: list[Request] = []
    fits: dict[tuple[int, int, int, int], str] = {}
    for req in requests:
        if req.final_tokens > limit:
            rejected.max_model_len.append(req)
            continue
        shape = (req.prompt_tokens, req.output_tokens, req.max_tokens, req.num_seqs)
        verdict = fits.get(shape)
        if verdict is None or req.beam_parents is not None:
            # (its peak: a sliding window's group recycles its blocks as the request grows,
            # so it holds at most its admission cap, as vLLM's startup check counts it)
            if not empty_pool.can_fit_sequence(req, req.final_kv_tokens):
                verdict = "pool"
            elif v0 and not empty_pool.can_admit(req, req.prompt_tokens):
                verdict = "watermark"  # (v0 admits a whole prompt, the watermark left free)
            else:
                verdict = "ok"
            fits[shape] = verdict
        if verdict == "ok":
            runnable.append(req)
        else:
            rejected.kv_pool.append(req)
            rejected.num_watermark_only += verdict == "watermark"
    return runnable, rejected


def prepare_requests(
    config: SimConfig,
    requests: Sequence[Request | RequestSpec] | None = None,
    *,
    strict: bool = False,
    quiet: bool = False,
) -> tuple[list[Request], Rejected]:
    """The requests a run serves: generated when ``None`` (else fresh ones made from the given
    requests' or specs' facts), fanned out under v1, the ones that can never run set aside
    (logged unless ``quiet``; an error with ``strict`` or when none is left)."""
    requests = requests_for(config) if requests is None else fresh_requests(requests)
    if config.engine_args.engine == "vllm-v1":
        requests = fan_out(requests)
    if config.caches_prefixes:  # (a block no other request names is keyed if preempted)
        note_shared_tokens(requests)
    empty_pool = allocator_from_config(config)
    runnable, rejected = split_runnable(requests, config, empty_pool)
    if rejected.count:
        fail = strict or not runnable
        message = rejected.message(
            len(requests), config.max_model_len, empty_pool.usable_capacity_tokens, skipped=not fail
        )
        if fail:
            raise ValueError(message)
        if not quiet:
            logger.warning(message)
    return runnable, rejected
