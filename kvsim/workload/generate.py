"""Turn a :class:`WorkloadSpec` into a list of :class:`~kvsim.request.Request`, seeded and sorted.

Randomness comes only from the caller's generator, split into two independent streams (arrivals
and lengths), so changing the rate leaves the drawn lengths unchanged for the same seed.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvsim.groups import BeamModel
from kvsim.limits import MAX_TIME_S
from kvsim.request import Request
from kvsim.units import cdiv
from kvsim.workload.arrivals import arrival_times
from kvsim.workload.catalog import DataNotFoundError, resolve_trace
from kvsim.workload.identity import (
    RowExtras,
    attach_identity,
    check_trace_columns,
    num_conversations,
    session_arrivals,
)
from kvsim.workload.length_table import LengthTable, load_length_table, shipped_table_path
from kvsim.workload.lengths import (
    NAMED_FITS,
    LognormalFit,
    fixed_pair,
    lognormal_pair,
    uniform_split,
)
from kvsim.workload.sharing import apply_sharing
from kvsim.workload.spec import DEFAULT_NUM_REQUESTS, WorkloadSpec
from kvsim.workload.traces import Trace, load_trace

logger = logging.getLogger(__name__)

_MAX_DRAW_ROUNDS = 50


@dataclass(frozen=True, slots=True)
class _Selected:
    """Chosen rows before caps: raw lengths, arrival times (s), optional prefix hashes and the
    trace's other optional columns (``extras``), with the trace file's path (``source``)."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival_time_s: np.ndarray
    prefix_hash_ids: list[tuple[int, ...]] | None = None
    hash_block_size_tokens: int | None = None
    extras: RowExtras | None = None
    source: str = ""


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
            ``kvsim.limits.MAX_TIME_S`` seconds.
    """
    if isinstance(max_model_len, bool) or not isinstance(max_model_len, int) or max_model_len < 2:
        raise ValueError(f"max_model_len must be an integer >= 2 tokens, got {max_model_len!r}")
    spec, trace = _resolve_source(spec)
    arrival_seed, length_seed = rng.integers(0, 2**63 - 1, size=2)
    beam_seed = int(rng.integers(0, 2**63 - 1))  # drawn after the others: they stay as they were
    arrival_rng = np.random.default_rng(int(arrival_seed))
    length_rng = np.random.default_rng(int(length_seed))
    if trace is None:
        selected = _select_parametric(spec, arrival_rng, length_rng, max_model_len)
    elif spec.arrival == "trace":
        selected = _select_trace_arrivals(spec, trace, max_model_len)
    else:
        selected = _select_trace_lengths(spec, trace, arrival_rng, length_rng, max_model_len)
    _check_arrival_times(spec, selected)
    requests = _build_requests(spec, selected, max_model_len)
    requests = apply_sharing(spec, requests, max_model_len)
    if any(r.beam_width > 1 for r in requests):
        beams = BeamModel(spec.beam_branch_prob, beam_seed)
        for req in requests:
            req.beam_parents = beams.parents(req.req_id, req.num_seqs, req.output_tokens)
    return requests


def _check_arrival_times(spec: WorkloadSpec, sel: _Selected) -> None:
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


_WARNED: set[str] = set()


def _warn_once(fmt: str, *args: object) -> None:
    """Log a warning the first time this exact message comes up in the process."""
    message = fmt % args
    if message not in _WARNED:
        _WARNED.add(message)
        logger.warning(message)


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
        arrival = "poisson" if spec.arrival == "trace" else spec.arrival
        table = shipped_table_path(spec.trace)
        lengths = f"the joint length table of this trace shipped with kvsim ({table})"
        _warn_once(
            "%s Falling back to %s with %s arrivals at %s req/s.",
            exc,
            lengths if table is not None else "synthetic 'sharegpt_like' lengths",
            arrival,
            spec.rate_per_s,
        )
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
    fmt = spec.trace_format or (info.fmt if info is not None else None)
    trace = load_trace(path, fmt, tokenizer=spec.tokenizer)
    if spec.arrival == "trace" and not trace.has_arrivals:
        raise ValueError(
            f"arrival='trace': {path} has no arrival times (a lengths-only "
            f"{trace.fmt!r} trace); use arrival='poisson' or 'gamma'"
        )
    if trace.has_arrivals and spec.arrival != "trace" and "arrival" not in spec.model_fields_set:
        _warn_once(
            "%s has arrival times, but workload.arrival is the default %r: its rows give "
            "lengths only, at %s arrivals (workload.rate_per_s = %g); set workload.arrival = "
            "'trace' to replay its arrivals",
            path,
            spec.arrival,
            spec.arrival,
            spec.rate_per_s,
        )
    check_trace_columns(spec, trace)
    return spec, trace


def _keep_mask(
    spec: WorkloadSpec,
    prompt: np.ndarray,
    output: np.ndarray,
    max_model_len: int,
    *,
    source: str | None = None,
) -> np.ndarray:
    """Rows passing the minimum-length filters and, for ``overflow="drop"`` (or parametric
    draws, ``source=None``), the length limit. A trace's dropped rows are logged with counts."""
    short = (prompt < spec.min_prompt_tokens) | (output < spec.min_output_tokens)
    keep = ~short
    long = np.zeros_like(keep)
    if spec.overflow == "drop" or (source is None and spec.overflow == "reject"):
        capped = output if spec.max_tokens is None else np.minimum(output, spec.max_tokens)
        long = keep & (prompt + capped > max_model_len)
        keep &= ~long
    if source is not None and short.any():
        # rows of 0 tokens are a data problem; a user's own minimum is a filter they asked for
        default_filters = spec.min_prompt_tokens == 1 and spec.min_output_tokens == 1
        log = _warn_once if default_filters else logger.info
        log(
            "%s: dropped %d of %d rows shorter than min_prompt_tokens = %d or "
            "min_output_tokens = %d",
            source,
            int(short.sum()),
            len(keep),
            spec.min_prompt_tokens,
            spec.min_output_tokens,
        )
    if source is not None and long.any():
        _warn_once(  # a count the user sees, not a silent filter
            "%s: overflow='drop' removed %d of %d rows longer than max_model_len = %d",
            source,
            int(long.sum()),
            len(keep),
            max_model_len,
        )
    return np.asarray(keep, dtype=bool)


def _no_rows_error(spec: WorkloadSpec, what: str, max_model_len: int) -> ValueError:
    return ValueError(
        f"no requests left in {what} after the filters (min_prompt_tokens="
        f"{spec.min_prompt_tokens}, min_output_tokens={spec.min_output_tokens}, "
        f"overflow={spec.overflow!r}, max_model_len={max_model_len}, max_tokens={spec.max_tokens})"
    )


def _synthetic_times(spec: WorkloadSpec, rng: np.random.Generator, cap: int | None) -> np.ndarray:
    """Poisson/gamma arrival times in simulated seconds (``time_scale`` applied)."""
    assert spec.rate_per_s is not None, "validated: poisson/gamma need rate_per_s"
    cv = 1.0 if spec.arrival == "poisson" else spec.cv
    duration_s = None if spec.duration_s is None else spec.duration_s / spec.time_scale
    times = arrival_times(rng, spec.rate_per_s, cv, num_requests=cap, duration_s=duration_s)
    return times * spec.time_scale


def _sampled_count(spec: WorkloadSpec) -> int | None:
    """How many sampled requests to draw (``None``: as many as arrive within ``duration_s``)."""
    if spec.num_requests is not None:
        return spec.num_requests
    return None if spec.duration_s is not None else DEFAULT_NUM_REQUESTS


def _select_trace_arrivals(spec: WorkloadSpec, trace: Trace, max_model_len: int) -> _Selected:
    assert trace.arrival_time_s is not None
    times = trace.arrival_time_s
    keep = _keep_mask(
        spec, trace.prompt_tokens, trace.output_tokens, max_model_len, source=str(trace.path)
    )
    keep &= times >= spec.start_s
    if spec.duration_s is not None:
        keep &= times < spec.start_s + spec.duration_s
    rows = np.flatnonzero(keep)
    _warn_unsorted(trace, rows)
    rows = rows[np.argsort(times[rows], kind="stable")][: spec.num_requests]
    if rows.size == 0:
        window = f"[{spec.start_s}, {spec.start_s + (spec.duration_s or np.inf)}) s"
        raise _no_rows_error(spec, f"{trace.path} window {window}", max_model_len)
    _warn_short(spec, trace, rows.size)
    arrivals = (times[rows] - spec.start_s) * spec.time_scale
    return _take(trace, rows, arrivals, spec)


def _warn_unsorted(trace: Trace, rows: np.ndarray) -> None:
    """Say how many of the replayed ``rows`` (file order) arrive before a row above them: they
    are replayed in time order, which is not the file's."""
    assert trace.arrival_time_s is not None
    times = trace.arrival_time_s[rows]
    early = times < np.maximum.accumulate(times)  # ties keep file order: not counted
    if not early.any():
        return
    _warn_once(
        "%s: %d of %d rows arrive before a row above them (first at %s); replaying them sorted "
        "by arrival time",
        trace.path,
        int(early.sum()),
        rows.size,
        trace.where(int(rows[int(np.flatnonzero(early)[0])])),
    )


def _warn_short(spec: WorkloadSpec, trace: Trace, num_rows: int) -> None:
    """Say so when an explicit ``num_requests`` asks for more rows than a replay has
    (``num_rows``: rows left to replay)."""
    if spec.num_requests is None or num_rows >= spec.num_requests:
        return
    _warn_once(
        "%s: workload.num_requests = %d, but the trace has only %s to replay; running %d requests",
        trace.path,
        spec.num_requests,
        _rows_of(spec, trace, num_rows),
        num_rows,
    )


def _rows_of(spec: WorkloadSpec, trace: Trace, num_rows: int) -> str:
    """``"3 rows"``, or ``"3 rows (of 5 in the file, after the filters)"`` when the filters or
    the trace window left some out."""
    if num_rows == trace.num_rows:
        return f"{num_rows} rows"
    windowed = spec.arrival == "trace" and (spec.start_s > 0 or spec.duration_s is not None)
    after = "the filters and the window" if windowed else "the filters"
    return f"{num_rows} rows (of {trace.num_rows} in the file, after {after})"


def _select_trace_lengths(
    spec: WorkloadSpec,
    trace: Trace,
    arrival_rng: np.random.Generator,
    length_rng: np.random.Generator,
    max_model_len: int,
) -> _Selected:
    mask = _keep_mask(
        spec, trace.prompt_tokens, trace.output_tokens, max_model_len, source=str(trace.path)
    )
    pool = np.flatnonzero(mask)
    if pool.size == 0:
        raise _no_rows_error(spec, str(trace.path), max_model_len)
    if spec.sample_mode == "replay":
        cap = pool.size if spec.num_requests is None else min(spec.num_requests, pool.size)
        _warn_short(spec, trace, cap)
        if trace.session_ids is not None:  # conversations start at the drawn times
            sessions = [trace.session_ids[i] for i in pool[:cap].tolist()]
            starts = _synthetic_times(spec, arrival_rng, num_conversations(sessions))
            kept, arrivals = session_arrivals(sessions, starts, spec.turn_gap_s)
            return _take(trace, pool[:cap][kept], arrivals, spec)
        arrivals = _synthetic_times(spec, arrival_rng, cap)
        rows = pool[: arrivals.size]
    else:
        arrivals = _synthetic_times(spec, arrival_rng, _sampled_count(spec))
        rows = pool[length_rng.integers(0, pool.size, size=arrivals.size)]
        if arrivals.size > pool.size and spec.sample is None:  # an explicit "resample" knows
            _warn_once(
                "%s: %d requests drawn from %s: prompt and output lengths are resampled with "
                "replacement, so rows repeat; set workload.sample = 'resample' to confirm, or "
                "'replay' to run each row once",
                trace.path,
                arrivals.size,
                _rows_of(spec, trace, pool.size),
            )
        if trace.session_ids is not None:
            _warn_once(
                "%s: session_id ignored: resampled rows are not conversations (use "
                "sample='replay' to keep them)",
                trace.path,
            )
            return _take(trace, rows, arrivals, spec, sessions=False)
    return _take(trace, rows, arrivals, spec)


def _take(
    trace: Trace,
    rows: np.ndarray,
    arrivals: np.ndarray,
    spec: WorkloadSpec,
    *,
    sessions: bool = True,
) -> _Selected:
    hashes = None
    if trace.prefix_hash_ids is not None:
        hashes = [trace.prefix_hash_ids[i] for i in rows.tolist()]
    extras = RowExtras.of(trace)
    if extras is not None:
        extras = (extras if sessions else extras.without_sessions()).reorder(rows)
    return _Selected(
        trace.prompt_tokens[rows],
        trace.output_tokens[rows],
        arrivals,
        hashes,
        spec.hash_block_size_tokens or trace.hash_block_size_tokens,
        extras,
        str(trace.path),
    )


@functools.cache
def length_table(name: str) -> LengthTable:
    """A shipped table by trace name (``sharegpt_opt``) or a table file path.

    Raises:
        FileNotFoundError: neither a shipped table nor a file.
        ValueError: the file is not a length table (naming it and what is wrong).
    """
    path = shipped_table_path(name) or Path(name)
    if not path.is_file():
        raise FileNotFoundError(f"workload.length_table: no shipped table or file {name!r}")
    return load_length_table(path)


def _draw_lengths(
    spec: WorkloadSpec, rng: np.random.Generator, size: int
) -> tuple[np.ndarray, np.ndarray]:
    source = spec.length_source
    if source in NAMED_FITS:
        return lognormal_pair(rng, NAMED_FITS[source], size)
    if source == "lognormal":
        fit = LognormalFit(
            spec.prompt_mean_tokens, spec.output_mean_tokens, spec.prompt_sigma, spec.output_sigma
        )
        return lognormal_pair(rng, fit, size)
    if source == "uniform":
        return uniform_split(
            rng, spec.min_total_tokens, spec.max_total_tokens, spec.prefill_decode_ratio, size
        )
    if source == "table":
        assert spec.length_table is not None
        return length_table(spec.length_table).sample(rng, size)
    assert source == "fixed", f"unhandled length source {source!r}"
    return fixed_pair(spec.fixed_prompt_tokens, spec.fixed_output_tokens, size)


def _select_parametric(
    spec: WorkloadSpec,
    arrival_rng: np.random.Generator,
    length_rng: np.random.Generator,
    max_model_len: int,
) -> _Selected:
    """Draw lengths, redrawing the ones the filters reject (the filtered distribution)."""
    arrivals = _synthetic_times(spec, arrival_rng, _sampled_count(spec))
    needed = arrivals.size
    prompts: list[np.ndarray] = []
    outputs: list[np.ndarray] = []
    have = 0
    for _ in range(_MAX_DRAW_ROUNDS):
        if have >= needed:
            break
        prompt, output = _draw_lengths(spec, length_rng, max(2 * (needed - have), 64))
        keep = _keep_mask(spec, prompt, output, max_model_len)
        prompt, output = prompt[keep][: needed - have], output[keep][: needed - have]
        prompts.append(prompt)
        outputs.append(output)
        have += prompt.size
    if have < needed:
        raise _no_rows_error(spec, f"the {spec.length_source!r} distribution", max_model_len)
    empty = np.zeros(0, dtype=np.int64)
    return _Selected(np.concatenate([empty, *prompts]), np.concatenate([empty, *outputs]), arrivals)


def _build_requests(spec: WorkloadSpec, sel: _Selected, max_model_len: int) -> list[Request]:
    """Apply ``max_tokens`` and truncation, sort by arrival, number the requests."""
    prompt = sel.prompt_tokens.astype(np.int64)
    output = sel.output_tokens.astype(np.int64)
    if spec.max_tokens is not None:
        output = np.minimum(output, spec.max_tokens)
    if spec.overflow == "truncate":
        prompt = np.minimum(prompt, max_model_len - 1)
        output = np.minimum(output, max_model_len - prompt)
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


def _hashes_for(sel: _Selected, row: int, prompt_tokens: int) -> tuple[int, ...] | None:
    """The row's prefix hashes, cut to the blocks of a (possibly truncated) prompt."""
    if sel.prefix_hash_ids is None:
        return None
    hashes = sel.prefix_hash_ids[row]
    if sel.hash_block_size_tokens is not None:
        hashes = hashes[: cdiv(prompt_tokens, sel.hash_block_size_tokens)]
    return hashes
