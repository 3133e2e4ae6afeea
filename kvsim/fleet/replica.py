"""One replica of a fleet: an ``Engine`` (the one engine) and what a router reads of it.

A router sees a replica as vLLM's metrics and KV events show it: requests routed there and not
finished (the router's own count), the waiting queue (``vllm:num_requests_waiting``), the KV
pool's usage (``vllm:kv_cache_usage_perc``, 0-1), the tokens of a request's prompt its prefix
cache holds (what llm-d's precise prefix-cache scorer and Dynamo's KV indexer learn from KV
events), and the prompt tokens queued for prefill.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from kvsim.config import SimConfig
from kvsim.engine.loop import Engine
from kvsim.workload.request import Request

if TYPE_CHECKING:
    pass

Role = Literal["both", "prefill", "decode"]


@dataclass(eq=False)
class Replica:
    """A fleet's engine and the router's view of it.

    Attributes:
        index: its place in the fleet (ties go to the lowest).
        role: ``"both"`` (co-located), ``"prefill"`` or ``"decode"``.
        config: its own config (``SimConfig.replica_configs``).
        engine: the engine serving it.
        num_outstanding: client requests routed here and not finished here (a request of
            n > 1 samples counts once until its last sample ends: ``fleet.ClientRoutes``).
        num_routed: requests routed here so far.
    """

    index: int
    role: Role
    config: SimConfig
    engine: Engine
    num_outstanding: int = 0
    num_routed: int = 0
    _usable_tokens: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._usable_tokens = max(1, self.engine.allocator.usable_capacity_tokens)

    @property
    def block_size_tokens(self) -> int:
        return self.config.cache.block_size_tokens

    @property
    def num_waiting(self) -> int:
        """``vllm:num_requests_waiting``: the waiting queue, with requests whose KV is expected
        and not yet given blocks, and under async scheduling those handed over that the
        scheduler sees at the end of the next step (the engine's own gauge counts them)."""
        engine = self.engine
        return len(engine.scheduler.waiting) + engine.num_incoming + engine.num_staged

    @property
    def kv_usage(self) -> float:
        """``vllm:kv_cache_usage_perc`` (0-1): held blocks over the blocks requests can hold
        (vLLM ``BlockPool.get_usage``; cached free blocks count as free)."""
        allocator = self.engine.allocator
        return 1.0 - allocator.num_free_tokens / self._usable_tokens

    @property
    def num_used_blocks(self) -> int:
        """Blocks (of ``block_size_tokens``) the pool has handed out (Dynamo's active blocks)."""
        allocator = self.engine.allocator
        used = self._usable_tokens - allocator.num_free_tokens
        return max(0, used) // self.block_size_tokens

    def cached_prefix_tokens(self, request: Request) -> int:
        """Prompt tokens of ``request`` this replica's prefix cache holds now."""
        return self.engine.allocator.cached_prefix_tokens(request)

    def queued_prefill_tokens(self) -> int:
        """Prompt tokens routed here and not computed yet (Dynamo's active prefill work, which
        its router counts from the routing until the prefill ends): the waiting requests'
        (a recomputed one's outputs too), those handed over that an async scheduler has not
        seen, and the running requests' still in their prefill (a chunked prompt: more than
        the one token a decode step computes left)."""
        engine = self.engine
        waiting = [*engine.scheduler.waiting, *engine.staged]
        queued = sum([r.num_tokens - r.num_computed_tokens for r in waiting])
        for r in engine.scheduler.lazy.others:  # (the decode cohort's members all decode)
            left = r.num_tokens - r.num_computed_tokens
            if left > 1:
                queued += left
        return queued
