"""Scheduler test helpers: engine arguments without a SimConfig, and a step driver."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvsim.config import EngineArgs
from kvsim.request import Request
from kvsim.scheduler import SchedulerCore, StepPlan

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


def step(sched: SchedulerCore, t: list[float] | None = None) -> tuple[StepPlan, list[Request]]:
    """Plan and complete one step of 1 s (no fast-forward); ``t`` holds the clock."""
    clock = t if t is not None else [0.0]
    plan = sched.schedule()
    for r in plan.scheduled:
        if r.first_scheduled_time_s is None:
            r.first_scheduled_time_s = clock[0]
    clock[0] += 1.0
    return plan, sched.complete(plan, clock[0], clock[0])


def tokens(plan: StepPlan) -> dict[int, int]:
    """req_id -> tokens scheduled in the plan's step."""
    return {r.req_id: n for r, n in zip(plan.scheduled, plan.num_new_tokens, strict=True)}
