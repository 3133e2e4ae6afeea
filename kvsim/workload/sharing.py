"""Workload features that create KV sharing: groups, a shared system prompt, tenants, multi-turn.

Applied after lengths and arrivals are drawn (``generate_requests``). Token identities are the
synthetic runs of ``kvsim.workload.tokens``: the shared prefix is the run ``("sys", tenant)``, a
user message ``("user", conv, turn)`` and a request's output ``("gen", req_id)``, so equal prefixes
hash equal and nothing else does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from kvsim.base.say_once import warn_once
from kvsim.workload.request import Request
from kvsim.workload.spec import WorkloadSpec

logger = logging.getLogger(__name__)


def apply_sharing(spec: WorkloadSpec, requests: list[Request], max_model_len: int) -> list[Request]:
    """Return the requests with the spec's sharing features (unchanged when none is set).

    Args:
        spec: the workload (``n``, ``beam_width``, ``shared_prefix_tokens``, ``num_tenants``,
            ``num_turns``, ``turn_gap_s``).
        requests: drawn requests sorted by arrival, ids 0..N-1; the caller's fresh list, whose
            entries may be replaced in place (so a million drawn requests and their shared
            versions never all exist at once).
        max_model_len: context limit in tokens; prompts are cut to leave one output token.
    """
    if spec.num_turns > 1:
        requests = _conversations(spec, requests, max_model_len)
    elif spec.shared_prefix_tokens or spec.num_tenants > 1:
        system: dict[int, tuple[object, int]] = {}  # one system-prompt run per tenant
        cut = prompts_cut = 0
        for i, req in enumerate(requests):
            # (one too long already is rejected as it would be without the prefix: not cut)
            fits = req.prompt_tokens + req.output_tokens <= max_model_len
            requests[i] = _with_prefix(spec, req, max_model_len if fits else None, system)
            prompt_cut = requests[i].prompt_tokens < spec.shared_prefix_tokens + req.prompt_tokens
            cut += prompt_cut or requests[i].output_tokens < req.output_tokens
            prompts_cut += prompt_cut
        if cut:
            _warn_cut(spec, cut, prompts_cut, len(requests), max_model_len)
    if spec.n > 1 or spec.beam_width > 1:
        for i, req in enumerate(requests):
            requests[i] = replace(req, n=spec.n, beam_width=spec.beam_width)
    return requests


def _warn_cut(
    spec: WorkloadSpec, cut: int, prompts_cut: int, total: int, max_model_len: int
) -> None:
    warn_once(
        logger,
        "workload.shared_prefix_tokens = %s: %d of %d requests that fit max_model_len = %s "
        "alone pass it with the prefix before their prompt and are cut to fit it, the output "
        "first (%d of them to a prompt of max_model_len - 1 tokens and one output token); lower "
        "the prefix or raise scheduler.max_model_len to keep every request whole",
        f"{spec.shared_prefix_tokens:,}",
        cut,
        total,
        f"{max_model_len:,}",
        prompts_cut,
    )


def _salt(spec: WorkloadSpec, index: int) -> tuple[str | None, int]:
    tenant = index % spec.num_tenants
    return (f"tenant-{tenant}" if spec.num_tenants > 1 else None), tenant


def _with_prefix(
    spec: WorkloadSpec,
    req: Request,
    max_model_len: int | None,
    system: dict[int, tuple[object, int]],
) -> Request:
    """``req`` behind the tenant's system prompt, cut to fit ``max_model_len`` (``None``: not
    cut); ``system`` caches each tenant's run. The prompt keeps its own token runs behind the
    prefix (a trace's sessions, prefix groups or Mooncake ``hash_ids`` still share among
    themselves), and a session's turns share one tenant."""
    from kvsim.workload.tokens import fit_segments, prompt_segments  # (it imports this package)

    salt, tenant = _salt(spec, req.req_id if req.session_id is None else req.session_id)
    shared, prompt = spec.shared_prefix_tokens, spec.shared_prefix_tokens + req.prompt_tokens
    output, max_tokens = req.output_tokens, req.max_tokens
    if max_model_len is not None:
        shared = min(shared, max_model_len - 1)
        prompt = min(shared + req.prompt_tokens, max_model_len - 1)
        output = min(output, max_model_len - prompt)
        max_tokens = max(output, min(max_tokens, max_model_len - prompt))
    segs: tuple[tuple[object, int], ...] = fit_segments(
        prompt_segments(req), prompt - shared, req.req_id
    )
    if shared:
        segs = (system.setdefault(tenant, (("sys", tenant), shared)), *segs)
    return replace(
        req,
        prompt_tokens=prompt,
        output_tokens=output,
        max_tokens=max_tokens,
        token_segments=segs,
        cache_salt=salt,
    )


@dataclass(slots=True)
class _Turn:
    arrival_time_s: float
    conv: int
    turn: int
    user_tokens: int
    output_tokens: int
    max_tokens: int
    prompt_tokens: int = 0


def _conversations(
    spec: WorkloadSpec, requests: list[Request], max_model_len: int
) -> list[Request]:
    """Chain drawn rows into conversations of ``num_turns`` turns (see ``WorkloadSpec``); a
    trace's own sessions, prefix groups and ``hash_ids`` give way to them, with a warning."""
    own = sum(
        r.token_segments is not None or bool(r.prefix_hash_ids) or r.session_id is not None
        for r in requests
    )
    if own:
        warn_once(
            logger,
            "workload.num_turns = %d chains the trace's rows into synthetic conversations: "
            "the sessions, prefix groups or hash_ids of %d of its %d rows drawn are not used "
            "(set num_turns = 1 to keep the trace's own sharing)",
            spec.num_turns,
            own,
            len(requests),
        )
    turns: list[_Turn] = []
    num_convs = -(-len(requests) // spec.num_turns)
    shared = spec.shared_prefix_tokens
    for conv in range(num_convs):
        rows = requests[conv * spec.num_turns : (conv + 1) * spec.num_turns]
        start = requests[conv].arrival_time_s
        prompt = shared
        for t, row in enumerate(rows):
            prompt += row.prompt_tokens
            if prompt + 1 > max_model_len:
                break  # the conversation no longer fits the context: it ends here
            out = min(row.output_tokens, max_model_len - prompt)
            # the client's cap (workload.max_tokens, in the row's) or the context left
            cap = max(out, min(row.max_tokens, max_model_len - prompt))
            turns.append(
                _Turn(start + t * spec.turn_gap_s, conv, t, row.prompt_tokens, out, cap, prompt)
            )
            prompt += out
    if len(turns) < len(requests):  # (the same message for every point of a sweep alike)
        warn_once(
            logger,
            "workload.num_turns = %d: %d of %d turns are not generated because their "
            "conversation's context (prompt + earlier turns and answers) passes max_model_len = "
            "%s, so the run has %d requests, not workload.num_requests = %d",
            spec.num_turns,
            len(requests) - len(turns),
            len(requests),
            f"{max_model_len:,}",
            len(turns),
            len(requests),
        )
    turns.sort(key=lambda x: (x.arrival_time_s, x.conv, x.turn))
    ids = {(x.conv, x.turn): i for i, x in enumerate(turns)}
    out_reqs: list[Request] = []
    history: dict[int, tuple[tuple[object, int], ...]] = {}
    for x in sorted(turns, key=lambda x: (x.conv, x.turn)):
        req_id = ids[(x.conv, x.turn)]
        salt, tenant = _salt(spec, x.conv)
        segs = history.get(x.conv, ((("sys", tenant), shared),) if shared else ())
        segs = (*segs, (("user", x.conv, x.turn), x.user_tokens))
        history[x.conv] = (*segs, (("gen", req_id), x.output_tokens))
        out_reqs.append(
            Request(
                req_id,
                x.arrival_time_s,
                x.prompt_tokens,
                x.output_tokens,
                x.max_tokens,
                session_id=x.conv,
                token_segments=segs,
                cache_salt=salt,
            )
        )
    out_reqs.sort(key=lambda r: r.req_id)
    return out_reqs
