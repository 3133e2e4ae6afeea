"""Request-level batching (``scheduler.batching = "request"``, the paper's FasterTransformer
baseline, §6.1): a batch of the earliest waiting requests is admitted only when the previous one
has finished. Worked by hand on v0's step rules (a step prefills or decodes, never both)."""

from __future__ import annotations

import pytest

from kvsim.config import config_from_dict
from kvsim.core.kv.paged import PagedAllocator
from kvsim.core.scheduler import V0Scheduler
from kvsim.engine import simulate
from tests.scheduler.conftest import engine_args, req, step, tokens


def _admissions(batching: str) -> list[dict[int, int]]:
    # max_num_seqs 2. A (4 + 2 output) and B (4 + 5 output) prefill in step 1 and emit their
    # first tokens; each decode step emits one more. A's second token comes in step 2, so A
    # finishes there; B's fifth in step 5. Iteration-level batching takes C into A's free seat
    # at step 3 (a prefill-only step); request-level batching keeps C waiting until B is done
    # and prefills it in step 6.
    alloc = PagedAllocator(capacity_tokens=64 * 16, block_size_tokens=16)
    sched = V0Scheduler(alloc, engine_args("vllm-v0", max_num_seqs=2, batching=batching), None)
    for r in (req(0, 4, 2), req(1, 4, 5), req(2, 4, 1)):
        sched.add_request(r)
    plans = []
    while sched.has_work():
        plan, _ = step(sched)
        plans.append(tokens(plan))
    return plans


def test_iteration_batching_fills_a_free_seat_at_once():
    assert _admissions("iteration") == [{0: 4, 1: 4}, {0: 1, 1: 1}, {2: 4}, {1: 1}, {1: 1}, {1: 1}]


def test_request_batching_waits_for_the_whole_batch():
    plans = _admissions("request")
    assert plans == [{0: 4, 1: 4}, {0: 1, 1: 1}, {1: 1}, {1: 1}, {1: 1}, {2: 4}]


def test_request_batching_needs_the_v0_engine():
    with pytest.raises(ValueError, match=r"scheduler\.batching.*vllm-v0"):
        config_from_dict({"scheduler": {"batching": "request"}}).engine_args()


def test_request_batching_never_beats_iteration_batching():
    # same workload and memory: a request waits at least as long for its first step
    base = {
        "model": "opt-13b",
        "gpu": "a100-40gb",
        "cost": "vllm-2023",
        "cache": {"allocator": "buddy", "reservation": "max", "kv_cache_gib": 12.0},
        "scheduler": {"engine": "vllm-v0", "max_model_len": 2048},
        "workload": {"preset": "sharegpt_like", "rate_per_s": 0.5, "num_requests": 200},
    }
    queue = {}
    for batching in ("iteration", "request"):
        base["scheduler"]["batching"] = batching
        summary = simulate(config_from_dict(base)).summary
        queue[batching] = summary["request_queue_time_seconds_mean"]
    assert queue["request"] > queue["iteration"]


def test_a_late_arrival_waits_for_a_batch_the_engine_fast_forwards(tmp_path):
    # A (arrives at 0 s) prefills alone and the engine fast-forwards its decodes; B arrives at
    # 1 s, while A decodes: under request-level batching B starts only when A has finished
    # (its first step begins at A's finish); under iteration-level batching it joins at once
    trace = tmp_path / "late.csv"
    trace.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,10,500\n1,10,500\n")
    times = {}
    for batching in ("iteration", "request"):
        cfg = config_from_dict(
            {
                "model": "opt-13b",
                "gpu": "a100-40gb",
                "cache": {"allocator": "buddy", "reservation": "max", "kv_cache_gib": 12.0},
                "scheduler": {"engine": "vllm-v0", "max_model_len": 2048, "batching": batching},
                "workload": {"trace": str(trace), "arrival": "trace"},
            }
        )
        requests = simulate(cfg).requests.set_index("req_id")
        times[batching] = requests
    late = times["request"]
    assert late.loc[1, "first_scheduled_time_s"] == late.loc[0, "finish_time_s"]
    joined = times["iteration"]
    assert joined.loc[1, "first_scheduled_time_s"] < joined.loc[0, "finish_time_s"]


def test_the_run_header_names_request_level_batching():
    from typer.testing import CliRunner

    from kvsim.cli import app

    args = ["run", "--no-progress", "--set", "scheduler.engine=vllm-v0"]
    args += ["--set", "cache.allocator=buddy", "--set", "workload.num_requests=20"]
    plain = CliRunner().invoke(app, args)
    batched = CliRunner().invoke(app, [*args, "--set", "scheduler.batching=request"])
    assert plain.exit_code == batched.exit_code == 0, batched.output
    assert "request-level batching" in batched.output.splitlines()[0]
    assert "request-level batching" not in plain.output
