"""Continuous-batching schedulers of the two engine profiles over one allocator contract.

``make_scheduler`` builds the profile's scheduler: ``vllm-v1`` (``v1.py``, today's vLLM) or
``vllm-v0`` (``v0.py``, the PagedAttention paper's engine). Both share ``core.SchedulerCore``.
"""

from __future__ import annotations

from kvsim.config import EngineArgs
from kvsim.core.kv.base import Allocator
from kvsim.core.scheduler.core import PreemptionLivelockError, SchedulerCore
from kvsim.core.scheduler.plan import StepPlan
from kvsim.core.scheduler.spec import SpecDecoder
from kvsim.core.scheduler.v0 import V0Scheduler
from kvsim.core.scheduler.v1 import V1Scheduler


def make_scheduler(
    allocator: Allocator,
    args: EngineArgs,
    *,
    pooled: bool = False,
    spec: SpecDecoder | None = None,
) -> SchedulerCore:
    """The scheduler of ``args.engine`` over ``allocator``: under ``vllm-v0`` with its CPU swap
    pool when the pool is paged (``V0Scheduler.with_swap_space``). ``pooled``: steady decoders
    may take anonymous blocks in bulk; off, every block goes to its table as it is taken, so
    block tables can be read at any time. ``spec``: speculative decoding's acceptance draws,
    v1 only."""
    if args.engine == "vllm-v1":
        return V1Scheduler(allocator, args, pooled, spec)
    if spec is not None:
        raise ValueError("speculative decoding runs under the vllm-v1 profile")
    return V0Scheduler.with_swap_space(allocator, args, pooled)


__all__ = [
    "PreemptionLivelockError",
    "SchedulerCore",
    "SpecDecoder",
    "StepPlan",
    "V0Scheduler",
    "V1Scheduler",
    "make_scheduler",
]
