"""The aggregate core (``kvsim.aggregate_core``) against ``kvsim.engine``'s general engine (the
same tables, bit for bit) and the step-by-step reference (every running request at every step,
one memory row per step), on vLLM v1 runs with chunked prefill, budget and ``max_num_seqs``
limits, a head blocked on KV, prefix caching, block sizes from 1 to 64, preemptions (with the
preempted requests' cached blocks hit, evicted or guarded), integer arrival times, releases at
the very end of a span and random small runs; and its hand-over to the general engine when a
run needs a rule it does not model."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvsim.aggregate_core as aggregate_module
import kvsim.aggregate_preemption as preemption_module
import kvsim.engine as engine_module
from kvsim.aggregate_core import _next_release, _released_first
from kvsim.config import config_from_dict
from kvsim.engine import simulate
from kvsim.request import RequestSpec
from tests.test_lazy_equivalence import SHARES  # the shares the reference must match


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
        {"kv_cache_gib": 0.5},
        {"max_model_len": 2048},  # (one 4,096-token request would not fit beside the null block)
        {**FIXED, "rate_per_s": 5.0, "num_requests": 40},
    ),
    # 0.6 GiB hold 4,915 slots for some 40 requests of ~1,150 tokens: v1 preempts (recompute);
    # with prefix caching the preempted requests hit their own blocks and some are evicted
    "preempting, prefix caching": _config(
        {"kv_cache_gib": 0.6, "enable_prefix_caching": True}, None, {"rate_per_s": 20.0}
    ),
    "preempting, no prefix caching": _config(
        {"kv_cache_gib": 0.6, "enable_prefix_caching": False}, None, {"rate_per_s": 20.0}
    ),
    # without vLLM's full-sequence admission gate, chunks of heads that cannot finish preempt,
    # also where the budget ends before a steady decoder's turn (the exact pass)
    "preempting, small budget": _config(
        {"kv_cache_gib": 0.4, "block_size_tokens": 64},
        {
            "max_num_batched_tokens": 256,
            "max_model_len": 2048,
            "scheduler_reserve_full_isl": False,
        },
        {"rate_per_s": 20.0},
    ),
    # the same with the gate (the default): heads wait for their whole sequence's blocks
    "full-sequence gate, small budget": _config(
        {"kv_cache_gib": 0.4, "block_size_tokens": 64},
        {"max_num_batched_tokens": 256, "max_model_len": 2048},
        {"rate_per_s": 20.0},
    ),
}


@pytest.fixture
def cores_run(monkeypatch):
    """Records, per ``simulate``, whether the aggregate core ran to the end."""
    ran: list[bool] = []
    real = engine_module._run_aggregate_core

    def recording(*args):
        core, spent = real(*args)
        ran.append(core is not None)
        return core, spent

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


def test_the_gate_case_holds_heads_back() -> None:
    # the gate is on in this case only if it changes the run: heads wait for blocks that the
    # ungated run gave their first chunks, so fewer preemptions
    gated = simulate(CASES["full-sequence gate, small budget"]).summary
    ungated = simulate(CASES["preempting, small budget"]).summary
    assert gated["scheduler_reserve_full_isl"]
    assert not ungated["scheduler_reserve_full_isl"]
    assert gated["num_preemptions"] < ungated["num_preemptions"]


@pytest.mark.parametrize("name", [n for n in CASES if n.startswith("preempting")])
def test_the_preempting_cases_preempt(name) -> None:
    summary = simulate(CASES[name]).summary
    assert summary["num_preemptions"] > 0
    if CASES[name].engine_args.enable_prefix_caching:  # the free queue's positions matter
        assert summary["prefix_cache_preempted_hits"] > 0
        assert summary["num_cache_evictions"] > 0


@pytest.mark.python_sources
def test_the_small_budget_case_preempts_on_both_paths(monkeypatch) -> None:
    # where the token budget holds every running request the core preempts without flushing
    # the cohort (preempt_for_step); where it ends first, in the exact pass (exact_running):
    # the case's tables above are only a check of both if it takes both
    preempted = {"cohort kept": 0, "exact pass": 0}
    kept, exact = aggregate_module.preempt_for_step, aggregate_module.exact_running

    def counting_kept(*args):
        out = kept(*args)
        preempted["cohort kept"] += out[1]
        return out

    def counting_exact(*args):
        out = exact(*args)
        preempted["exact pass"] += out.num_preempted
        return out

    monkeypatch.setattr(aggregate_module, "preempt_for_step", counting_kept)
    monkeypatch.setattr(aggregate_module, "exact_running", counting_exact)
    simulate(CASES["preempting, small budget"])
    assert preempted["cohort kept"] > 0
    assert preempted["exact pass"] > 0


def _specs(rows: list[tuple[float, int, int]]) -> list[RequestSpec]:
    """``(arrival_time_s, prompt_tokens, output_tokens)`` rows as a workload."""
    return [RequestSpec(i, a, p, o, o) for i, (a, p, o) in enumerate(rows)]


def test_a_run_declined_after_finishes_is_run_again_by_the_general_engine(
    cores_run, monkeypatch
) -> None:
    # 0.5 GiB hold 4,096 slots: five small requests finish first; then 30 requests of 900
    # tokens arrive at once and outgrow the pool, so v1 preempts; here the core is made to
    # decline at its first preemption (every rule it models now; the hand-over stays for the
    # next one it does not)
    restarts: list[int] = []
    real_restart = engine_module._Progress.restart

    def restart(self) -> None:
        restarts.append(self.seen)
        real_restart(self)

    def decline(*_) -> int:
        raise preemption_module.NotModeledError("a preemption, in this test")

    monkeypatch.setattr(engine_module._Progress, "restart", restart)
    monkeypatch.setattr(preemption_module, "preempt", decline)
    specs = _specs([(float(t), 100, 20) for t in range(5)] + [(10.0, 500, 400)] * 30)
    cfg = _config({"kv_cache_gib": 0.5}, {"max_model_len": 2048})
    finished: list[int] = []
    result = simulate(cfg, specs, on_finish=finished.append)
    assert cores_run == [False]
    assert restarts  # it declined ...
    assert restarts[0] >= 5  # ... after the small ones finished
    assert result.summary["num_preemptions"] > 0
    assert sum(finished) == 35  # finishes reported before the decline are not counted twice
    _same_tables(result, simulate(cfg, specs, aggregate_core=False))


GUARDED_ROWS = [  # (arrival_time_s, prompt_tokens, output_tokens), found by a random search
    (2, 218, 35), (4, 57, 40), (4, 107, 11), (4, 193, 48), (4, 253, 23), (5, 176, 41),
    (6, 178, 9), (7, 16, 34), (10, 61, 52), (11, 85, 2), (12, 22, 19), (12, 178, 25),
    (13, 135, 58), (13, 138, 25), (13, 209, 53), (13, 296, 26), (14, 39, 42), (15, 262, 20),
    (16, 170, 35), (17, 71, 11), (17, 157, 16), (17, 221, 3), (18, 167, 19), (19, 148, 46),
]  # fmt: skip


def test_a_preempted_head_keeps_its_cached_blocks_while_it_waits(cores_run, monkeypatch) -> None:
    # 819 one-token blocks, a 32-token budget: a preempted request back at the head finds some
    # of its blocks still cached but does not fit, and needs more tokens than the budget, so the
    # spans stop before they would evict its hits (V1Scheduler._blocked_reason's guard). With
    # spans that ignore the guard, this run's tables differ from the general engine's. Only
    # without the full-sequence gate: with it, a head's need is its whole sequence, which losing
    # its own free hits leaves as it is, so no guard is needed.
    guards: list[int] = []
    real = aggregate_module.CountedFreeQueue.blocks_before_evicting

    def counting(self, *args) -> int:
        guards.append(real(self, *args))
        return guards[-1]

    monkeypatch.setattr(aggregate_module.CountedFreeQueue, "blocks_before_evicting", counting)
    cfg = _config(
        {"kv_cache_gib": 0.1, "block_size_tokens": 1, "enable_prefix_caching": True},
        {
            "max_model_len": 512,
            "max_num_batched_tokens": 32,
            "max_num_seqs": 8,
            "scheduler_reserve_full_isl": False,
        },
    )
    fast = simulate(cfg, _specs(GUARDED_ROWS))
    assert cores_run == [True]
    assert guards
    _same_tables(fast, simulate(cfg, _specs(GUARDED_ROWS), aggregate_core=False))


def test_integer_arrival_times(cores_run) -> None:
    # SimPy's clock stays an int until a float duration is added: times 0, 0, 1, 1, 3, ...
    specs = _specs([(t, 40 + 7 * i, 9 + i) for i, t in enumerate([0, 0, 1, 1, 3, 5, 5, 8])])
    cfg = _config()
    fast = simulate(cfg, specs)
    assert cores_run == [True]
    assert fast.requests["arrival_time_s"].dtype == np.int64
    assert fast.memory["time_s"].iloc[0] == 0
    _same_tables(fast, simulate(cfg, specs, aggregate_core=False))


def test_releases_at_the_very_end_of_a_span(cores_run, monkeypatch) -> None:
    # find the end T of the span during which request 1 arrives (at 0.7 s), then add two
    # requests arriving at exactly T: SimPy releases them after the engine resumes at T
    two = _specs([(0.0, 100, 500), (0.7, 100, 50)])  # request 0 decodes until ~6 s
    cfg = _config()
    memory = simulate(cfg, two, aggregate_core=False).memory
    ends = memory["time_s"] + memory["duration_s"]
    span_end = float(ends[(memory["time_s"] < 0.7) & (ends > 0.7)].iloc[0])
    ties: list[int] = []
    real = aggregate_module._released_first

    def counting(i: int, span_start: int) -> bool:
        ties.append(i)
        return real(i, span_start)

    monkeypatch.setattr(aggregate_module, "_released_first", counting)
    four = _specs([(0.0, 100, 500), (0.7, 100, 50), (span_end, 60, 30), (span_end, 70, 20)])
    fast = simulate(cfg, four)
    assert cores_run == [True]
    assert ties, "a release met a span's end exactly"
    _same_tables(fast, simulate(cfg, four, aggregate_core=False))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    block_size=st.sampled_from([1, 4, 16, 64]),
    budget=st.integers(16, 2048),
    max_num_seqs=st.integers(1, 16),
    chunked=st.booleans(),
    caching=st.booleans(),
    full_isl=st.booleans(),
    kv_gib=st.sampled_from([0.1, 0.3, 2.0]),
    rows=st.lists(
        st.tuples(st.integers(0, 20), st.integers(1, 300), st.integers(1, 60)),
        min_size=1,
        max_size=25,
    ),
)
def test_random_small_runs_give_the_general_engines_tables(
    block_size, budget, max_num_seqs, chunked, caching, full_isl, kv_gib, rows
) -> None:
    # integer arrival seconds (ties and simultaneous arrivals), tiny pools that preempt,
    # budgets that end before some decoders' turn
    if not chunked:
        budget = 512  # without chunked prefill the budget must hold max_model_len
    cfg = _config(
        {"kv_cache_gib": kv_gib, "block_size_tokens": block_size, "enable_prefix_caching": caching},
        {
            "max_model_len": 512,  # 0.1 GiB hold 819 slots
            "max_num_batched_tokens": max(budget, max_num_seqs),
            "max_num_seqs": max_num_seqs,
            "enable_chunked_prefill": chunked,
            "scheduler_reserve_full_isl": full_isl,
        },
    )
    specs = _specs(sorted(rows))
    _same_tables(simulate(cfg, specs), simulate(cfg, specs, aggregate_core=False))


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


def test_numpy_token_counts_give_the_same_tables(cores_run) -> None:
    # a caller's specs built from arrays: the counters summed from them (hits, evictions, bytes)
    # must come out as the Python ints the general engine gives, not numpy ones
    cfg = _config(
        {"kv_cache_gib": 0.1, "block_size_tokens": 1, "enable_prefix_caching": True},
        {"max_model_len": 512, "max_num_batched_tokens": 64, "max_num_seqs": 8},
    )
    rows = [(0, 300, 200), (0, 250, 150), (0, 200, 250), (1, 100, 300)]
    specs = [
        RequestSpec(i, a, np.int32(p), np.int64(o), np.int64(o)) for i, (a, p, o) in enumerate(rows)
    ]
    fast = simulate(cfg, specs)
    assert cores_run == [True]
    assert fast.summary["prefix_cache_preempted_hits"] > 0
    _same_tables(fast, simulate(cfg, _specs(rows)))


def test_float32_arrivals_give_the_same_tables_and_ids_must_be_unique() -> None:
    # float32 arrival times leaked into the general engine's clock (times rounded to float32)
    cfg = _config({"kv_cache_gib": 1}, {"max_model_len": 512})
    rows = [(10.0, 6, 72), (15.0, 3, 1)]
    specs = [RequestSpec(i, np.float32(a), p, o, o) for i, (a, p, o) in enumerate(rows)]
    _same_tables(simulate(cfg, specs, aggregate_core=False), simulate(cfg, _specs(rows)))
    twice = [RequestSpec(0, 0.0, 100, 20, 20), RequestSpec(0, 0.0, 50, 30, 30)]
    with pytest.raises(ValueError, match="req_id 0 appears more than once"):
        simulate(cfg, twice)
