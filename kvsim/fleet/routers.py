"""Routers: which replica a request goes to, by the rules real deployments use.

Each router ``pick``s an index of ``candidates`` (the replicas of the role being routed: all of
them co-located, the prefill or decode ones disaggregated) for a request arriving now. Ties go
round robin: to the first tied candidate after the one this router picked last (the first
pick's tie to candidate 0). llm-d's max-score picker breaks ties at random; kvsim keeps runs
reproducible without sending every tie to one replica (equally empty pools are common at low
load, and the lowest index would take them all).

- ``round_robin``: each in turn (vLLM production stack's ``roundrobin``; Dynamo's default
  ``--router-mode round_robin``).
- ``least_requests``: fewest requests routed there and not finished (Vidur's least outstanding
  requests global scheduler, ``vidur/scheduler/global_scheduler/lor_global_scheduler.py``).
- ``least_kv``: lowest ``kv_cache_usage_perc`` (the Gateway API Inference Extension's
  ``kv-cache-utilization-scorer`` alone: score ``1 - KVCacheUsagePercent``).
- ``prefix``: llm-d's weighted scorers, highest total wins. The precise prefix-cache scorer
  counts, per replica, the request's leading prompt blocks its cache holds, and min-max
  normalises those counts over the replicas holding any (all equal: 1; holding none: 0;
  llm-d-inference-scheduler ``pkg/plugins/scorer/utils.go``,
  ``indexedScoresToNormalizedScoredPods``); the KV-utilization scorer is ``1 - usage``; the
  queue scorer is ``(max_waiting - waiting) / (max_waiting - min_waiting)`` over the replicas
  (all equal: 1; Gateway API Inference Extension ``plugins/queuescorer/queue.go``). Weights
  ``prefix_weight``/``kv_usage_weight``/``queue_weight`` default to the llm-d guide's 2/1/1
  (llm-d ``guides/precise-prefix-cache-aware/scheduler/precise-prefix-cache-aware.values.yaml``).
- ``kv_cost``: NVIDIA Dynamo's KV router, lowest cost wins: ``overlap_score_weight x
  prefill_blocks + decode_blocks``, prefill blocks being the prompt work already queued there
  plus the request's prompt less what that replica caches, and decode blocks the blocks the
  replica holds plus the request's (Dynamo docs, "Router Design" and "Routing Concepts": cost =
  overlap_score_weight * prefill_blocks + decode_blocks; default weight 1.0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from kvsim.base.units import cdiv
from kvsim.config.fleet import ROUTER_WEIGHTS, ROUTERS, FleetSpec
from kvsim.fleet.replica import Replica
from kvsim.workload.request import Request


class Router:
    """Base of the routing rules (see the module docstring); ``pick`` returns an index of
    ``candidates``."""

    name: ClassVar[str] = ""

    def __init__(self) -> None:
        self._last: dict[int, int] = {}  # candidate set (its first replica) -> last pick

    def pick(self, request: Request, candidates: Sequence[Replica]) -> int:
        raise NotImplementedError

    def _best(self, values: Sequence[float], candidates: Sequence[Replica], *, low: bool) -> int:
        """The index of the lowest (``low``) or highest value; ties round robin."""
        best = min(values) if low else max(values)
        tied = [i for i, v in enumerate(values) if v == best]
        key = candidates[0].index
        last = self._last.get(key, -1)
        n = len(values)
        chosen = min(tied, key=lambda i: (i - last - 1) % n)
        self._last[key] = chosen
        return chosen


class RoundRobin(Router):
    """Each candidate in turn (one turn counter per candidate set)."""

    name = "round_robin"

    def __init__(self) -> None:
        super().__init__()
        self._next: dict[int, int] = {}

    def pick(self, request: Request, candidates: Sequence[Replica]) -> int:
        key = candidates[0].index
        turn = self._next.get(key, 0)
        self._next[key] = turn + 1
        return turn % len(candidates)


class LeastRequests(Router):
    """Fewest outstanding requests (routed, not finished)."""

    name = "least_requests"

    def pick(self, request: Request, candidates: Sequence[Replica]) -> int:
        loads = [float(r.num_outstanding) for r in candidates]
        return self._best(loads, candidates, low=True)


class LeastKv(Router):
    """Lowest KV-cache usage."""

    name = "least_kv"

    def pick(self, request: Request, candidates: Sequence[Replica]) -> int:
        usage = [r.kv_usage for r in candidates]
        return self._best(usage, candidates, low=True)


def prefix_scores(blocks: Sequence[int]) -> list[float]:
    """llm-d's normalisation of cached-block counts: min-max over the replicas holding any
    block, 1 when those are all equal, 0 for a replica holding none."""
    held = [b for b in blocks if b > 0]
    if not held:
        return [0.0] * len(blocks)
    lo, hi = min(held), max(held)
    return [0.0 if b <= 0 else 1.0 if hi == lo else (b - lo) / (hi - lo) for b in blocks]


def queue_scores(waiting: Sequence[int]) -> list[float]:
    """The Gateway API Inference Extension's queue scorer: ``(max - q) / (max - min)``, 1 when
    every queue is as long."""
    lo, hi = min(waiting), max(waiting)
    return [1.0 if hi == lo else (hi - q) / (hi - lo) for q in waiting]


class PrefixAware(Router):
    """llm-d's precise prefix-cache, KV-utilization and queue scorers, weighted."""

    name = "prefix"

    def __init__(self, prefix_weight: float, kv_usage_weight: float, queue_weight: float):
        super().__init__()
        self.weights = (prefix_weight, kv_usage_weight, queue_weight)

    def scores(self, request: Request, candidates: Sequence[Replica]) -> list[float]:
        """Each candidate's weighted score (for tests and inspection)."""
        blocks = [r.cached_prefix_tokens(request) // r.block_size_tokens for r in candidates]
        prefix = prefix_scores(blocks)
        queue = queue_scores([r.num_waiting for r in candidates])
        wp, wk, wq = self.weights
        return [
            wp * p + wk * (1.0 - r.kv_usage) + wq * q
            for p, q, r in zip(prefix, queue, candidates, strict=True)
        ]

    def pick(self, request: Request, candidates: Sequence[Replica]) -> int:
        scores = self.scores(request, candidates)
        return self._best(scores, candidates, low=False)


class KvCost(Router):
    """NVIDIA Dynamo's KV router cost: prefill blocks (weighted) plus decode blocks."""

    name = "kv_cost"

    def __init__(self, overlap_score_weight: float) -> None:
        super().__init__()
        self.weight = overlap_score_weight

    def costs(self, request: Request, candidates: Sequence[Replica]) -> list[float]:
        """Each candidate's cost in blocks (for tests and inspection)."""
        out = []
        for r in candidates:
            b = r.block_size_tokens
            new = request.prompt_tokens - r.cached_prefix_tokens(request)
            prefill_blocks = (r.queued_prefill_tokens() + new) / b
            decode_blocks = r.num_used_blocks + cdiv(request.prompt_tokens, b)
            out.append(self.weight * prefill_blocks + decode_blocks)
        return out

    def pick(self, request: Request, candidates: Sequence[Replica]) -> int:
        costs = self.costs(request, candidates)
        return self._best(costs, candidates, low=True)


def make_router(spec: FleetSpec) -> Router:
    """The router ``spec.router`` names, with its weights.

    Raises:
        ValueError: an unknown router name.
    """
    name = spec.router
    weights = [float(getattr(spec, field)) for field in ROUTER_WEIGHTS.get(name, ())]
    if name == "round_robin":
        return RoundRobin()
    if name == "least_requests":
        return LeastRequests()
    if name == "least_kv":
        return LeastKv()
    if name == "prefix":
        return PrefixAware(*weights)
    if name == "kv_cost":
        return KvCost(*weights)
    raise ValueError(f"fleet.router: unknown router {name!r}; choose from {list(ROUTERS)}")
