"""The compiled core (``kvsim.compiled_kernel``, run by ``kvsim.compiled_core``) against the
Python aggregate core: identical tables, bit for bit, on every case of
``tests/test_aggregate_core.py`` it models, plus tensor and pipeline parallelism, long spans and
random small runs; the runs it does not model (preemptions) go to the Python core. The kernel's
loop runs as plain Python everywhere, and compiled by numba where numba is installed."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kvsim.compiled_core as compiled_module
from kvsim.compiled_kernel import pairwise_sum
from kvsim.engine import simulate
from kvsim.request import RequestSpec
from tests.test_aggregate_core import CASES as AGGREGATE_CASES
from tests.test_aggregate_core import FIXED, _config

GATE_CASE = (
    {"kv_cache_gib": 0.5},
    {"max_model_len": 2048, "max_num_batched_tokens": 256},
    {**FIXED, "rate_per_s": 5.0, "num_requests": 40},
)
CASES = {
    **AGGREGATE_CASES,
    "tensor parallel 2": _config(parallel={"tensor_parallel_size": 2}),
    "pipeline parallel 2": _config(parallel={"pipeline_parallel_size": 2}),
    # 20 s between arrivals and 2,500 output tokens: spans of hundreds to 4,096 steps
    "long spans": _config(
        None,
        None,
        {**FIXED, "fixed_output_tokens": 2500, "rate_per_s": 0.05, "num_requests": 12},
    ),
    "long spans, prefix caching, no memory rows": _config(
        {"enable_prefix_caching": True},
        None,
        {**FIXED, "fixed_output_tokens": 2500, "rate_per_s": 0.05, "num_requests": 12},
        record_memory=False,
    ),
    # 4,096 slots, a 256-token budget: the third 1,800-token request's first chunk would fit
    # beside two running ones, but the full-sequence gate holds it until one finishes
    "full-sequence gate holds a chunkable head": _config(*GATE_CASE),
}
HAS_NUMBA = compiled_module.numba_available()


@pytest.fixture
def kernel_runs(monkeypatch):
    """Makes ``simulate(..., compiled=True)`` run the kernel as plain Python (``"python"``) or
    compiled (``"numba"``); records each run's outcome (``"done"``, ``"declined"``, ``"spent"``)."""
    ran: list[str] = []
    real = compiled_module.run_compiled
    mode: dict[str, bool] = {"python": True}

    def recording(core, python_kernel=False, need_cache=False):
        done = real(core, python_kernel=mode["python"], need_cache=need_cache)
        ran.append(done)
        return done

    monkeypatch.setattr(compiled_module, "run_compiled", recording)
    monkeypatch.setattr(compiled_module, "numba_available", lambda: True)

    def use(kind: str) -> list[str]:
        mode["python"] = kind == "python"
        return ran

    return use


def _identical(a, b) -> None:
    pd.testing.assert_frame_equal(a.requests, b.requests, check_exact=True)
    pd.testing.assert_frame_equal(a.memory, b.memory, check_exact=True)
    assert json.dumps(a.summary, sort_keys=True) == json.dumps(b.summary, sort_keys=True)


KINDS = ["python", pytest.param("numba", marks=pytest.mark.skipif(not HAS_NUMBA, reason="numba"))]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_gives_the_python_cores_tables(name, kind, kernel_runs) -> None:
    cfg = CASES[name]
    ran = kernel_runs(kind)
    kernel = simulate(cfg, compiled=True)
    python = simulate(cfg, compiled=False)
    _identical(kernel, python)
    preempts = python.summary["num_preemptions"] > 0
    # the kernel runs every case but the preempting ones, which go to the Python core
    assert ran == ["spent" if preempts else "done"]


def test_the_gate_case_holds_a_head_its_first_chunk_would_admit() -> None:
    # the case is worth its name only if the ungated run admits a chunk that must preempt
    cache, scheduler, workload = GATE_CASE
    ungated = _config(cache, {**scheduler, "scheduler_reserve_full_isl": False}, workload)
    assert (
        simulate(CASES["full-sequence gate holds a chunkable head"]).summary["num_preemptions"] == 0
    )
    assert simulate(ungated).summary["num_preemptions"] > 0


def test_the_long_span_cases_have_long_spans() -> None:
    memory = simulate(CASES["long spans"], compiled=False).memory
    assert memory["num_steps"].max() > 1000  # recorded by MemoryRecorder.record's array path


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    block_size=st.sampled_from([1, 4, 16, 64]),
    budget=st.integers(16, 2048),
    max_num_seqs=st.integers(1, 16),
    chunked=st.booleans(),
    caching=st.booleans(),
    full_isl=st.booleans(),
    kv_gib=st.sampled_from([0.1, 2.0]),
    rows=st.lists(
        st.tuples(st.integers(0, 80), st.integers(1, 300), st.integers(1, 200)),
        min_size=1,
        max_size=25,
    ),
)
def test_random_small_runs_give_the_python_cores_tables(
    block_size, budget, max_num_seqs, chunked, caching, full_isl, kv_gib, rows
) -> None:
    # quarter-second arrivals (ties included), budgets that end before some decoders' turn
    if not chunked:
        budget = 512  # without chunked prefill the budget must hold max_model_len
    cfg = _config(
        {"kv_cache_gib": kv_gib, "block_size_tokens": block_size, "enable_prefix_caching": caching},
        {
            "max_model_len": 512,  # 0.1 GiB hold 819 slots: heads wait, some runs preempt
            "max_num_batched_tokens": max(budget, max_num_seqs),
            "max_num_seqs": max_num_seqs,
            "enable_chunked_prefill": chunked,
            "scheduler_reserve_full_isl": full_isl,
        },
    )
    specs = [
        RequestSpec(i, quarter / 4 + 0.5, prompt, output, output)
        for i, (quarter, prompt, output) in enumerate(sorted(rows))
    ]
    from kvsim.aggregate_core import AggregateCore
    from kvsim.engine import allocator_from_config, cost_model_from_config, prepare_requests

    python = simulate(cfg, specs, compiled=False)
    runnable, _ = prepare_requests(cfg, specs)
    allocator = allocator_from_config(cfg)
    core = AggregateCore(cfg, runnable, allocator, cost_model_from_config(cfg, True))
    if compiled_module.run_compiled(core, python_kernel=True) != "done":
        return  # declined (an exact pass): nothing to compare
    columns = core.log.columns()
    for name in ("first_scheduled_time_s", "first_token_time_s", "finish_time_s"):
        assert np.array_equal(columns[name], python.requests[name].to_numpy()), name
    kernel_memory = core.recorder.arrays()
    for name, values in kernel_memory.items():
        assert np.array_equal(values, python.memory[name].to_numpy()), name


@pytest.mark.parametrize("n", [*range(0, 140), 255, 256, 257, 1000, 4095, 4096])
def test_pairwise_sum_is_numpys_sum(n) -> None:
    values = np.random.default_rng(n).lognormal(-4, 2, size=n + 5)
    for total in (pairwise_sum, getattr(pairwise_sum, "py_func", pairwise_sum)):
        for lo in (0, 5):
            assert total(values, lo, n) == values[lo : lo + n].sum()  # exactly


def test_auto_mode_compiles_only_large_runs_with_numba(monkeypatch) -> None:
    monkeypatch.setattr(compiled_module, "numba_available", lambda: True)
    assert not compiled_module.wanted(None, compiled_module.AUTO_MIN_REQUESTS - 1)
    assert compiled_module.wanted(None, compiled_module.AUTO_MIN_REQUESTS)
    assert not compiled_module.wanted(False, 10**6)
    monkeypatch.setattr(compiled_module, "numba_available", lambda: False)
    assert not compiled_module.wanted(None, 10**6)


def test_integer_arrival_times_stay_with_the_python_core(kernel_runs) -> None:
    ran = kernel_runs("python")
    specs = [RequestSpec(i, i, 100, 20, 20) for i in range(10)]  # ints: SimPy's int clock
    kernel = simulate(_config(), specs, compiled=True)
    _identical(kernel, simulate(_config(), specs, compiled=False))
    assert ran == ["declined"]


@pytest.mark.parametrize("num_tied", [1, 2])
def test_a_run_whose_rows_all_lie_at_time_zero_keeps_int_times(num_tied, kernel_runs) -> None:
    # SimPy's clock is the int 0 until time passes: one event at 0.0 keeps an int64 column
    ran = kernel_runs("python")
    specs = [RequestSpec(i, 0.0, 100, 50, 50) for i in range(num_tied)]
    python = simulate(_config(), specs, compiled=False)
    assert len(python.memory) == 1
    assert python.memory["time_s"].dtype == np.int64
    _identical(simulate(_config(), specs, compiled=True), python)
    assert ran == ["done"]


@pytest.mark.skipif(not HAS_NUMBA, reason="numba")
def test_without_a_disk_cache_auto_mode_keeps_the_python_core(monkeypatch, caplog) -> None:
    import kvsim.compiled_kernel

    monkeypatch.setattr(kvsim.compiled_kernel, "CACHED", False)
    auto = _auto_run_saying(monkeypatch, caplog, "cannot cache the compiled core")
    _identical(simulate(CASES["default"], compiled=True), auto)  # asked for: compiled all the same


def test_compiled_true_without_numba_is_an_error_on_any_run(monkeypatch) -> None:
    monkeypatch.setattr(compiled_module, "numba_available", lambda: False)
    for cfg in (CASES["default"], _config(None, {"engine": "vllm-v0"})):
        with pytest.raises(ValueError, match="needs numba"):
            simulate(cfg, compiled=True)


def test_a_numba_that_cannot_be_imported_leaves_auto_mode_to_the_python_core(
    monkeypatch, caplog
) -> None:
    def broken() -> None:
        raise ImportError("Numba needs NumPy 2.3 or less")

    monkeypatch.setattr(compiled_module, "numba_available", lambda: True)
    monkeypatch.setattr(compiled_module, "_compiled_module", broken)
    said = "numba cannot be imported (Numba needs NumPy 2.3 or less)"
    _auto_run_saying(monkeypatch, caplog, said)
    with pytest.raises(ValueError, match="numba cannot be imported"):
        simulate(CASES["default"], compiled=True)


def _auto_run_saying(monkeypatch, caplog, message: str):
    """An auto-mode run of the default case that must take the compiled core (its size made
    large enough) but says ``message`` and gives the Python core's tables."""
    monkeypatch.setattr("kvsim.say_once.SAID", set())  # (said once per process)
    monkeypatch.setattr(compiled_module, "AUTO_MIN_REQUESTS", 10)
    with caplog.at_level("WARNING"):
        auto = simulate(CASES["default"])
    assert message in caplog.text
    _identical(auto, simulate(CASES["default"], compiled=False))
    return auto
