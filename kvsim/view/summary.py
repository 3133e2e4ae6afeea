"""A run's summary for people: sections that apply to what ran, numbers rounded, two runs compared.

``summary_table`` shows KV memory, scheduling and latency always; prefix-cache lines when prefix
caching ran (the hits of re-admissions after a preemption and the evictions when there were any),
sharing lines when sequences shared blocks, swap lines under swap preemption, KV cache group lines
for a hybrid model's groups (one set per kind of group), speculative decoding lines when drafts
were proposed, CPU offload lines when a CPU tier ran; and where the step cost's paged-layout
factor came from (measured or the analytic default). Goodput needs an ``[slo]`` target: without
one its rows show ``-`` (``kvsim.results.money``).
``compare_table`` puts two summaries side by side with their differences.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable
from typing import Any

import numpy as np
from rich.table import Table

from kvsim.view.labels import (
    METRIC_LABELS,
    display_unit,
    field_unit,
    field_value,
    metric_unit,
)

Row = tuple[str, str]  # (summary key, label)

KV_ROWS: tuple[Row, ...] = (
    ("token_states_pct", "token states (% of KV)"),
    ("reservation_pct", "reservation (% of KV)"),
    ("internal_fragmentation_pct", "internal fragmentation (% of KV)"),
    ("external_fragmentation_pct", "external fragmentation (% of KV)"),
    ("free_pct", "free (% of KV)"),
    ("kv_cache_usage_perc", "kv_cache_usage_perc, mean (0-1)"),
    ("kv_cache_usage_perc_max", "kv_cache_usage_perc, peak (0-1)"),
    ("kv_cache_full_time_frac", "time with KV full (>= 0.99 used, share of the busy time)"),
    ("token_utilization_perc", METRIC_LABELS["token_utilization_perc"]),
)
SCHEDULER_ROWS: tuple[Row, ...] = (
    ("num_requests_running_mean", "num_requests_running, mean"),
    ("num_requests_running_max", "num_requests_running, max"),
    ("num_requests_waiting_mean", "num_requests_waiting, mean"),
    ("num_blocked_steps", "blocked steps (head fits in total free, no hole)"),
    ("num_preemptions", "num_preemptions"),
    ("preemptions_per_request", "preemptions per request"),
    ("num_requests_rejected", "requests rejected (too long for max_model_len or the pool)"),
)
PREFIX_ROWS: tuple[Row, ...] = (
    ("prefix_cache_hit_rate", "prefix_cache_hits / prefix_cache_queries"),
    ("prefix_cache_hits", "prefix_cache_hits (tokens)"),
    ("prefix_cache_queries", "prefix_cache_queries (tokens)"),
    ("prefix_cached_tokens_total", "prompt tokens served from a cache (GPU or an offload tier)"),
    ("prefix_cache_preempted_hits", "prefix_cache_preempted_hits (tokens, re-admitted requests)"),
    (
        "prefix_cache_preempted_queries",
        "prefix_cache_preempted_queries (tokens, re-admitted requests)",
    ),
    (
        "prefix_cache_saved_bytes",
        "KV not recomputed, GPU prefix cache (hits + preempted hits, run total, one GPU's share)",
    ),
    ("num_cache_evictions", "num_cache_evictions (free blocks reused that held a full block)"),
    ("num_evicted_tokens", "cached tokens evicted (radix tree)"),
)
# rows shown only when non-zero: a request admitted again after a preemption counts in vLLM's
# preempted pair (vllm/v1/metrics/stats.py PrefixCacheStats), not in the hits above, and
# evictions happen only once the pool is full; zeros there say nothing
NONZERO_ROWS = frozenset(
    {
        "prefix_cache_preempted_hits",
        "prefix_cache_preempted_queries",
        "prefix_cache_saved_bytes",
        "num_cache_evictions",
        "num_evicted_tokens",
        "kv_offload_loads_dropped",
        "kv_offload_allocation_failures",
    }
)
# rows shown only with [slo] targets (NaN without: nothing to meet)
SLO_ROWS = frozenset({"slo_attainment", "goodput_requests_per_s", "goodput_requests_per_usd"})
SHARING_ROWS: tuple[Row, ...] = (
    ("kv_saved_by_sharing_pct", "KV saved by sharing (%)"),
    ("num_cow_copies", "copy-on-write block copies"),
    ("cow_copy_bytes", "copy-on-write bytes"),
)
SWAP_ROWS: tuple[Row, ...] = (
    ("num_swap_outs", "swap-outs"),
    ("num_swap_ins", "swap-ins"),
    ("num_swap_fallbacks", "swap fallbacks to recompute (CPU pool full)"),
    ("swap_out_bytes", "bytes swapped out"),
    ("swap_time_s", "time spent swapping (s)"),
)
# hybrid KV cache groups (``kvsim.engine.group_recorder``): the groups, then ``group_rows``'s
# per-kind rows (all of them run rows, ``RUN_ROWS``: no plan target bounds a group's layout)
GROUP_ROWS: tuple[Row, ...] = (
    ("kv_cache_groups", "KV cache groups"),
    ("kv_cache_group_kinds", "of each kind"),
    ("kv_cache_group_layers", "layers a group"),
    ("kv_cache_padding_layers", "padding layers (a kind's last group made whole)"),
    ("kv_cache_block_size_tokens", "block size (tokens)"),
)
GROUP_CATEGORY_LABELS: tuple[tuple[str, str], ...] = (
    ("held", "held (% of KV)"),
    ("token_states", "token states (% of KV)"),
    ("outside_window", "outside the window (% of KV)"),
    ("internal", "internal frag. (% of KV)"),
)
SPEC_ROWS: tuple[Row, ...] = (
    ("num_speculative_tokens", "draft tokens a step (num_speculative_tokens)"),
    ("num_lookahead_tokens", "lookahead slots reserved at every allocation"),
    ("reservation_pct_of_used", "reservation, lookahead slots included (% of used KV)"),
    ("spec_decode_num_drafts", "spec_decode_num_drafts"),
    ("spec_decode_num_draft_tokens", "spec_decode_num_draft_tokens"),
    ("spec_decode_num_accepted_tokens", "spec_decode_num_accepted_tokens"),
    (  # (below the configured rate: a draft counts only once every draft before it is accepted)
        "spec_decode_draft_acceptance_rate",
        "draft acceptance rate (accepted / draft tokens)",
    ),
    ("spec_decode_mean_acceptance_length", "mean acceptance length (tokens a verification)"),
)
OFFLOAD_ROWS: tuple[Row, ...] = (
    ("cpu_tier_blocks", "CPU tier (blocks, one GPU's share; a fleet's: each replica's)"),
    (
        "external_prefix_cache_hit_rate",
        "external_prefix_cache_hits / external_prefix_cache_queries",
    ),
    ("external_prefix_cache_hits", "external_prefix_cache_hits (tokens)"),
    ("external_prefix_cache_queries", "external_prefix_cache_queries (tokens)"),
    ("kv_offload_loads", "loads from the CPU tier"),
    (
        "kv_offload_bytes_cpu_to_gpu",
        "KV not recomputed, loaded CPU -> GPU (run total, one GPU's share)",
    ),
    ("kv_offload_bytes_gpu_to_cpu", "KV stored, GPU -> CPU (run total, one GPU's share)"),
    ("kv_offload_load_wait_s", "time requests waited for loads (sum)"),
    ("cpu_tier_stored_blocks", "blocks stored in the tier (from the GPU or the disk)"),
    ("cpu_tier_evicted_blocks", "blocks evicted from the tier"),
    ("kv_offload_loads_dropped", "loads dropped (their blocks freed for a stuck queue)"),
    (
        "kv_offload_allocation_failures",
        "stores the tier found no room for (one a request a step)",
    ),
)
DISK_ROWS: tuple[Row, ...] = (
    ("disk_tier_blocks", "disk tier (blocks, one GPU's share; a fleet's: each replica's)"),
    ("disk_tier_promoted_blocks", "blocks promoted, disk -> CPU"),
    ("disk_tier_promotions", "promotion jobs (one a lookup)"),
    ("external_prefix_cache_hits_disk", "external_prefix_cache_hits from the disk (tokens)"),
    ("kv_offload_bytes_disk_to_cpu", "KV read, disk -> CPU (one GPU's share)"),
    ("kv_offload_bytes_cpu_to_disk", "KV written, CPU -> disk (one GPU's share)"),
    ("kv_offload_time_disk_to_cpu_s", "disk read link busy"),
    ("kv_offload_time_cpu_to_disk_s", "disk write link busy"),
    ("disk_tier_written_blocks", "blocks written to the disk"),
    ("disk_tier_evicted_blocks", "blocks evicted from the disk"),
)
LATENCY_ROWS: tuple[Row, ...] = (
    ("throughput_requests_per_s", "throughput (client requests/s)"),
    ("throughput_output_tokens_per_s", "throughput (output tokens/s)"),
    ("time_to_first_token_seconds_mean", "time_to_first_token_seconds mean"),
    ("time_to_first_token_seconds_p50", "time_to_first_token_seconds p50"),
    ("time_to_first_token_seconds_p90", "time_to_first_token_seconds p90"),
    ("time_to_first_token_seconds_p99", "time_to_first_token_seconds p99"),
    ("inter_token_latency_seconds_mean", "inter_token_latency_seconds mean"),
    ("request_time_per_output_token_seconds_p99", "request_time_per_output_token_seconds p99"),
    ("request_queue_time_seconds_p50", "request_queue_time_seconds p50"),
    ("e2e_request_latency_seconds_p50", "e2e_request_latency_seconds p50"),
    ("e2e_request_latency_seconds_p99", "e2e_request_latency_seconds p99"),
)

MONEY_ROWS: tuple[Row, ...] = (
    ("usd_per_hour", "GPUs' price (USD per hour)"),
    ("cost_usd", "cost of the run (USD)"),
    ("usd_per_million_output_tokens", "USD per million output tokens"),
    ("slo_attainment", "requests meeting every slo.* target (share)"),
    ("goodput_requests_per_s", "goodput (requests meeting every target / s)"),
    ("goodput_requests_per_usd", "goodput per dollar (requests meeting every target / USD)"),
)
FLEET_ROWS: tuple[Row, ...] = (
    ("num_replicas", "replicas"),
    ("num_prefill_replicas", "of them prefill replicas (disaggregated)"),
    ("num_gpus", "GPUs"),
    ("kv_transfer_seconds_mean", "KV transfer, prefill to decode, mean"),
    ("kv_transfer_bytes_total", "KV moved between replicas (every GPU's)"),
    ("replica_requests_max_share", "busiest replica's share of its role's requests"),
)


def _positive(summary: dict[str, Any], *keys: str) -> bool:
    return any(_number(summary.get(k)) > 0 for k in keys)


def _is_number(value: Any) -> bool:
    """Whether ``value`` is a number other than NaN (``None`` is not)."""
    try:
        return not math.isnan(float(value))
    except (TypeError, ValueError):
        return False


def _number(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


def group_rows(summary: dict[str, Any]) -> tuple[Row, ...]:
    """The rows of a hybrid run: ``GROUP_ROWS``, then one set per kind of group, read from its
    first group (every group of a kind holds the same positions:
    ``HybridPagedAllocator.kind_slots``)."""
    kinds = str(summary.get("kv_cache_group_kinds", "")).split(",")
    rows: list[Row] = list(GROUP_ROWS)
    for kind in dict.fromkeys(k for k in kinds if k):
        groups = [g for g, k in enumerate(kinds) if k == kind]
        first = groups[0]
        if len(groups) == 1:
            which = f"group {first} ({kind})"
        elif groups == list(range(first, first + len(groups))):
            which = f"groups {first}-{groups[-1]} ({kind}) each"
        else:
            which = f"groups {','.join(map(str, groups))} ({kind}) each"
        for category, label in GROUP_CATEGORY_LABELS:
            if category == "outside_window" and kind != "sliding":
                continue  # only a window leaves tokens outside it
            rows.append((f"group{first}_{kind}_{category}_pct", f"{which}: {label}"))
    return tuple(rows)


SECTIONS: tuple[tuple[str, tuple[Row, ...], Callable[[dict[str, Any]], bool]], ...] = (
    ("KV memory", KV_ROWS, lambda s: True),
    ("KV cache groups", (), lambda s: "kv_cache_groups" in s),  # rows: RUN_ROWS
    ("scheduler", SCHEDULER_ROWS, lambda s: True),
    ("speculative decoding", SPEC_ROWS, lambda s: _positive(s, "num_speculative_tokens")),
    (
        "prefix cache",
        PREFIX_ROWS,
        lambda s: (
            bool(s.get("enable_prefix_caching"))
            or _positive(s, "prefix_cache_hits", "prefix_cache_preempted_hits")
        ),
    ),
    # (a fleet whose replicas' tiers differ in blocks has no cpu_tier_blocks, its counters all
    # the same)
    (
        "CPU offload tier",
        OFFLOAD_ROWS,
        lambda s: "cpu_tier_blocks" in s or "cpu_tier_stored_blocks" in s,
    ),
    (
        "disk offload tier",
        DISK_ROWS,
        lambda s: "disk_tier_blocks" in s or "disk_tier_written_blocks" in s,
    ),
    ("sharing", SHARING_ROWS, lambda s: _positive(s, "kv_saved_by_sharing_pct", "num_cow_copies")),
    (
        "swap",
        SWAP_ROWS,
        lambda s: s.get("preemption_mode") == "swap" or _positive(s, "num_swap_outs"),
    ),
    ("latency", LATENCY_ROWS, lambda s: True),
    ("fleet", FLEET_ROWS, lambda s: "num_replicas" in s),
    ("money", MONEY_ROWS, lambda s: True),
)
# sections with rows that depend on the run beyond their fixed ones (the groups a model has);
# a plan's targets (``kvsim.study.targets``) bound only the fixed ones
RUN_ROWS: dict[str, Callable[[dict[str, Any]], tuple[Row, ...]]] = {"KV cache groups": group_rows}


def format_metric(key: str, value: Any) -> str:
    """``value`` rounded for people by what ``key`` measures.

    Percentages to 0.1, fractions (``_perc``, ``_frac``, ``_rate``) to 0.001, seconds to three
    significant figures (milliseconds below one second), bytes in GiB (MiB or KiB below one),
    counts with thousands
    separators; text and flags as they are, a list or table (a swept setting) as JSON.
    """
    if value is None:
        return "-"
    if key == "kv_cache_group_kinds" and isinstance(value, str):  # "full,sliding,sliding"
        kinds = value.split(",")
        return " + ".join(f"{kinds.count(k)} {k}" for k in dict.fromkeys(kinds))
    if isinstance(value, (bool, str, np.bool_)):
        return str(value)
    if not isinstance(value, numbers.Real):  # a swept setting: a list or table (an array
        plain = value.tolist() if hasattr(value, "tolist") else value  # read back from Parquet)
        return json.dumps(plain, default=str)
    big = key.endswith(("_bytes", "_bytes_total")) or key.startswith("kv_offload_bytes_")
    if isinstance(value, int):
        return bytes_text(value) if big else f"{value:,}"
    number = float(value)
    if math.isnan(number):
        return "-"
    if math.isinf(number):  # (int(inf) raises: a summary of a run with no time, say)
        return "inf" if number > 0 else "-inf"
    if big:
        return bytes_text(number)
    if key.startswith("usd_") or key == "cost_usd":
        sign, size = ("-" if number < 0 else ""), abs(number)  # (-$6.85, not $-6.85)
        return f"{sign}${_significant(size, 4)}" if size < 1000 else f"{sign}${size:,.0f}"
    if key.endswith("_pct") or key.endswith("_pct_of_used") or key == "token_utilization_perc":
        return f"{number:.1f}"
    if key.endswith("_per_s"):
        return _significant(number, 3) if abs(number) < 1000 else f"{number:,.0f}"
    if "seconds" in key or key.endswith("_s"):
        if abs(number) < 1:
            return f"{number * 1e3:.3g} ms"
        return f"{number:,.3g} s" if abs(number) < 1000 else f"{number:,.0f} s"  # (no 2.1e+03)
    if key.endswith(("_perc", "_perc_max", "_frac", "_rate", "per_request", "_share")) or (
        key == "slo_attainment"
    ):
        return f"{number:.3f}"
    if number == int(number) and abs(number) < 1e15:
        return f"{int(number):,}"
    return _significant(number, 3) if abs(number) < 1000 else f"{number:,.0f}"


def bytes_text(number: float) -> str:
    """Bytes in GiB to two places, or below a GiB in MiB or KiB to four figures, whole bytes
    below a KiB (a 64 KiB page read "0.00 GiB"); zero as "0.00 GiB". A value that would round
    to 1,024 of a unit is written in the next."""
    size = abs(number)
    if size == 0:
        return "0.00 GiB"
    if size >= 2**30 * (1 - 5e-3):  # (1,018.9 MiB and up: "1.00 GiB", not "1024 MiB")
        return f"{number / 2**30:,.2f} GiB"
    for unit, name in ((2**20, "MiB"), (2**10, "KiB")):
        if size >= unit * (1 - 5e-4):  # (1,023.5 KiB and up: "1 MiB", not "1024 KiB")
            return f"{number / unit:.4g} {name}"
    return f"{number:,.0f} B"


def _significant(number: float, digits: int) -> str:
    """``number`` (below 1,000 in size) to ``digits`` significant figures, written out:
    ``0.00000685``, not ``6.85e-06``."""
    text = f"{number:,.{digits}g}"
    if "e" in text:
        places = digits - 1 - math.floor(math.log10(abs(number)))
        text = f"{number:.{places}f}"
    return text


def sections(summary: dict[str, Any]) -> list[tuple[str, list[Row]]]:
    """The sections that apply to ``summary``, each with the rows it has."""
    out = []
    for name, rows, applies in SECTIONS:
        if not applies(summary):
            continue
        if name in RUN_ROWS:
            rows = (*rows, *RUN_ROWS[name](summary))
        present = [
            (k, label)
            for k, label in rows
            if k in summary
            and (k not in NONZERO_ROWS or _positive(summary, k))
            and (k not in SLO_ROWS or _is_number(summary[k]))
        ]
        if present:
            out.append((name, present))
    return out


def cost_note(summary: dict[str, Any]) -> str | None:
    """Where the step cost's paged-layout factor came from, when the run recorded it (a fleet
    whose replicas differ in GPU or layout records neither: ``kvsim.fleet.summary.SHARED``)."""
    if "layout_factor" not in summary or "layout_source" not in summary:
        return None
    factor, source = summary["layout_factor"], summary["layout_source"]
    if source.startswith("contiguous"):  # (a slab or vAttention run reads no block table)
        return f"step cost: {source}"
    return f"step cost: paged layout factor {factor:.3g}, {source}"


def summary_table(summary: dict[str, Any], title: str) -> Table:
    """The run's summary as a rich table, one titled block per applicable section."""
    table = Table(title=title, show_header=False, title_justify="left")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for i, (name, rows) in enumerate(sections(summary)):
        if i:
            table.add_section()
        table.add_row(f"[bold]{name}[/]", "")
        for key, label in rows:
            table.add_row(f"  {label}", format_metric(key, summary[key]))
    note = cost_note(summary)
    if note:
        table.caption = note
    return table


REPLICA_SHOWN: tuple[Row, ...] = (
    ("num_requests", "requests"),
    ("time_to_first_token_seconds_p50", "TTFT p50"),
    ("time_to_first_token_seconds_p99", "TTFT p99"),
    ("request_time_per_output_token_seconds_p99", "TPOT p99"),
    ("kv_cache_usage_perc", "KV usage"),
    ("num_preemptions", "preemptions"),
    ("prefix_cache_hit_rate", "prefix hit rate"),
)
# with a KV offload tier: the tier's hit rate and what its loads moved
REPLICA_OFFLOAD_SHOWN: tuple[Row, ...] = (
    ("external_prefix_cache_hit_rate", "tier hit rate"),
    ("kv_offload_bytes_cpu_to_gpu", "loaded CPU -> GPU"),
)


def replica_table(replicas: Any) -> Table:
    """A fleet's per-replica metrics (``Results.replicas``, a DataFrame) as a rich table; its
    replicas' models where they differ."""
    table = Table(title="replicas", title_justify="left")
    models = "model" in replicas and replicas["model"].nunique() > 1
    for name in ("replica", "role", *(("model",) if models else ()), "GPU x TP"):
        table.add_column(name)
    shown = REPLICA_SHOWN + tuple(r for r in REPLICA_OFFLOAD_SHOWN if r[0] in replicas)
    for _, label in shown:
        table.add_column(label, justify="right")
    for row in replicas.to_dict("records"):
        cells = [str(row["replica"]), str(row["role"])]
        cells += [str(row["model"])] if models else []
        cells.append(f"{row['gpu']} x{row['tensor_parallel_size']}")
        cells += [format_metric(key, row.get(key)) for key, _ in shown]
        table.add_row(*cells)
    return table


def compare_table(a: dict[str, Any], b: dict[str, Any], name_a: str, name_b: str) -> Table:
    """Two summaries side by side: the rows either run has, and ``B - A`` (and ``%``) where
    both are numbers."""
    # the runs' names in the title, A and B over the numbers: a long folder name as a header
    # would squeeze the metric names into three lines on an 80-column terminal
    table = Table(title=f"A: {name_a}\nB: {name_b}", title_justify="left")
    table.add_column("metric", min_width=18, overflow="fold")
    for header in ("A", "B"):  # (a text value, such as a cost's source, folds)
        table.add_column(header, justify="right", max_width=12, overflow="fold")
    for header in ("B - A", "change"):
        table.add_column(header, justify="right", no_wrap=True)
    names_a, names_b = dict(sections(a)), dict(sections(b))
    order = [n for n, _, _ in SECTIONS]
    first = True
    for name in order:
        rows = list(dict.fromkeys([*names_a.get(name, []), *names_b.get(name, [])]))
        if not rows:
            continue
        if not first:
            table.add_section()
        first = False
        table.add_row(f"[bold]{name}[/]", "", "", "", "")
        for key, label in rows:
            va, vb = a.get(key), b.get(key)
            diff, change = _difference(key, va, vb)
            table.add_row(
                f"  {label}", format_metric(key, va), format_metric(key, vb), diff, change
            )
    # the pool itself where the runs' differ (the rows above are shares of it)
    pool = [
        k for k in ("capacity_tokens", "bytes_per_token", "kv_cache_bytes") if a.get(k) != b.get(k)
    ]
    if pool:
        table.add_section()
        table.add_row("[bold]KV pool[/]", "", "", "", "")
    for key in pool:
        va, vb = a.get(key), b.get(key)
        table.add_row(
            f"  {key}", format_metric(key, va), format_metric(key, vb), *_difference(key, va, vb)
        )
    # settings given as text, below the table (its value columns are 12 characters wide)
    notes = [
        f"{key}: A {a.get(key) or '-'}; B {b.get(key) or '-'}"
        for key in ("engine", "preemption_mode", "layout_source")
        if a.get(key) != b.get(key)
    ]
    if notes:
        table.caption = "\n".join(notes)
        table.caption_justify = "left"
    return table


def _difference(key: str, va: Any, vb: Any) -> tuple[str, str]:
    numeric = (int, float)
    if not isinstance(va, numeric) or not isinstance(vb, numeric) or isinstance(va, bool):
        return "", ""
    if math.isnan(float(va)) or math.isnan(float(vb)):
        return "", ""
    diff = vb - va
    # equal (whole numbers exactly), or apart by float rounding only
    if diff == 0 or (isinstance(diff, float) and math.isclose(va, vb, rel_tol=1e-9)):
        return "0", ""
    text = format_metric(key, diff)
    if diff > 0 and not text.startswith("+"):
        text = "+" + text
    # no percentage of a base that shows as zero (a tiny base gives +293229.1 %)
    shown_zero = format_metric(key, va) == format_metric(key, 0 * va)
    change = "" if not va or shown_zero else f"{100 * diff / abs(va):+.1f} %"
    return text, change


SWEEP_DEFAULT_METRICS = (
    "token_states_pct",
    "time_to_first_token_seconds_p99",
    "request_time_per_output_token_seconds_p99",
    "num_preemptions",
)


def sweep_table(
    table: Any, swept: list[str], metrics: list[str], title: str, max_rows: int = 40
) -> Table:
    """A sweep's points as a rich table: the swept fields, then ``metrics`` (those in the
    summary; the experiment's ``analysis.vs_metrics``, or ``SWEEP_DEFAULT_METRICS``), one row a
    point in sweep order, at most ``max_rows`` (the caption says how many were left out, and
    what each metric of kvsim's own, ``METRIC_LABELS``, measures: their shares of KV differ in
    what they divide by). A field given in bytes/s is shown in GB/s (decimal), its header saying
    so. Where a point ran past saturation (the summary's ``past_saturation``), a last column
    marks it.

    Args:
        table: the sweep's summary (a DataFrame, one row a point).
        swept: dotted config fields the experiment varies.
        metrics: summary keys to show.
        title: the table's title.
        max_rows: rows shown at most.
    """
    fields = [f for f in swept if f in table.columns]
    shown = [m for m in metrics if m in table.columns]
    out = Table(title=title, title_justify="left")
    for name in fields:  # the dotted name (what --set takes) and its unit
        unit = field_unit(name)
        if display_unit(name):  # given in another unit than shown: bytes/s as GB/s
            unit = f"in {unit}"
        out.add_column(f"{name} ({unit})" if unit else name, overflow="fold")
    for name in shown:  # the summary's key; seconds are in the values ("19.7 s", "830 ms")
        unit = metric_unit(name)
        out.add_column(
            f"{name} ({unit})" if unit and unit != "s" else name, justify="right", overflow="fold"
        )
    records = table.to_dict("records")
    # (a point of an older run has no verdict: NaN, not past)
    saturated = [row.get("past_saturation") in (True, 1) for row in records]
    if any(saturated):
        out.add_column("past saturation")
    for row, past in zip(records[:max_rows], saturated, strict=False):
        out.add_row(
            *(_field_cell(f, row.get(f)) for f in fields),
            *(format_metric(m, row.get(m)) for m in shown),
            *(("yes" if past else "",) if any(saturated) else ()),
        )
    # what a metric measures, where its label says more than its name (token_utilization_perc:
    # token states / allocated KV), not where it repeats it (prefix_cache_hit_rate's)
    notes = [
        f"{m}: {METRIC_LABELS[m]}"
        for m in shown
        if m in METRIC_LABELS and not METRIC_LABELS[m].startswith(m)
    ]
    if len(records) > max_rows:
        notes.insert(0, f"first {max_rows} of {len(records):,} points")
    out.caption = "; ".join(notes) or None
    return out


def _field_cell(field: str, value: Any) -> str:
    """A swept field's value in a sweep table: in the unit its header names (``field_value``:
    a bandwidth in GB/s) where it is shown in another than its own, else ``format_metric``'s."""
    if value is not None and display_unit(field):
        return field_value(field, value)
    return format_metric(field, value)
