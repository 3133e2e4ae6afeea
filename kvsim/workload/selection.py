"""Which rows a workload runs, before caps: a trace's rows replayed in time order or resampled
at synthetic arrival times, or lengths drawn from a parametric distribution (redrawn where the
filters reject them). Dropped, repeated and reordered rows are counted in warnings.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvsim.base.say_once import note_once, warn_once
from kvsim.workload.arrivals import arrival_times
from kvsim.workload.identity import RowExtras, num_conversations, session_arrivals
from kvsim.workload.length_table import LengthTable, load_length_table, shipped_table_path
from kvsim.workload.lengths import (
    NAMED_FITS,
    LognormalFit,
    fixed_pair,
    lognormal_pair,
    uniform_split,
)
from kvsim.workload.spec import DEFAULT_NUM_REQUESTS, WorkloadSpec
from kvsim.workload.trace_table import Trace

logger = logging.getLogger(__name__)

_MAX_DRAW_ROUNDS = 50


@dataclass(frozen=True, slots=True)
class Selected:
    """Chosen rows before caps: raw lengths, arrival times (s), optional prefix hashes and the
    trace's other optional columns (``extras``), with the trace file's path (``source``)."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival_time_s: np.ndarray
    prefix_hash_ids: list[tuple[int, ...]] | None = None
    hash_block_size_tokens: int | None = None
    extras: RowExtras | None = None
    source: str = ""


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
        long = keep & (prompt > max_model_len - capped)  # (a sum could wrap past int64)
        keep &= ~long
    if source is not None and short.any():
        # rows of 0 tokens are a data problem; a user's own minimum is a filter they asked for
        default_filters = spec.min_prompt_tokens == 1 and spec.min_output_tokens == 1
        say = warn_once if default_filters else note_once
        say(
            logger,
            "%s: dropped %s of %s rows shorter than min_prompt_tokens = %d or "
            "min_output_tokens = %d",
            source,
            f"{int(short.sum()):,}",
            f"{len(keep):,}",
            spec.min_prompt_tokens,
            spec.min_output_tokens,
        )
    if source is not None and spec.max_tokens is not None:
        capped = int((keep & (output > spec.max_tokens)).sum())
        if capped:  # (counted over the file's kept rows: the same at every point of a sweep)
            note_once(
                logger,
                "%s: workload.max_tokens = %d caps the output of %s of its %s rows kept",
                source,
                spec.max_tokens,
                f"{capped:,}",
                f"{int(keep.sum()):,}",
            )
    if source is not None and long.any():
        note_once(  # overflow = 'drop' is never the default: a filter the config asked for
            logger,
            "%s: overflow='drop' removed %s of %s rows longer than max_model_len = %d",
            source,
            f"{int(long.sum()):,}",
            f"{len(keep):,}",
            max_model_len,
        )
    return np.asarray(keep, dtype=bool)


def count_kept_rows(spec: WorkloadSpec, trace: Trace, max_model_len: int) -> int:
    """Rows of ``trace`` that ``spec``'s filters keep (the minimum lengths, and the length limit
    with ``overflow = "drop"``), without logging: for a caller that describes the filter."""
    prompt, output = trace.prompt_tokens, trace.output_tokens
    if spec.overflow != "drop":  # (source=None reads "reject" as a parametric draw's limit)
        spec = spec.model_copy(update={"overflow": "truncate"})
    return int(_keep_mask(spec, prompt, output, max_model_len, source=None).sum())


def _no_rows_error(spec: WorkloadSpec, what: str, max_model_len: int) -> ValueError:
    return ValueError(
        f"no requests left in {what} after the filters (min_prompt_tokens="
        f"{spec.min_prompt_tokens}, min_output_tokens={spec.min_output_tokens}, "
        f"overflow={spec.overflow!r}, max_model_len={max_model_len}, max_tokens={spec.max_tokens})"
    )


def _synthetic_times(
    spec: WorkloadSpec, rng: np.random.Generator, cap: int | None, what: str = "requests"
) -> np.ndarray:
    """Poisson/gamma arrival times in simulated seconds (``time_scale`` applied), at most
    ``cap`` of them (``what`` they start, for the warning when ``duration_s`` cuts an explicit
    ``num_requests`` short)."""
    assert spec.rate_per_s is not None, "validated: poisson/gamma need rate_per_s"
    cv = 1.0 if spec.arrival == "poisson" else spec.cv
    duration_s = None if spec.duration_s is None else spec.duration_s / spec.time_scale
    times = arrival_times(rng, spec.rate_per_s, cv, num_requests=cap, duration_s=duration_s)
    if spec.num_requests is not None and cap is not None and times.size < cap:
        warn_once(  # (no count drawn or rate: a sweep's points would each say a new text)
            logger,
            "workload.num_requests = %d, but workload.duration_s = %g s ends the arrivals "
            "first: the %s arriving within it run; leave one of the two out to say which "
            "limit counts",
            spec.num_requests,
            spec.duration_s,
            what,
        )
    return times * spec.time_scale


def _row_times(spec: WorkloadSpec, rng: np.random.Generator, num_rows: int | None) -> np.ndarray:
    """Arrival times (s) of the rows to draw: ``num_rows`` at most (``None``: as many as arrive
    within ``duration_s``). With ``num_turns > 1`` the rate counts conversation starts
    (``kvsim.workload.sharing`` chains ``num_turns`` rows a conversation): the first rows get
    the starts, ``ceil(num_rows / num_turns)`` of them or as many as arrive within
    ``duration_s``, and the rest, the later turns' lengths, the last start (sharing gives each
    turn its own time)."""
    turns = spec.num_turns
    if turns == 1:
        return _synthetic_times(spec, rng, num_rows)
    convs = None if num_rows is None else -(-num_rows // turns)
    starts = _synthetic_times(spec, rng, convs, "conversations")
    rows = starts.size * turns if num_rows is None else min(num_rows, starts.size * turns)
    times = np.full(rows, starts[-1] if starts.size else 0.0)
    times[: starts.size] = starts
    return times


def _sampled_count(spec: WorkloadSpec) -> int | None:
    """How many sampled requests to draw (``None``: as many as arrive within ``duration_s``)."""
    if spec.num_requests is not None:
        return spec.num_requests
    return None if spec.duration_s is not None else DEFAULT_NUM_REQUESTS


def select_trace_arrivals(spec: WorkloadSpec, trace: Trace, max_model_len: int) -> Selected:
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
    warn_once(
        logger,
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
    warn_once(
        logger,
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


def select_trace_lengths(
    spec: WorkloadSpec,
    trace: Trace,
    arrival_rng: np.random.Generator,
    length_rng: np.random.Generator,
    max_model_len: int,
) -> Selected:
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
            starts = _synthetic_times(
                spec, arrival_rng, num_conversations(sessions), "conversations"
            )
            kept, arrivals = session_arrivals(sessions, starts, spec.turn_gap_s)
            return _take(trace, pool[:cap][kept], arrivals, spec)
        arrivals = _row_times(spec, arrival_rng, cap)
        rows = pool[: arrivals.size]
    else:
        arrivals = _row_times(spec, arrival_rng, _sampled_count(spec))
        rows = pool[length_rng.integers(0, pool.size, size=arrivals.size)]
        if arrivals.size > pool.size and spec.sample is None:  # an explicit "resample" knows
            warn_once(
                logger,
                "%s: more requests are drawn than its %s: prompt and output lengths are "
                "resampled with replacement, so rows repeat; set workload.sample = 'resample' to "
                "confirm, or 'replay' to run each row once",
                trace.path,  # not the count drawn, which a sweep's or plan's points move
                _rows_of(spec, trace, pool.size),
            )
        if trace.prefix_hash_ids is not None:  # (suspicious, legal: said, not changed)
            warn_once(
                logger,
                "%s: resampled rows keep their hash_ids: a row drawn twice sends its prompt "
                "again (a whole-prompt prefix hit) and a conversation's turns arrive in any "
                "order, so prefix-cache hits are not the trace's (sample = 'replay' keeps its "
                "rows and their order)",
                trace.path,
            )
        if trace.session_ids is not None:
            warn_once(
                logger,
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
) -> Selected:
    hashes = None
    if trace.prefix_hash_ids is not None:
        hashes = [trace.prefix_hash_ids[i] or () for i in rows.tolist()]
    extras = RowExtras.of(trace)
    if extras is not None:
        extras = (extras if sessions else extras.without_sessions()).reorder(rows)
    return Selected(
        trace.prompt_tokens[rows],
        trace.output_tokens[rows],
        arrivals,
        hashes,
        spec.hash_block_size_tokens or trace.hash_block_size_tokens,
        extras,
        str(trace.path),
    )


def length_table(name: str) -> LengthTable:
    """A shipped table by trace name (``sharegpt_opt``) or a table file path (read again once
    the file changes).

    Raises:
        FileNotFoundError: neither a shipped table nor a file.
        ValueError: the file is not a length table (naming it and what is wrong).
    """
    path = shipped_table_path(name) or Path(name)
    if not path.is_file():
        raise FileNotFoundError(f"workload.length_table: no shipped table or file {name!r}")
    return _length_table_at(str(path), path.stat().st_mtime_ns)


@functools.cache
def _length_table_at(path: str, _mtime_ns: int) -> LengthTable:
    return load_length_table(Path(path))


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


def select_parametric(
    spec: WorkloadSpec,
    arrival_rng: np.random.Generator,
    length_rng: np.random.Generator,
    max_model_len: int,
) -> Selected:
    """Draw lengths, redrawing the ones the filters reject (the filtered distribution)."""
    arrivals = _row_times(spec, arrival_rng, _sampled_count(spec))
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
    return Selected(np.concatenate([empty, *prompts]), np.concatenate([empty, *outputs]), arrivals)
