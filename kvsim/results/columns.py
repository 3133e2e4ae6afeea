"""The columns of a run's tables, with the unit in each name (seconds, slots, tokens).

``REQUEST_COLUMNS``: one row per request; ``LATENCY_INTERVALS`` the latencies derived from them in
vLLM's metric names. ``MEMORY_COLUMNS``: one row per engine event, its category columns
(``CATEGORIES``, DESIGN.md's five: they sum to the pool's capacity) duration-weighted means over
the event's steps; ``allocated_max`` the most slots any of its steps held and ``full_s`` the
seconds of its steps whose ``kv_cache_usage_perc`` was at least ``FULL_USAGE`` (a mean over the
steps would hide both).
"""

from __future__ import annotations

REQUEST_COLUMNS = (
    "req_id",
    "parent_id",
    "arrival_time_s",
    "first_scheduled_time_s",
    "first_token_time_s",
    "finish_time_s",
    "prompt_tokens",
    "output_tokens",
    "max_tokens",  # the client's output cap (vLLM's SamplingParams.max_tokens)
    "n",  # the client's samples: a vLLM v0 group's; 1 for a v1 sample (siblings: parent_id)
    "beam_width",  # beam-search width (1: none); a v0 group runs max(n, beam_width) sequences
    "num_preemptions",
    "num_cached_tokens",
    "num_draft_outputs",  # output tokens beyond one a step: accepted drafts (0 without drafts)
)
# vLLM's per-request latency histograms (vllm/v1/metrics/stats.py), seconds: name -> (end, start)
LATENCY_INTERVALS = {
    "request_queue_time_seconds": ("first_scheduled_time_s", "arrival_time_s"),
    "request_prefill_time_seconds": ("first_token_time_s", "first_scheduled_time_s"),
    "request_decode_time_seconds": ("finish_time_s", "first_token_time_s"),
    "request_inference_time_seconds": ("finish_time_s", "first_scheduled_time_s"),
    "time_to_first_token_seconds": ("first_token_time_s", "arrival_time_s"),
    "e2e_request_latency_seconds": ("finish_time_s", "arrival_time_s"),
}

MEMORY_COLUMNS = (
    "time_s",
    "duration_s",
    "num_steps",
    "num_requests_running",
    "num_requests_waiting",
    "num_prefills",
    "num_preempted",
    "num_blocked_steps",
    "token_states",
    "reservation",
    "internal_fragmentation",
    "external_fragmentation",
    "free",
    "allocated",
    "held",
    "unshared",
    "allocated_max",
    "full_s",
)
CATEGORIES = (
    "token_states",
    "reservation",
    "internal_fragmentation",
    "external_fragmentation",
    "free",
)

FULL_USAGE = 0.99  # kv_cache_usage_perc at or above which the pool counts as full

FLOAT_COLUMNS = frozenset(MEMORY_COLUMNS) - {
    "num_steps",
    "num_requests_running",
    "num_prefills",
    "num_preempted",
    "num_blocked_steps",
}
