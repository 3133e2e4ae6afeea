"""Scheduler test helpers: engine arguments without a SimConfig, and a step driver."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvsim.config import EngineArgs
from kvsim.core.scheduler import SchedulerCore, StepPlan
from kvsim.workload.request import Request

V1 = EngineArgs(
    engine="vllm-v1",
    max_num_seqs=256,
    max_num_batched_tokens=8192,
    max_model_len=8192,
    enable_chunked_prefill=True,
    long_prefill_token_threshold=0,
    enable_prefix_caching=False,
    watermark=0.0,
    preemption_mode=None,
    swap_space_gib=4.0,
    reserve_null_block=False,
    max_preemptions_per_request=1000,
    scheduler_reserve_full_isl=True,  # vLLM v0.20.0's default
)
V0 = replace(V1, engine="vllm-v0", enable_chunked_prefill=False, scheduler_reserve_full_isl=False)


def engine_args(engine: str = "vllm-v1", **kw: Any) -> EngineArgs:
    """The profile's arguments with ``kw`` replaced (big budgets, no watermark, no caching)."""
    return replace(V1 if engine == "vllm-v1" else V0, **kw)


def req(req_id: int, prompt: int, output: int, **kw: Any) -> Request:
    return Request(req_id, 0.0, prompt, output, output, **kw)


_TOKENS: dict[int, tuple[StepPlan, dict[int, int]]] = {}  # id(plan) -> (plan, step_tokens)


def step(sched: SchedulerCore, t: list[float] | None = None) -> tuple[StepPlan, list[Request]]:
    """Plan and complete one step of 1 s (no fast-forward); ``t`` holds the clock. The running
    requests' counters are true afterwards (``sync_requests``)."""
    clock = t if t is not None else [0.0]
    plan = sched.schedule()
    _TOKENS[id(plan)] = (plan, sched.step_tokens(plan))
    for r in plan.scheduled:
        if r.first_scheduled_time_s is None:
            r.first_scheduled_time_s = clock[0]
    clock[0] += 1.0
    finished = sched.complete(plan, clock[0], clock[0])
    sched.sync_requests()  # the tests read the running requests' counters
    return plan, finished


def tokens(plan: StepPlan, sched: SchedulerCore | None = None) -> dict[int, int]:
    """req_id -> tokens scheduled in the plan's step, the decode cohort's members included:
    as ``step`` noted them, or from ``sched`` right after its ``schedule``."""
    if sched is not None:
        return sched.step_tokens(plan)
    noted = _TOKENS.get(id(plan))
    assert noted is not None, "plan not made by step(): pass its scheduler"
    assert noted[0] is plan, "plan not made by step(): pass its scheduler"
    return noted[1]
