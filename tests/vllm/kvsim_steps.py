"""kvsim's side of the vLLM diff: one workload through kvsim's ``vllm-v1`` scheduler, step by step.

The only file of ``tests/vllm`` that touches kvsim's engine. It produces the records that
``vllm_driver.py`` produces from vLLM (``compare.py`` defines them) and uses exactly these kvsim
calls, which is what has to be re-pointed when the engine moves:

- ``kvsim.config.EngineArgs(...)``: the profile's knobs (fields named as vLLM's);
- ``kvsim.core.kv.paged.PagedAllocator(capacity_tokens=, block_size_tokens=,
  enable_prefix_caching=, reserve_null_block=True)``: ``num_blocks`` blocks, block 0 the null
  block, as vLLM's ``KVCacheConfig(num_blocks=...)``; ``.num_free_blocks`` after ``schedule``;
- ``kvsim.core.kv.hybrid.HybridPagedAllocator(capacity_tokens=, kv_groups=,
  enable_prefix_caching=)`` for a hybrid workload (a full and a sliding-window group), and
  ``.pool.num_free`` after ``schedule`` (both pools count the null block out);
- ``kvsim.core.scheduler.make_scheduler(allocator, args, pooled=..., spec=...)``: the
  ``vllm-v1`` scheduler (steady decoders advance as a decode cohort; ``pooled``: their blocks
  are taken in bulk, as the engine does when nobody reads block ids; ``spec``: a
  ``SpecDecoder(k, lookahead, acceptance_rates, seed)`` drawing acceptances as the driver does);
- ``kvsim.workload.request.Request(req_id, arrival_time_s, prompt_tokens, output_tokens, max_tokens,
  token_segments=...)``: the workload's token runs become segments ``(("v", s), n)``, so equal
  runs are equal tokens as in the driver's token ids; outputs are kvsim's own per-request runs;
  ``kvsim.workload.tokens.note_shared_tokens(requests)`` then marks, as the engine's intake
  does, the tokens past which no other request names a run (their blocks are keyed only if
  the request is preempted);
- ``scheduler.add_request(request)`` at the request's arrival step, then per step
  ``plan = scheduler.schedule()``, ``scheduler.step_tokens(plan)`` (req_id -> tokens of every
  running request, the cohort's members included, in running order) and
  ``scheduler.complete(plan, now_s, step0_end_s)`` (returns the finished requests);
- read-only request fields: ``num_computed_tokens`` (after ``schedule``: a newly scheduled
  request's prefix-cache hit) and ``num_preemptions`` (which requests a step preempted), and
  ``scheduler.running`` / ``scheduler.waiting`` (which requests are newly scheduled).

No SimPy and no cost model: a step takes one simulated second.
"""

from __future__ import annotations

from typing import Any

from kvsim.config import EngineArgs
from kvsim.config.layers import KVCacheGroup, KVCacheGroups
from kvsim.core.kv.hybrid import HybridPagedAllocator
from kvsim.core.kv.paged import PagedAllocator
from kvsim.core.scheduler import SpecDecoder, make_scheduler
from kvsim.workload.request import Request
from kvsim.workload.tokens import note_shared_tokens


def engine_args(cfg: dict[str, Any]) -> EngineArgs:
    """The ``vllm-v1`` profile's arguments for a workload's ``config``."""
    return EngineArgs(
        engine="vllm-v1",
        max_num_seqs=cfg["max_num_seqs"],
        max_num_batched_tokens=cfg["max_num_batched_tokens"],
        max_model_len=cfg["max_model_len"],
        enable_chunked_prefill=cfg["enable_chunked_prefill"],
        long_prefill_token_threshold=cfg["long_prefill_token_threshold"],
        enable_prefix_caching=cfg["enable_prefix_caching"],
        watermark=cfg.get("watermark", 0.0),
        preemption_mode=None,
        swap_space_gib=0.0,
        reserve_null_block=True,
        max_preemptions_per_request=1_000_000,
        scheduler_reserve_full_isl=True,  # vLLM's default (SchedulerConfig)
        num_speculative_tokens=cfg.get("num_speculative_tokens", 0),
        num_lookahead_tokens=lookahead(cfg),
        num_hash_lookahead_tokens=hash_lookahead(cfg),
    )


def hash_lookahead(cfg: dict[str, Any]) -> int:
    """vLLM's ``num_hash_lookahead_tokens``: 1 for EAGLE with a prefix cache (a block is keyed
    with the token after it), else 0."""
    eagle = cfg.get("num_speculative_tokens", 0) and cfg.get("spec_method") != "ngram"
    return 1 if eagle and cfg["enable_prefix_caching"] else 0


def lookahead(cfg: dict[str, Any]) -> int:
    """vLLM's ``num_lookahead_tokens``: ``k`` for EAGLE, 0 for n-gram lookup."""
    k = cfg.get("num_speculative_tokens", 0)
    return 0 if cfg.get("spec_method") == "ngram" else k


def spec_decoder(cfg: dict[str, Any]) -> SpecDecoder | None:
    """The workload's acceptance draws (``tests/vllm/workloads.py``), or ``None``."""
    k = cfg.get("num_speculative_tokens", 0)
    if not k:
        return None
    return SpecDecoder(k, lookahead(cfg), cfg["acceptance_rates"], cfg["spec_seed"])


def make_request(spec: dict[str, Any]) -> Request:
    """A kvsim request of the workload's request ``spec``."""
    segments = tuple((("v", seg), length) for seg, length in spec["segments"])
    prompt = sum(length for _, length in segments)
    output = spec["output_tokens"]
    return Request(
        spec["id"], float(spec["arrival_step"]), prompt, output, output, token_segments=segments
    )


def run_workload(work: dict[str, Any], lazy: bool = False) -> dict[str, Any]:
    """The per-step records of one workload (``compare.py``), from kvsim; ``lazy``: the
    cohort's members take their blocks in bulk (``pooled``), as in the engine's runs."""
    cfg = work["config"]
    block = cfg["block_size"]
    allocator: PagedAllocator | HybridPagedAllocator
    if cfg.get("sliding_window"):  # full + sliding-window groups over one pool
        kinds = (KVCacheGroup("full", 1), KVCacheGroup("sliding", 1, cfg["sliding_window"]))
        if cfg.get("sliding_first"):  # (the groups in the model's layer order, as vLLM's)
            kinds = kinds[::-1]
        allocator = HybridPagedAllocator(
            capacity_tokens=cfg["num_blocks"] * block,
            kv_groups=KVCacheGroups(kinds, 1, block, 1),
            enable_prefix_caching=cfg["enable_prefix_caching"],
            max_in_flight_tokens=cfg["max_num_batched_tokens"],
            max_model_len=cfg["max_model_len"],
        )
    else:
        allocator = PagedAllocator(
            capacity_tokens=cfg["num_blocks"] * block,
            block_size_tokens=block,
            enable_prefix_caching=cfg["enable_prefix_caching"],
            reserve_null_block=True,
        )
    sched = make_scheduler(allocator, engine_args(cfg), pooled=lazy, spec=spec_decoder(cfg))
    pending = sorted(work["requests"], key=lambda r: (r["arrival_step"], r["id"]))
    requests = {spec["id"]: make_request(spec) for spec in pending}
    note_shared_tokens(list(requests.values()))  # as the engine's intake does
    live: set[int] = set()
    steps: list[dict[str, Any]] = []
    step, i, max_steps = 0, 0, work["max_steps"]
    while (i < len(pending) or live) and step < max_steps:
        if not live and pending[i]["arrival_step"] > step:
            step = pending[i]["arrival_step"]  # an idle engine waits for the next arrival
        while i < len(pending) and pending[i]["arrival_step"] <= step:
            sched.add_request(requests[pending[i]["id"]])
            live.add(pending[i]["id"])
            i += 1
        was_running = {id(r) for r in sched.running}
        preemptions = {r.req_id: r.num_preemptions for r in sched.running}
        plan = sched.schedule()
        scheduled = [[rid, n] for rid, n in sched.step_tokens(plan).items()]  # running order
        hits = {
            str(r.req_id): r.num_computed_tokens
            for r in sorted(plan.scheduled, key=lambda r: r.req_id)
            if id(r) not in was_running
        }
        preempted = sorted(
            r.req_id
            for r in sched.waiting
            if r.req_id in preemptions and r.num_preemptions > preemptions[r.req_id]
        )
        free_blocks = allocator.pool.num_free
        finished = sorted(r.req_id for r in sched.complete(plan, step + 1.0, step + 1.0))
        live.difference_update(finished)
        steps.append(
            {
                "step": step,
                "scheduled": scheduled,
                "preempted": preempted,
                "finished": finished,
                "hits": hits,
                "free_blocks": free_blocks,
            }
        )
        step += 1
    return {"name": work["name"], "steps": steps}
