"""Turn a :class:`WorkloadSpec` into a list of :class:`~kvsim.workload.request.Request`, seeded and
sorted.

Randomness comes only from the caller's generator, split into two independent streams (arrivals
and lengths), so changing the rate leaves the drawn lengths unchanged for the same seed.
"""

from __future__ import annotations

import logging

import numpy as np
from pydantic import ValidationError

from kvsim.base.limits import MAX_TIME_S
from kvsim.base.say_once import warn_once
from kvsim.base.units import cdiv, plural
from kvsim.workload.beams import BeamModel
from kvsim.workload.catalog import DataNotFoundError, resolve_trace
from kvsim.workload.fetch import reference_mismatch
from kvsim.workload.identity import attach_identity, check_trace_columns
from kvsim.workload.length_table import shipped_table_path
from kvsim.workload.request import Request
from kvsim.workload.selection import (
    Selected,
    select_parametric,
    select_trace_arrivals,
    select_trace_lengths,
)
from kvsim.workload.sharing import apply_sharing
from kvsim.workload.spec import WorkloadSpec
from kvsim.workload.trace_table import Trace
from kvsim.workload.traces import load_trace

logger = logging.getLogger(__name__)


def generate_requests(
    spec: WorkloadSpec, rng: np.random.Generator, *, max_model_len: int
) -> list[Request]:
    """Generate the requests of a workload.

    Args:
        spec: the workload.
        rng: the only source of randomness; same spec and seed give an identical list.
        max_model_len: the model's context limit in tokens (prompt + output), >= 2.

    Returns:
        Requests sorted by ``arrival_time_s`` (seconds, the first near 0) with ``req_id``
        0..N-1 in arrival order.

    Raises:
        DataNotFoundError: the trace file is missing and ``fallback_synthetic`` is off.
        ValueError: a malformed trace, a trace without arrival times for ``arrival="trace"``,
            no request left after the filters, or arrival times that are not finite or pass
            ``kvsim.base.limits.MAX_TIME_S`` seconds.
    """
    if isinstance(max_model_len, bool) or not isinstance(max_model_len, int) or max_model_len < 2:
        raise ValueError(f"max_model_len must be an integer >= 2 tokens, got {max_model_len!r}")
    spec, trace = _resolve_source(spec)
    arrival_seed, length_seed = rng.integers(0, 2**63 - 1, size=2)
    beam_seed = int(rng.integers(0, 2**63 - 1))  # drawn after the others: they stay as they were
    arrival_rng = np.random.default_rng(int(arrival_seed))
    length_rng = np.random.default_rng(int(length_seed))
    if trace is None:
        selected = select_parametric(spec, arrival_rng, length_rng, max_model_len)
    elif spec.arrival == "trace":
        selected = select_trace_arrivals(spec, trace, max_model_len)
    else:
        selected = select_trace_lengths(spec, trace, arrival_rng, length_rng, max_model_len)
    _check_arrival_times(spec, selected)
    requests = _build_requests(spec, selected, max_model_len)
    requests = apply_sharing(spec, requests, max_model_len)
    if any(r.beam_width > 1 for r in requests):
        beams = BeamModel(spec.beam_branch_tokens, beam_seed)
        for req in requests:
            req.beam_parents = beams.parents(
                req.req_id, req.num_seqs, req.output_tokens, req.prompt_tokens
            )
    return requests


def _check_arrival_times(spec: WorkloadSpec, sel: Selected) -> None:
    """Arrival times are finite and within ``MAX_TIME_S`` simulated seconds.

    Raises:
        ValueError: naming the trace or the synthetic fields that produced the time.
    """
    times = sel.arrival_time_s
    bad = ~np.isfinite(times) | (times > MAX_TIME_S)
    if not bad.any():
        return
    value = float(times[int(np.flatnonzero(bad)[0])])
    where = (
        f"workload.trace {sel.source}: arrival times (start_s {spec.start_s:g}, time_scale "
        f"{spec.time_scale:g})"
        if sel.source and spec.arrival == "trace"
        else f"workload (rate_per_s {spec.rate_per_s!r}, cv {spec.cv:g}, time_scale "
        f"{spec.time_scale:g}): arrival times"
    )
    raise ValueError(
        f"{where} reach {value:g} s; simulated time must stay finite and below {MAX_TIME_S:g} s "
        "(31.7 years)"
    )


def resolved_workload(spec: WorkloadSpec) -> WorkloadSpec:
    """``spec`` as the generator reads it: a trace file's own arrivals resolved (``arrival`` is
    ``None`` until its file is read), a missing trace's synthetic fallback in its place. The
    trace is read from ``load_trace``'s cache after a run.

    Raises:
        DataNotFoundError, ValueError: as generating the requests does.
    """
    return _resolve_source(spec)[0]


def _resolve_source(spec: WorkloadSpec) -> tuple[WorkloadSpec, Trace | None]:
    """Load the spec's trace, or fall back to ``sharegpt_like`` when allowed and missing."""
    if spec.length_source != "trace":
        return spec, None
    assert spec.trace is not None
    try:
        path, info = resolve_trace(spec.trace)
    except DataNotFoundError as exc:
        if not spec.fallback_synthetic:
            raise
        arrival = "gamma" if spec.arrival == "gamma" else "poisson"
        table = shipped_table_path(spec.trace)
        # no per-point value (the rate a sweep or plan moves): said once per run
        warn_once(logger, "%s", fallback_notice(spec, exc))
        fallback = spec.model_copy(
            update={
                "trace": None,
                "lengths": "sharegpt_like" if table is None else "table",
                "length_table": None if table is None else spec.trace,
                "sample": None,
                "arrival": arrival,
                "start_s": 0.0,
            }
        )
        return fallback, None
    mismatch = reference_mismatch(spec.trace, path) if info is not None else None
    if mismatch is not None:
        warn_once(logger, "%s", mismatch)
    fmt = spec.trace_format or (info.fmt if info is not None else None)
    trace = load_trace(path, fmt, tokenizer=spec.tokenizer)
    if spec.arrival is None:  # a trace file: its own arrivals if it has them (validated again)
        resolved = spec.arrival_for(trace.has_arrivals)
        try:
            spec = WorkloadSpec.model_validate({**spec.model_dump(), "arrival": resolved})
        except ValidationError as err:  # (what only the file's arrivals rule out: one line)
            # every field passed before and ``arrival`` is a literal the spec takes, so only
            # the spec's own checks fail here, whose messages name their fields (the config
            # layer's formatter above would be an import back up: kvsim.config imports this)
            said = "; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())
            raise ValueError(f"workload (trace {path}, replayed at its arrivals): {said}") from None
    if spec.arrival == "trace" and not trace.has_arrivals:
        raise ValueError(
            f"arrival='trace': {path} has no arrival times (a lengths-only "
            f"{trace.fmt!r} trace); use arrival='poisson' or 'gamma'"
        )
    if trace.has_arrivals and spec.arrival != "trace" and "arrival" not in spec.model_fields_set:
        asked: list[str] = [f for f in ("rate_per_s", "cv") if f in spec.model_fields_set]
        asked += ["sample = 'resample'"] if spec.sample == "resample" else []
        warn_once(
            logger,
            "%s has arrival times, but workload.%s without workload.arrival asks for "
            "synthetic arrivals: its rows give lengths only, at poisson arrivals at "
            "workload.rate_per_s; set workload.arrival = 'poisson' to say so, or leave %s "
            "out to replay its arrivals",
            path,
            " and workload.".join(asked),
            " and ".join(asked),
        )
    check_trace_columns(spec, trace)
    return spec, trace


def fallback_notice(spec: WorkloadSpec, exc: DataNotFoundError) -> str:
    """The warning a workload with ``fallback_synthetic`` gives when its trace is missing
    (``exc``): what it runs instead (a caller that has said so its own way can pass this text
    to a sweep's ``said``)."""
    assert spec.trace is not None, "only a trace can be missing"
    table = shipped_table_path(spec.trace)
    lengths = (
        f"the joint length table of this trace shipped with kvsim ({table})"
        if table is not None
        else "synthetic 'sharegpt_like' lengths"
    )
    arrival = "gamma" if spec.arrival == "gamma" else "poisson"
    return f"{exc} Falling back to {lengths} with {arrival} arrivals at workload.rate_per_s."


def _build_requests(spec: WorkloadSpec, sel: Selected, max_model_len: int) -> list[Request]:
    """Apply ``max_tokens`` and truncation, sort by arrival, number the requests."""
    prompt = sel.prompt_tokens.astype(np.int64)
    output = sel.output_tokens.astype(np.int64)
    if spec.max_tokens is not None:
        output = np.minimum(output, spec.max_tokens)
    if spec.overflow == "truncate":
        prompt, output = _truncate(sel.source, prompt, output, max_model_len)
    elif spec.overflow == "cut_output":
        output = _cut_outputs(sel.source, prompt, output, max_model_len)
    client_cap = max_model_len if spec.max_tokens is None else spec.max_tokens
    # a row too long for max_model_len keeps its true output as its cap (the run rejects it)
    max_tokens = np.maximum(output, np.minimum(client_cap, max_model_len - prompt))
    order = np.argsort(sel.arrival_time_s, kind="stable")
    extras = sel.extras.reorder(order) if sel.extras is not None else None
    # Python ints and floats in arrival order, converted once (not a numpy scalar per field)
    rows = order.tolist()
    arrivals = sel.arrival_time_s[order].astype(np.float64).tolist()
    prompts = prompt[order].tolist()
    outputs = output[order].tolist()
    caps = max_tokens[order].tolist()
    ns = extras.n.tolist() if extras is not None and extras.n is not None else None
    beams = (
        extras.beam_width.tolist() if extras is not None and extras.beam_width is not None else None
    )
    requests: list[Request] = []
    for req_id, row in enumerate(rows):
        requests.append(
            Request(
                req_id=req_id,
                arrival_time_s=arrivals[req_id],
                prompt_tokens=prompts[req_id],
                output_tokens=outputs[req_id],
                max_tokens=caps[req_id],
                prefix_hash_ids=_hashes_for(sel, row, prompts[req_id]),
                n=1 if ns is None else int(ns[req_id]),
                beam_width=1 if beams is None else int(beams[req_id]),
            )
        )
    if extras is None and not (sel.prefix_hash_ids and sel.hash_block_size_tokens):
        return requests
    return attach_identity(requests, extras, sel.hash_block_size_tokens, sel.source)


def _truncate(
    source: str, prompt: np.ndarray, output: np.ndarray, max_model_len: int
) -> tuple[np.ndarray, np.ndarray]:
    """``overflow="truncate"``: prompts cut to ``max_model_len - 1`` tokens, then outputs to fit;
    the cut rows are counted in a warning (a changed length is never silent)."""
    cut_prompt = np.minimum(prompt, max_model_len - 1)
    cut_output = np.minimum(output, max_model_len - cut_prompt)
    prompt_was_cut, output_was_cut = cut_prompt < prompt, cut_output < output
    prompts_cut, outputs_cut = int(prompt_was_cut.sum()), int(output_was_cut.sum())
    if prompts_cut or outputs_cut:
        warn_once(
            logger,
            "%s: overflow='truncate' cut %d of %d requests to max_model_len = %d tokens (%s "
            "to %d tokens, %s to fit)",
            source or "workload",
            int((prompt_was_cut | output_was_cut).sum()),
            len(prompt),
            max_model_len,
            plural(prompts_cut, "prompt"),
            max_model_len - 1,
            plural(outputs_cut, "output"),
        )
    return cut_prompt, cut_output


def _cut_outputs(
    source: str, prompt: np.ndarray, output: np.ndarray, max_model_len: int
) -> np.ndarray:
    """``overflow="cut_output"``, as vLLM 0.34.0 serves an over-long request: a prompt shorter
    than ``max_model_len`` keeps it and its output is cut to ``max_model_len - prompt``
    (``get_max_tokens`` lowers ``max_tokens`` so; the request finishes by length); a longer
    prompt is left whole, for the run to reject as vLLM does (``_validate_prompt_len``). The
    cut outputs are counted in a warning."""
    fits = prompt < max_model_len
    cut = np.where(fits, np.minimum(output, max_model_len - prompt), output)
    num_cut = int((cut < output).sum())
    if num_cut:
        warn_once(
            logger,
            "%s: overflow='cut_output' cut %d of %d requests' outputs to end at max_model_len "
            "= %d tokens, as vLLM's server lowers their max_tokens",
            source or "workload",
            num_cut,
            len(prompt),
            max_model_len,
        )
    return cut


def _hashes_for(sel: Selected, row: int, prompt_tokens: int) -> tuple[int, ...] | None:
    """The row's prefix hashes, cut to the blocks of a (possibly truncated) prompt."""
    if sel.prefix_hash_ids is None:
        return None
    hashes = sel.prefix_hash_ids[row]
    if sel.hash_block_size_tokens is not None:
        hashes = hashes[: cdiv(prompt_tokens, sel.hash_block_size_tokens)]
    return hashes
