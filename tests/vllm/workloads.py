"""Seeded random workloads for the vLLM diff, as JSON-ready dicts (read by both sides).

A workload is ``{"name", "max_steps", "config", "requests"}``:

- ``config``: ``num_blocks`` (vLLM's ``KVCacheConfig.num_blocks``, block 0 the null block),
  ``block_size``, ``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``,
  ``enable_chunked_prefill``, ``long_prefill_token_threshold``, ``enable_prefix_caching``,
  ``watermark`` (vLLM's ``SchedulerConfig.watermark``: 0 in two thirds of the workloads);
- ``config`` of a speculative-decoding workload (``random_spec_workload``) also has
  ``num_speculative_tokens`` (``k``), ``spec_method`` (``"eagle"``: ``k`` lookahead slots;
  ``"ngram"``: none), ``acceptance_rates`` (``k``
  non-increasing per-position rates) and ``spec_seed``: both sides draw one uniform ``u`` per
  verification from ``numpy.random.default_rng((spec_seed, 0x5BEC))``, in the order the step
  scheduled the requests, and accept ``#{i < drafts : u < acceptance_rates[i]}`` drafts; a
  padded admission's placeholder drafts are all rejected with no draw;
- ``config`` of a hybrid workload (``random_hybrid_workload``) also has ``sliding_window``
  (tokens): a full-attention group and a sliding-window group share the pool, the sliding one
  first where ``sliding_first`` (a model whose layer 0 slides, as Gemma-3's: vLLM forms the
  groups in the layers' order, and allocates and frees them in that order);
- ``requests``: ``{"id", "arrival_step", "segments", "output_tokens"}``, the prompt given as
  ``[segment, length]`` token runs: runs of one segment are equal tokens (the first ``length``
  tokens of that segment), so prompts built from the same segments share prefixes.

The draws aim at the rules the schedulers could disagree on: shared prefixes cut anywhere
(inside blocks too), identical prompts arriving together (duplicate cached blocks), pools
from barely one request's blocks up (preemption), varied budgets and chunk thresholds, a
request left alone with a long prompt, prefix caching on and off, chunked prefill off.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MAX_STEPS = 20_000  # far above any workload's length: both sides stop here if stuck
# random_workload's, random_spec_workload's, random_hybrid_workload's, and the last two together
FAMILIES = ("base", "spec", "hybrid", "hybrid-spec")


def random_workload(seed: int) -> dict[str, Any]:
    """Workload number ``seed`` (the same dict for the same seed, on any machine)."""
    rng = np.random.default_rng([33, 4, seed])
    block = int(rng.choice([2, 4, 8, 16]))
    chunked = bool(rng.random() < 0.85)
    caching = bool(rng.random() < 0.6)
    max_num_seqs = int(rng.integers(1, 9))
    budget = int(rng.choice([8, 16, 24, 32, 48, 64, 96, 128, 256]))
    budget = max(budget, max_num_seqs)
    requests = _requests(rng, chunked, budget)
    # vLLM: unchunked, max_num_batched_tokens >= max_model_len (and it ignores the threshold)
    max_model_len = 4096 if chunked else budget
    threshold = 0 if rng.random() < 0.4 else int(rng.integers(1, budget + 1))
    need = max(_blocks(r, block) for r in requests)  # the largest request alone
    usable = need + int(rng.integers(0, 2 * need + 2))
    # vLLM's --watermark in a third of the workloads (a share of the blocks admission leaves
    # free while something runs)
    watermark = 0.0 if rng.random() < 2 / 3 else float(rng.choice([0.01, 0.05, 0.1, 0.25]))
    return {
        "name": f"w{seed}",
        "max_steps": MAX_STEPS,
        "config": {
            "num_blocks": usable + 1,
            "block_size": block,
            "max_num_seqs": max_num_seqs,
            "max_num_batched_tokens": budget,
            "max_model_len": max_model_len,
            "enable_chunked_prefill": chunked,
            "long_prefill_token_threshold": threshold,
            "enable_prefix_caching": caching,
            "watermark": watermark,
        },
        "requests": requests,
    }


def workload(family: str, seed: int) -> dict[str, Any]:
    """Workload number ``seed`` of ``family`` (``FAMILIES``)."""
    if family == "spec":
        return random_spec_workload(seed)
    if family == "hybrid":
        return random_hybrid_workload(seed)
    if family == "hybrid-spec":
        return random_hybrid_spec_workload(seed)
    return random_workload(seed)


def random_hybrid_workload(seed: int) -> dict[str, Any]:
    """Hybrid KV cache groups (vLLM's ``HybridKVCacheCoordinator``) on a base workload's
    requests: a full-attention group and a sliding-window group of ``sliding_window`` tokens
    (1 to 6 blocks, cut anywhere), each a block table per request over one pool, which holds
    the largest request in both groups."""
    work = random_workload(seed)
    rng = np.random.default_rng([33, 6, seed])
    cfg = work["config"]
    block = cfg["block_size"]
    cfg["sliding_window"] = int(rng.integers(2, 6 * block + 1))
    need = max(_blocks(r, block) for r in work["requests"])
    cfg["num_blocks"] = 2 * need + int(rng.integers(0, 2 * need + 2)) + 1
    cfg["sliding_first"] = bool(rng.integers(0, 2))  # (a model whose layer 0 slides: Gemma-3)
    work["name"] = f"h{seed}"
    return work


def random_spec_workload(seed: int) -> dict[str, Any]:
    """Speculative decoding (``k`` drafts; EAGLE with ``k`` lookahead slots, or n-gram lookup
    with none) on a base workload's requests, a prefix cache on or off as the base drew it
    (EAGLE's then keys each block with the token after it: vLLM 0.34.0's
    ``num_hash_lookahead_tokens = 1``), a chunk threshold of 0 or past ``k`` (a padded
    admission is never cut), a budget past ``k``, and a pool that holds the largest request
    with its lookahead slots."""
    work = random_workload(seed)
    rng = np.random.default_rng([33, 5, seed])
    cfg = work["config"]
    k = int(rng.integers(1, 5))
    rates = sorted((float(rng.random()) for _ in range(k)), reverse=True)
    if rng.random() < 0.2:
        rates = [1.0] * k  # every draft accepted: requests run out of output mid-verification
    # with a prefix cache a one-token admission is padded to a whole verification
    method = "ngram" if rng.random() < 0.4 else "eagle"
    cfg["max_num_batched_tokens"] = max(cfg["max_num_batched_tokens"], k + 1)
    if cfg["long_prefill_token_threshold"]:
        cfg["long_prefill_token_threshold"] = max(cfg["long_prefill_token_threshold"], k + 1)
    if not cfg["enable_chunked_prefill"]:
        cfg["max_model_len"] = cfg["max_num_batched_tokens"]
    block = cfg["block_size"]
    # a verification allocates its known tokens, k drafts and k lookahead slots
    need = max(
        -(-min(_tokens(r) - 1 + 2 * k, cfg["max_model_len"]) // block) for r in work["requests"]
    )
    cfg["num_blocks"] = max(cfg["num_blocks"], need + 1)
    cfg.update(num_speculative_tokens=k, acceptance_rates=rates, spec_seed=seed)
    cfg["spec_method"] = method
    work["name"] = f"s{seed}"
    return work


def random_hybrid_spec_workload(seed: int) -> dict[str, Any]:
    """Speculative decoding over hybrid KV cache groups: a speculative workload's requests and
    settings with a sliding-window group beside the full one (``random_hybrid_workload``'s
    window), over a pool that holds the largest request in both groups with its lookahead
    slots."""
    work = random_spec_workload(seed)
    rng = np.random.default_rng([33, 7, seed])
    cfg = work["config"]
    block = cfg["block_size"]
    cfg["sliding_window"] = int(rng.integers(2, 6 * block + 1))
    cfg["num_blocks"] = 2 * cfg["num_blocks"] + int(rng.integers(0, cfg["num_blocks"] + 2))
    cfg["sliding_first"] = bool(rng.integers(0, 2))
    work["name"] = f"hs{seed}"
    return work


def _tokens(request: dict[str, Any]) -> int:
    return sum(n for _, n in request["segments"]) + request["output_tokens"]


def _blocks(request: dict[str, Any], block: int) -> int:
    """Blocks the request's whole sequence (prompt + output) may hold."""
    tokens = sum(n for _, n in request["segments"]) + request["output_tokens"]
    return -(tokens // -block)


def _requests(rng: np.random.Generator, chunked: bool, budget: int) -> list[dict[str, Any]]:
    """2-14 requests; unchunked, each whole sequence fits ``budget`` (vLLM's max_model_len)."""
    num = int(rng.integers(2, 15))
    shared = [int(rng.integers(1, 97)) for _ in range(int(rng.integers(1, 4)))]
    long_prompt = rng.random() < 0.2  # one long prompt, to run alone or beside few others
    arrival = 0
    requests: list[dict[str, Any]] = []
    for rid in range(num):
        if rid and rng.random() < 0.12:  # an identical prompt (duplicate cached blocks)
            segments = [list(s) for s in requests[int(rng.integers(0, rid))]["segments"]]
        else:
            segments = _prompt(rng, shared, unique_id=100 + rid)
        if long_prompt and rid == 0:
            segments.append([99, int(rng.integers(100, 400))])
        output = int(rng.integers(1, 41))
        if not chunked:
            segments, output = _fit(segments, output, budget)
        arrival += int(rng.choice([0, 0, 0, 1, 2, 5, 20]))
        requests.append(
            {"id": rid, "arrival_step": arrival, "segments": segments, "output_tokens": output}
        )
    return requests


def _prompt(rng: np.random.Generator, shared: list[int], unique_id: int) -> list[list[int]]:
    """Zero to two shared segments (each cut anywhere), then a suffix unique to the request."""
    segments: list[list[int]] = []
    if rng.random() < 0.7:
        first = int(rng.integers(0, len(shared)))
        cut = shared[first] if rng.random() < 0.6 else int(rng.integers(1, shared[first] + 1))
        segments.append([first, cut])
        if rng.random() < 0.3:
            second = int(rng.integers(0, len(shared)))
            segments.append([10 + second, int(rng.integers(1, shared[second] + 1))])
    suffix = int(rng.integers(0 if segments else 1, 61))
    if suffix:
        segments.append([unique_id, suffix])
    return segments


def _fit(segments: list[list[int]], output: int, budget: int) -> tuple[list[list[int]], int]:
    """The prompt cut, and the output capped, so that prompt + output <= ``budget``."""
    output = min(output, max(1, budget // 2))
    left = budget - output
    out: list[list[int]] = []
    for seg, length in segments:
        if left <= 0:
            break
        out.append([seg, min(length, left)])
        left -= min(length, left)
    return out, output
