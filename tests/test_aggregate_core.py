"""The aggregate core (``kvsim.aggregate_core``) against ``kvsim.engine``'s general engine (the
same tables, bit for bit) and the step-by-step reference (every running request at every step,
one memory row per step), on vLLM v1 runs with chunked prefill, budget and ``max_num_seqs``
limits, a head blocked on KV, prefix caching, block sizes from 1 to 64 and integer arrivals; and
its hand-over to the general engine when a run needs a rule it does not model (a preemption)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import simpy

import kvsim.engine as engine_module
from kvsim.aggregate_core import _next_release, _released_first
from kvsim.config import config_from_dict
from kvsim.engine import simulate

SHARES = (
    "token_states_pct",
    "reservation_pct",
    "internal_fragmentation_pct",
    "external_fragmentation_pct",
    "kv_cache_usage_perc",
    "num_requests_running_mean",
    "num_requests_waiting_mean",
)


def _config(cache=None, scheduler=None, workload=None, seed=0, **top):
    # Llama-3.1-8B: 128 KiB of KV per token, so 20 GiB hold 163,840 slots (nothing preempts)
    return config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "a100-80gb",
            "cache": {"kv_cache_gib": 20, "allocator": "paged", **(cache or {})},
            "scheduler": {"engine": "vllm-v1", "max_model_len": 4096, **(scheduler or {})},
            "workload": {"rate_per_s": 4.0, "num_requests": 120, **(workload or {})},
            "seed": seed,
            **top,
        }
    )


FIXED = {"lengths": "fixed", "fixed_prompt_tokens": 1500, "fixed_output_tokens": 300}
CASES = {
    "default": _config(),
    "small budget": _config(None, {"max_num_batched_tokens": 64, "max_num_seqs": 16}),
    "no chunked prefill": _config(
        None, {"enable_chunked_prefill": False, "max_num_batched_tokens": 4096}
    ),
    "max_num_seqs 4": _config(None, {"max_num_seqs": 4}),
    "1-token blocks": _config({"block_size_tokens": 1}),
    "64-token blocks, burst": _config({"block_size_tokens": 64}, None, {"rate_per_s": 200.0}),
    "prefix caching": _config({"enable_prefix_caching": True}),
    # 4,096 slots hold two 1,800-token requests: the third waits, blocked on KV
    "head blocked on KV": _config(
        {"kv_cache_gib": 0.5}, None, {**FIXED, "rate_per_s": 5.0, "num_requests": 40}
    ),
    "integer arrivals": _config(
        None,
        None,
        {
            "lengths": "fixed",
            "fixed_prompt_tokens": 40,
            "fixed_output_tokens": 33,
            "rate_per_s": 1e6,
            "num_requests": 30,
        },
    ),
}


@pytest.fixture
def cores_run(monkeypatch):
    """Records, per ``simulate``, whether the aggregate core ran to the end."""
    ran: list[bool] = []
    real = engine_module._run_aggregate_core

    def recording(*args):
        core, runnable = real(*args)
        ran.append(core is not None)
        return core, runnable

    monkeypatch.setattr(engine_module, "_run_aggregate_core", recording)
    return ran


def _same_tables(a, b) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.memory, b.memory, check_exact=True)
    assert json.dumps(a.summary, sort_keys=True, default=str) == json.dumps(
        b.summary, sort_keys=True, default=str
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_aggregate_core_gives_the_general_engines_tables(name, cores_run) -> None:
    cfg = CASES[name]
    fast = simulate(cfg)
    assert cores_run == [True], "the aggregate core must model this run"
    _same_tables(fast, simulate(cfg, aggregate_core=False))
    reference = simulate(cfg.model_copy(update={"memory_resolution": "step"}), lazy_decodes=False)
    pd.testing.assert_frame_equal(fast.requests, reference.requests, rtol=1e-9)
    assert fast.summary["num_steps"] == reference.summary["num_steps"]
    for share in SHARES:
        assert fast.summary[share] == pytest.approx(reference.summary[share], rel=1e-9), share


def test_the_blocked_head_case_blocks() -> None:
    # the case is only worth its name if a head waits while the pool's free slots are too few
    result = simulate(CASES["head blocked on KV"])
    assert result.summary["external_fragmentation_pct"] > 0
    assert result.summary["num_preemptions"] == 0


def test_a_preempting_run_is_handed_to_the_general_engine(cores_run) -> None:
    # 0.6 GiB hold 4,915 slots: at 20 req/s the running set outgrows them and v1 preempts
    cfg = _config({"kv_cache_gib": 0.6}, None, {"rate_per_s": 20.0})
    finished: list[int] = []
    result = simulate(cfg, on_finish=finished.append)
    assert cores_run == [False]
    assert result.summary["num_preemptions"] > 0
    _same_tables(result, simulate(cfg, aggregate_core=False))
    assert sum(finished) == 120  # finishes the aggregate core reported are not counted twice


def test_release_times_follow_simpy() -> None:
    # the engine's arrival process (kvsim.engine.Engine.arrival_source), reduced to its clock;
    # 0.868... + (32198.048724809767 - 0.868...) is 32198.048724809763 in floating point
    arrivals = [0, 0, 0.8681078156023432, 0.5, 32198.048724809767, 32198.048724809767, 40000]
    env = simpy.Environment()
    seen: list[float] = []

    def source():
        for a in arrivals:
            delay = a - env.now
            if delay > 0:
                yield env.timeout(delay)
            seen.append(env.now)

    env.process(source())
    env.run()
    release: list[float] = []
    together: list[bool] = []
    last: float = 0
    for a in arrivals:
        last, with_previous = _next_release(a, last)
        release.append(last)
        together.append(with_previous)
    assert release == seen
    assert [type(t) for t in release[:2]] == [int, int]  # SimPy's clock starts at int 0
    assert release[4] == 32198.048724809763 != arrivals[4]
    # by hand: 0 at once; 0 with it; a timeout; 0.5 (already late) with it; then timeouts
    assert together == [True, True, False, True, False, False, False]


def test_a_release_at_a_span_end_comes_first_only_if_scheduled_before_the_span() -> None:
    # request 1's timeout was created when request 0 was released: before a span that started
    # after that release (span_start = 1: request 0 was waiting or running when it started)
    assert _released_first(1, span_start=1)
    assert not _released_first(1, span_start=0)  # request 0 came during the span
    assert _released_first(0, span_start=0)  # SimPy starts the arrival process first


def test_record_memory_off_skips_the_rows(cores_run) -> None:
    cfg = _config(record_memory=False)
    fast = simulate(cfg)
    assert cores_run == [True]
    assert len(fast.memory) == 0
    general = simulate(cfg, aggregate_core=False)
    pd.testing.assert_frame_equal(fast.requests, general.requests, check_exact=True)
    assert np.isclose(fast.summary["duration_s"], general.summary["duration_s"], rtol=0, atol=0)
