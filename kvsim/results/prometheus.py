"""Results as a Prometheus snapshot: :func:`prometheus_snapshot`, the run's final counters,
gauges and histograms under vLLM's metric names, labels and bucket boundaries
(``vllm/v1/metrics/loggers.py``, ``PrometheusStatLogger``, and ``vllm/v1/metrics/buckets.py``,
vLLM 0.34.0), in the Prometheus text format, built with ``prometheus_client``; a co-located
fleet's snapshot has each replica's metrics under its own ``engine`` label.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
)

from kvsim.results.metrics import (
    client_of,
    generated_tokens,
    output_gaps,
    samples,
    sequences,
)
from kvsim.results.prometheus_base import LABELS, histogram_family, observations
from kvsim.results.prometheus_offload import offload_families

if TYPE_CHECKING:
    from kvsim.results import Results

# vLLM 0.34.0 vllm/v1/metrics/buckets.py (TIME_TO_FIRST_TOKEN_BUCKETS ...), seconds
TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
TOKEN_LATENCY_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
# vLLM 0.34.0 vllm/v1/metrics/buckets.py REQUEST_NUM_PREEMPTIONS_BUCKETS, preemptions a request
NUM_PREEMPTIONS_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0)
REQUEST_LATENCY_BUCKETS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
# vLLM 0.34.0 buckets.py ITERATION_TOKENS_BUCKETS, tokens an engine step
ITERATION_TOKENS_BUCKETS = (
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
)  # fmt: skip
# vLLM 0.34.0 buckets.py REQUEST_PARAMS_N_BUCKETS, samples a request
REQUEST_PARAMS_N_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0)
# vLLM 0.34.0 vllm/v1/engine/__init__.py FinishReason, as str() writes each (every one exported)
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
# vLLM 0.34.0 vllm/v1/metrics/stats.py PromptTokenStats.ALL_SOURCES
PROMPT_TOKEN_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
# vLLM 0.34.0 vllm/v1/metrics/cache_hit_source.py CacheHitSource (every one exported)
CACHE_HIT_SOURCES = ("device", "host", "p2p", "disk", "external_unspecified")


def prometheus_snapshot(results: Results) -> str:
    """The run's final metrics in the Prometheus text format under vLLM's names.

    Counters (tokens, except preemptions; exported with the ``_total`` suffix):
    ``vllm:num_preemptions`` (the run's count), ``vllm:prompt_tokens`` (whole prompts, cached
    tokens included, once per request), ``vllm:generation_tokens``, ``vllm:prompt_tokens_cached``
    and, as vLLM 0.34.0 counts them once per admitted request (preempted re-admissions apart),
    ``vllm:prefix_cache_queries`` (the summary's ``prefix_cache_queries``: prompt tokens of
    every request when prefix caching is on, else 0) and ``vllm:prefix_cache_hits`` (their
    cached tokens found on the GPU); ``vllm:external_prefix_cache_queries`` and
    ``vllm:external_prefix_cache_hits`` (0 without a CPU tier, as vLLM creates both; the KV
    connector's lookups, tokens; ``kvsim.core.scheduler.offload``). Not exported, as vLLM exports no
    such counter: the re-admissions' ``prefix_cache_preempted_queries``/``_hits`` (vLLM's
    ``PrometheusStatLogger.record``, ``vllm/v1/metrics/loggers.py``, adds only
    ``PrefixCacheStats.queries`` and ``hits`` to its counters) and ``num_cache_evictions`` (vLLM
    counts no evictions; they feed only its sampled ``vllm:kv_block_*_seconds`` residency
    histograms, behind ``--kv-cache-metrics``); both are in ``summary.json``. With speculative
    decoding (vLLM 0.34.0 ``SpecDecodingProm``, ``vllm/v1/spec_decode/metrics.py``):
    ``vllm:spec_decode_num_drafts`` (verifications), ``vllm:spec_decode_num_draft_tokens``,
    ``vllm:spec_decode_num_accepted_tokens`` and ``vllm:spec_decode_num_accepted_tokens_per_pos``
    (a ``position`` label, ``"0"`` to ``"k-1"``: verifications that accepted that draft), none
    without it. With a CPU tier, vLLM's ``vllm:kv_offload_*`` transfer counters, usage gauges,
    config info and size histograms, and with a disk tier its ``vllm:kv_offload_tiering_*`` byte
    counters (``kvsim.results.prometheus_offload.offload_families``).

    By label, as vLLM 0.34.0 counts them (every label value exported, zeros too):
    ``vllm:prompt_tokens_by_source`` (``source``: ``local_compute``, ``local_cache_hit``,
    ``external_kv_transfer``; a prompt's tokens at its first admission), ``vllm:prompt_tokens_
    cached_by_source`` (``source``: ``device``, ``host`` the CPU tier, ``disk`` the blocks
    promoted from a disk tier for the request that loaded them, ``p2p``,
    ``external_unspecified``) and ``vllm:request_success`` (``finished_reason``: ``length``
    where the output reached ``max_tokens`` or the sequence ``max_model_len``, else ``stop``;
    ``abort``, ``error``, ``repetition`` 0). ``vllm:cache_config_info``: a gauge of 1 labelled
    with the ``CacheConfig`` fields kvsim models (``_cache_config_info``).
    ``vllm:iteration_tokens_total``: one observation an engine step
    (``SchedulerCore.observe_step_tokens``: the prompt tokens computed of the requests whose
    first output the step samples, plus every token it samples; a step that samples nothing is
    not observed), for a run just made (its folder keeps no count a step), a fleet's under
    each replica's ``engine``.

    Gauges, after the last request finished: ``vllm:num_requests_running``,
    ``vllm:num_requests_waiting`` and ``vllm:kv_cache_usage_perc`` (0-1), all 0 then; the run's
    time-weighted means and peaks are ``kvsim:*`` gauges (``kvsim:kv_cache_usage_perc_mean``...).

    Histograms over requests (vLLM's buckets): ``time_to_first_token_seconds``,
    ``e2e_request_latency_seconds``, ``request_queue_time_seconds``,
    ``request_inference_time_seconds``, ``request_prefill_time_seconds``,
    ``request_decode_time_seconds``, ``request_time_per_output_token_seconds`` (0 for one-token
    outputs, as vLLM observes), ``request_prompt_tokens``, ``request_generation_tokens``,
    ``request_prefill_kv_computed_tokens``, ``request_num_preemptions``,
    ``request_params_max_tokens``; over client requests (an ``n > 1`` request's samples are
    one), ``request_params_n`` and ``request_max_num_generation_tokens`` (its samples' longest
    output); and
    ``inter_token_latency_seconds`` over output gaps
    (``kvsim.results.metrics.output_gaps``: one a step after the first that returned a
    request's tokens, a verification's several counting once). kvsim keeps no per-token times
    (it fast-forwards decode
    steps), so each gap is taken as its request's mean gap (decode time / gaps): the
    histogram's ``_sum`` and ``_count`` are exact, its bucket counts an approximation.

    Labels: ``model_name`` = the model's name, ``engine`` = ``"0"`` for one engine; a fleet
    just run exports each replica's own metrics under ``engine`` = its index, as one vLLM
    server running data parallel labels its engines (separate servers each write ``"0"``, told
    apart by the scrape's ``instance``), so PromQL's ``sum`` gives the fleet's. A disaggregated
    fleet's prefill replicas count their prefill copies (one output token each), its decode
    replicas the requests as they see them: arriving when the proxy sends them on, every
    prompt token cached, those pulled over the link as external ``p2p`` hits
    (``kvsim.fleet.summary.replica_results``). A fleet read back from disk exports its totals
    under ``"0"``.
    """
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_SnapshotCollector(results))
    return generate_latest(registry).decode("utf-8")


class _SnapshotCollector:
    """A ``prometheus_client`` custom collector yielding the snapshot's metric families."""

    def __init__(self, results: Results) -> None:
        self.results = results

    def collect(self) -> Iterator[Metric]:
        """Every engine's families, one family a name: a fleet's replicas (in memory after its
        run: ``Results.replica_runs``) each under its index's ``engine`` label, as a
        data-parallel server labels its engines; anything else as engine ``"0"``."""
        runs = self.results.replica_runs or [self.results]
        merged: dict[str, Metric] = {}
        for index, run in enumerate(runs):
            for family in _engine_families(run, str(index)):
                first = merged.setdefault(family.name, family)
                if first is not family:
                    first.samples.extend(family.samples)
        yield from merged.values()


def _engine_families(results: Results, engine: str) -> Iterator[Metric]:
    """One engine's metric families (``prometheus_snapshot``), labelled ``engine``."""
    df, summary = results.requests, results.summary
    labels = [results.config.model.name, engine]
    # a request's cached tokens include those its KV connector loaded (vLLM's
    # num_cached_tokens): from the CPU tier, or pulled from a prefill instance (a decode
    # replica's, ``replica_results``); the prefix cache's own hits are the rest
    prompt, cached = int(df["prompt_tokens"].sum()), int(df["num_cached_tokens"].sum())
    pulled = int(summary.get("kv_transfer_received_tokens", 0))
    external_hits = int(summary.get("external_prefix_cache_hits", 0)) + pulled
    counters = {
        "num_preemptions": (summary["num_preemptions"], "Cumulative number of preemptions."),
        "prompt_tokens": (prompt, "Prompt tokens, cached ones included."),
        "generation_tokens": (generated_tokens(df), "Generated tokens."),
        "prompt_tokens_cached": (cached, "Prompt tokens cached."),
        "prefix_cache_queries": (  # (the engines' own count; none without prefix caching)
            summary.get("prefix_cache_queries", 0),
            "Prefix cache queries, in tokens.",
        ),
        "prefix_cache_hits": (cached - external_hits, "Prefix cache hits, in tokens."),
    }
    # (vLLM creates both with or without a KV connector: 0 without a CPU tier)
    counters["external_prefix_cache_queries"] = (
        summary.get("external_prefix_cache_queries", 0) + summary.get("kv_connector_queries", 0),
        "External prefix cache queries (KV connector), in tokens.",
    )
    counters["external_prefix_cache_hits"] = (
        external_hits,
        "External prefix cache hits (KV connector), in tokens.",
    )
    if "spec_decode_num_drafts" in summary:  # speculative decoding ran
        counters.update(_spec_decode_counters(summary))
    for name, (value, doc) in counters.items():
        counter = CounterMetricFamily(f"vllm:{name}", doc, labels=LABELS)
        counter.add_metric(labels, float(value))
        yield counter
    if "spec_decode_num_drafts" in summary:
        yield _accepted_per_pos(summary, labels)
    if "cpu_tier_blocks" in summary:  # a CPU tier (vLLM's native KV offloading)
        yield from offload_families(results, labels)
    yield from _prompt_token_sources(prompt, cached, summary, labels)
    max_model_len = int(summary.get("max_model_len", results.config.max_model_len))
    if "max_tokens" in df:  # (a table written before it had the column: no reasons)
        yield _labelled_counter(
            "request_success",
            "Requests finished, by finish reason.",
            labels,
            "finished_reason",
            finish_reasons(df, max_model_len),
            FINISH_REASONS,
        )
    yield from _gauges(df, summary, labels)
    yield _cache_config_info(results, summary, engine)
    yield from _histograms(df, labels, max_model_len, results.remote_cached_tokens)
    if results.iteration_tokens is not None:  # (a run just made: not kept in its folder)
        values, weights = observations(results.iteration_tokens)
        doc = "Histogram of number of tokens per engine_step."
        yield histogram_family(
            "iteration_tokens_total", doc, labels, ITERATION_TOKENS_BUCKETS, values, weights
        )


def _spec_decode_counters(summary: dict[str, Any]) -> dict[str, tuple[object, str]]:
    """vLLM's ``SpecDecodingProm`` counters (``vllm/v1/spec_decode/metrics.py``)."""
    return {
        "spec_decode_num_drafts": (
            summary["spec_decode_num_drafts"],
            "Request-steps whose draft tokens were verified.",
        ),
        "spec_decode_num_draft_tokens": (
            summary["spec_decode_num_draft_tokens"],
            "Draft tokens proposed and verified.",
        ),
        "spec_decode_num_accepted_tokens": (
            summary["spec_decode_num_accepted_tokens"],
            "Draft tokens the target model accepted.",
        ),
    }


def _accepted_per_pos(summary: dict[str, Any], labels: list[str]) -> Metric:
    """``vllm:spec_decode_num_accepted_tokens_per_pos``: one sample per draft position
    ``0..k-1`` under a ``position`` label after vLLM's base labels, as ``SpecDecodingProm``
    labels it."""
    family = CounterMetricFamily(
        "vllm:spec_decode_num_accepted_tokens_per_pos",
        "Accepted draft tokens, by position in the draft.",
        labels=(*LABELS, "position"),
    )
    pos = 0  # (a fleet's replicas may draft different k: every position any replica has)
    while f"spec_decode_num_accepted_tokens_pos{pos}" in summary:
        count = summary[f"spec_decode_num_accepted_tokens_pos{pos}"]
        family.add_metric([*labels, str(pos)], float(count))
        pos += 1
    return family


def _labelled_counter(
    name: str,
    doc: str,
    labels: list[str],
    label: str,
    values: dict[str, int],
    every: tuple[str, ...],
) -> Metric:
    """A counter family with one sample per value of ``label`` after vLLM's base labels, each of
    ``every`` (vLLM creates every label value at start, so the zeros are exported too)."""
    family = CounterMetricFamily(f"vllm:{name}", doc, labels=(*LABELS, label))
    for value in every:
        family.add_metric([*labels, value], float(values.get(value, 0)))
    return family


def _prompt_token_sources(
    prompt: int, cached: int, summary: dict[str, Any], labels: list[str]
) -> Iterator[Metric]:
    """``vllm:prompt_tokens_by_source`` (vLLM 0.34.0 ``PromptTokenStats``: each prompt's tokens
    at its first admission computed, hit in the GPU prefix cache, or loaded by the KV
    connector) and ``vllm:prompt_tokens_cached_by_source`` (the cached ones by the tier that
    held them, ``CacheHitSource``: ``device`` the GPU, ``host`` the CPU tier, ``disk`` the
    blocks promoted from a disk tier for the request that loads them); ``prompt`` and
    ``cached``: the engine's prompt tokens and those cached, the KV connector's included."""
    pulled = int(summary.get("kv_transfer_received_tokens", 0))
    tier = int(summary.get("external_prefix_cache_hits", 0))
    external = tier + pulled
    device = cached - external  # (the GPU prefix cache's own hits)
    by_source = {
        "local_compute": prompt - cached,
        "local_cache_hit": device,
        "external_kv_transfer": external,
    }
    yield _labelled_counter(
        "prompt_tokens_by_source",
        "Prompt tokens by source.",
        labels,
        "source",
        by_source,
        PROMPT_TOKEN_SOURCES,
    )
    hits = {"device": device, "host": tier, "p2p": pulled}
    if "disk_tier_blocks" in summary:
        if "external_prefix_cache_hits_disk" in summary:
            hits["disk"] = int(summary["external_prefix_cache_hits_disk"])
            hits["host"] = tier - hits["disk"]
        else:  # (a summary written before the disk's share was counted)
            hits["external_unspecified"], hits["host"] = tier, 0
    yield _labelled_counter(
        "prompt_tokens_cached_by_source",
        "Prompt tokens cached, by the tier that held them.",
        labels,
        "source",
        hits,
        CACHE_HIT_SOURCES,
    )


def finish_reasons(df: pd.DataFrame, max_model_len: int) -> dict[str, int]:
    """Finished requests by vLLM's finish reason: ``length`` where the output reached its
    ``max_tokens`` or the sequence ``max_model_len`` (vLLM 0.34.0 ``FinishReason.LENGTH``),
    ``stop`` where it ended before (an end-of-sequence token). One a sequence: a v1 sample's
    row is one, a v0 sequence group's row its ``num_seqs`` (vLLM v0 counted each finished
    sequence's reason); unfinished rows are not counted."""
    done = df["finish_time_s"].notna().to_numpy()
    output, prompt = df["output_tokens"], df["prompt_tokens"]
    reached = ((output >= df["max_tokens"]) | (prompt + output >= max_model_len)).to_numpy()
    seqs = sequences(df)
    return {
        "length": int(seqs[done & reached].sum()),
        "stop": int(seqs[done & ~reached].sum()),
    }


def client_requests(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """``(n, most output tokens)`` of each finished request as the client sent it, float64
    arrays: a v1 request of ``n > 1`` is its samples' rows (those sharing its ``parent_id``),
    any other row is one request of its ``n`` (a v0 sequence group's samples, a beam search's
    too; 1 in a table written before the column). vLLM observes both once a request's samples
    all finished (``ParentRequest.observe_finished_request``)."""
    df = df[df["finish_time_s"].notna()]
    client = client_of(df)
    num = int(client.max()) + 1 if client.size else 0
    fanned = df["parent_id"].notna().to_numpy()
    n = np.zeros(num, dtype=np.float64)
    n[client[~fanned]] = samples(df)[~fanned]  # (a row alone: its own n)
    np.add.at(n, client[fanned], 1.0)  # (a fanned-out request: its samples)
    longest = np.zeros(num, dtype=np.float64)
    np.maximum.at(longest, client, df["output_tokens"].to_numpy(dtype=np.float64))
    return n, longest


def _cache_config_info(results: Results, summary: dict[str, Any], engine: str) -> Metric:
    """``vllm:cache_config_info``: a gauge of 1 whose labels are ``CacheConfig`` fields as
    vLLM writes them (``str`` of the value; ``CacheConfig.metrics_info``), the fields kvsim
    models: ``block_size``, ``cache_dtype``, ``enable_prefix_caching``,
    ``gpu_memory_utilization`` (``None`` where the KV size is given, as a server given
    ``--kv-cache-memory-bytes`` leaves it unset; else the share kvsim derived the KV with, as a
    server given ``--gpu-memory-utilization``), ``kv_cache_memory_bytes`` (``None`` unless the
    KV size is given), ``num_gpu_blocks``, ``kv_cache_size_tokens`` and ``kv_cache_max_concurrency``
    (the startup log's figures), ``kv_offloading_size`` and ``kv_offloading_backend``; with
    vLLM's ``engine`` label and, as vLLM, no ``model_name``."""
    config = results.config
    cache, offload = config.cache, config.offload
    kv_bytes = cache.kv_cache_bytes
    if kv_bytes is None and cache.kv_cache_gib is not None:
        kv_bytes = int(cache.kv_cache_gib * 2**30)
    info = {
        "block_size": summary.get("kv_cache_block_size_tokens", cache.block_size_tokens),
        "cache_dtype": summary.get("kv_cache_dtype", cache.kv_cache_dtype),
        "enable_prefix_caching": summary.get("enable_prefix_caching"),
        # (a server given its KV size leaves the share unset: vLLM writes None)
        "gpu_memory_utilization": cache.gpu_memory_utilization if kv_bytes is None else None,
        "kv_cache_memory_bytes": kv_bytes,
        "num_gpu_blocks": summary.get("num_gpu_blocks"),
        "kv_cache_size_tokens": summary.get("kv_cache_size_tokens"),
        "kv_cache_max_concurrency": summary.get("kv_cache_max_concurrency"),
        "kv_offloading_size": offload.kv_offloading_size,
        "kv_offloading_backend": offload.kv_offloading_backend,
        "engine": engine,
    }
    family = GaugeMetricFamily(
        "vllm:cache_config_info", "Information of the LLMEngine CacheConfig", labels=list(info)
    )
    family.add_metric([str(v) for v in info.values()], 1.0)
    return family


def _gauges(df: pd.DataFrame, summary: dict[str, object], labels: list[str]) -> Iterator[Metric]:
    unfinished = df["finish_time_s"].isna()
    started = df["first_scheduled_time_s"].notna()
    gauges: list[tuple[str, object, str]] = [
        ("vllm:num_requests_running", (unfinished & started).sum(), "Running at the end."),
        ("vllm:num_requests_waiting", (unfinished & ~started).sum(), "Waiting at the end."),
        ("vllm:kv_cache_usage_perc", 0.0, "KV-cache usage at the end (1 = 100%); none held."),
    ]
    run_gauges = {
        "kv_cache_usage_perc_mean": ("kv_cache_usage_perc", "Time-weighted mean KV usage (0-1)."),
        "kv_cache_usage_perc_max": ("kv_cache_usage_perc_max", "Peak KV-cache usage (0-1)."),
        "num_requests_running_mean": ("num_requests_running_mean", "Mean running requests."),
        "num_requests_running_max": ("num_requests_running_max", "Peak running requests."),
        "num_requests_waiting_mean": ("num_requests_waiting_mean", "Mean waiting requests."),
    }
    for name, (key, doc) in run_gauges.items():
        if key in summary:
            gauges.append((f"kvsim:{name}", summary[key], doc))
    for name, value, doc in gauges:
        gauge = GaugeMetricFamily(name, doc, labels=LABELS)
        gauge.add_metric(labels, float(value))  # type: ignore[arg-type]
        yield gauge


def _histograms(
    df: pd.DataFrame,
    labels: list[str],
    max_model_len: int,
    remote_cached: dict[int, int] | None = None,
) -> Iterator[Metric]:
    """The per-request histograms; ``remote_cached``: a disaggregated decode replica's
    prefill-side cached tokens by ``req_id``, which its frontend reports as the request's
    cached tokens (vLLM 0.34.0 ``output_processor.py``, ``remote_prefill_cached_tokens``), so
    that ``request_prefill_kv_computed_tokens`` is the prompt less the prefill side's hits."""
    token_buckets = tuple(float(b) for b in one_two_five_buckets(max_model_len))
    cached = df["num_cached_tokens"]
    if remote_cached is not None:
        cached = df["req_id"].map(remote_cached).fillna(cached)
    tpot = df["request_time_per_output_token_seconds"]  # (0 for a one-token output; NaN: not run)
    per_request: dict[str, tuple[pd.Series, tuple[float, ...], str]] = {
        "time_to_first_token_seconds": (
            df["time_to_first_token_seconds"], TTFT_BUCKETS_S, "Time to first token, s."
        ),
        "e2e_request_latency_seconds": (
            df["e2e_request_latency_seconds"], REQUEST_LATENCY_BUCKETS_S, "E2E latency, s."
        ),
        "request_queue_time_seconds": (
            df["request_queue_time_seconds"], REQUEST_LATENCY_BUCKETS_S, "Time waiting, s."
        ),
        "request_inference_time_seconds": (
            df["request_inference_time_seconds"], REQUEST_LATENCY_BUCKETS_S, "Time running, s."
        ),
        "request_prefill_time_seconds": (
            df["request_prefill_time_seconds"], REQUEST_LATENCY_BUCKETS_S, "Prefill phase, s."
        ),
        "request_decode_time_seconds": (
            df["request_decode_time_seconds"], REQUEST_LATENCY_BUCKETS_S, "Decode phase, s."
        ),
        "request_time_per_output_token_seconds": (
            tpot, TOKEN_LATENCY_BUCKETS_S, "Decode time / (output tokens - 1) per request, s."
        ),
        "request_prompt_tokens": (df["prompt_tokens"], token_buckets, "Prompt tokens."),
        "request_generation_tokens": (df["output_tokens"], token_buckets, "Generated tokens."),
        "request_prefill_kv_computed_tokens": (
            df["prompt_tokens"] - cached,
            token_buckets,
            "Prompt tokens computed (cache hits excluded).",
        ),
        "request_num_preemptions": (
            df["num_preemptions"], NUM_PREEMPTIONS_BUCKETS, "Times a request was preempted."
        ),
    }  # fmt: skip
    if "max_tokens" in df:
        per_request["request_params_max_tokens"] = (
            df["max_tokens"].where(df["finish_time_s"].notna()),
            token_buckets,
            "The max_tokens request parameter.",
        )
    seqs = sequences(df).astype(np.float64)
    for name, (values, buckets, doc) in per_request.items():
        kept = values.notna().to_numpy()
        values_arr = values.to_numpy(dtype=np.float64, na_value=np.nan)[kept]
        # (vLLM v0 observed each finished sequence's output length, the rest once a group)
        weights = seqs[kept] if name == "request_generation_tokens" else np.ones(kept.sum())
        yield histogram_family(name, doc, labels, buckets, values_arr, weights)
    n, longest = client_requests(df)
    ones = np.ones_like(n)
    yield histogram_family(
        "request_params_n", "The n request parameter.", labels, REQUEST_PARAMS_N_BUCKETS, n, ones
    )
    doc = "The most tokens any sample of a request generated."
    yield histogram_family(
        "request_max_num_generation_tokens", doc, labels, token_buckets, longest, ones
    )
    gaps = output_gaps(df).astype(np.float64)
    mean_gap = np.divide(
        df["request_decode_time_seconds"].fillna(0.0).to_numpy(dtype=np.float64),
        gaps,
        out=np.zeros_like(gaps),
        where=gaps > 0,
    )
    doc = "Inter-token latency, s (each request's gaps taken as its mean gap)."
    yield histogram_family(
        "inter_token_latency_seconds", doc, labels, TOKEN_LATENCY_BUCKETS_S, mean_gap, gaps
    )


def one_two_five_buckets(max_value: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... up to ``max_value`` (vLLM's ``build_1_2_5_buckets``)."""
    out: list[int] = []
    scale = 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > max_value:
                return out
            out.append(mantissa * scale)
        scale *= 10
