"""Assemble the report: one HTML file holding its data (JSON), plotly.js, and the page's own
script and style from ``kvsim/report/assets/``; it needs no network and no server to view."""

from __future__ import annotations

import json
from collections.abc import Sequence
from importlib import resources
from string import Template
from typing import Any

from plotly.offline import get_plotlyjs
from plotly.utils import PlotlyJSONEncoder

from kvsim.config.allocators import LAYOUTS
from kvsim.config.sim import dotted_fields
from kvsim.view.labels import METRIC_LABELS
from kvsim.view.report.data import MAX_WAITING_IDS, Run, end_time_s, map_missing_reason, map_payload
from kvsim.view.report.figures import RUN_COLORS, ecdf_figure, memory_figure

# The comparison table's sections: (summary key, label); every key is also in "all metrics".
HEADLINE: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "where the KV memory goes (time-weighted % of capacity)",
        (
            ("token_states_pct", "token states"),
            ("reservation_pct", "reservation"),
            ("internal_fragmentation_pct", "internal fragmentation"),
            ("external_fragmentation_pct", "external fragmentation & other"),
            ("free_pct", "free"),
            ("token_states_pct_of_used", "token states, % of non-free KV (holes included)"),
            ("kv_cache_usage_perc", "kv_cache_usage_perc (0-1, mean)"),
            ("token_utilization_perc", METRIC_LABELS["token_utilization_perc"]),
        ),
    ),
    (
        "batching",
        (
            ("num_requests", "requests"),
            ("num_requests_running_mean", "running requests (mean)"),
            ("num_requests_running_max", "running requests (max)"),
            ("num_requests_waiting_mean", "waiting requests (mean)"),
            ("num_blocked_steps", "blocked steps"),
            ("num_preemptions", "preemptions"),
            ("throughput_requests_per_s", "throughput (client requests/s)"),
        ),
    ),
    (
        "latency (s)",
        (
            ("time_to_first_token_seconds_p50", "TTFT p50"),
            ("time_to_first_token_seconds_p99", "TTFT p99"),
            ("request_time_per_output_token_seconds_p50", "TPOT p50"),
            ("e2e_request_latency_seconds_p50", "E2E p50"),
            ("e2e_request_latency_seconds_p99", "E2E p99"),
        ),
    ),
)


def describe(run: Run) -> str:
    """One line naming the run's model, GPU, policy, pool and requests."""
    cfg = run.results.config
    policy = cfg.cache.allocator
    layout = LAYOUTS[policy]
    if layout == "blocks":
        policy += f", {cfg.cache.block_size_tokens}-token blocks"
    elif layout == "slabs":
        policy += f", reservation {cfg.cache.reservation}"
    num = run.results.summary.get("num_requests", len(run.results.requests))
    saturated = ""
    if run.results.summary.get("past_saturation") is True:  # (kvsim.results.saturation)
        saturated = "; past saturation: its latencies grow with the run's length"
    fleet = ""
    if run.num_replicas > 1:
        fleet = (
            f"; a fleet of {run.num_replicas} replicas, each of this pool: the memory charts "
            "show the first replica's, the latencies every request's"
        )
    return (
        f"{cfg.engine_args.engine}: {cfg.model.name} on {cfg.gpu.name}, {policy}, "
        f"{run.capacity_slots:,} KV slots, {num:,} requests{fleet}{saturated}"
    )


def run_payload(run: Run, index: int, end_s: float) -> dict[str, Any]:
    """Everything the page shows of one run (``end_s``: the time axes' end, seconds)."""
    missing = map_missing_reason(run)
    fig = memory_figure(run, end_s)
    return {
        "name": run.name,
        "path": str(run.path),
        "color": RUN_COLORS[index % len(RUN_COLORS)],
        "description": describe(run),
        "summary": run.results.summary,
        "config": dotted_fields(run.config),
        "map": None if missing else map_payload(run),
        "map_missing": missing,
        "memory_figure": fig.to_plotly_json(),
        "num_memory_events": len(run.results.memory),
        "num_memory_points": len(fig.data[0].x),
        "end_s": end_s,
    }


def page_data(runs: Sequence[Run]) -> dict[str, Any]:
    """The JSON the page reads (``<script id="kvsim-data" type="application/json">``)."""
    end = max(end_time_s(run) for run in runs)
    return {
        "runs": [run_payload(run, i, end) for i, run in enumerate(runs)],
        "ecdf_figure": ecdf_figure(runs).to_plotly_json(),
        "headline": [[title, [list(row) for row in rows]] for title, rows in HEADLINE],
        "max_waiting_ids": MAX_WAITING_IDS,
    }


def asset(name: str) -> str:
    """A file of ``kvsim/report/assets/`` as text."""
    return (resources.files("kvsim.view.report") / "assets" / name).read_text(encoding="utf-8")


def script_safe(text: str) -> str:
    """``text`` made safe inside a ``<script>`` element (no ``</script>`` or ``<!--``)."""
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def render(runs: Sequence[Run]) -> str:
    """The report page as one self-contained HTML string."""
    data = json.dumps(page_data(runs), cls=PlotlyJSONEncoder, separators=(",", ":"))
    title = "kvsim report: " + " vs ".join(run.name for run in runs)
    return Template(asset("report.html")).substitute(
        title=title.replace("&", "&amp;").replace("<", "&lt;"),
        style=asset("report.css"),
        plotly_js=get_plotlyjs(),
        data_json=script_safe(data),
        report_js=asset("report.js"),
    )
