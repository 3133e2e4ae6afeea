"""The plan's bisection against a naive scan, on metrics given as known functions of the knob."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.study import plan as planning
from kvsim.study.plan import Plan, Target, candidates, plan_from_dict, run_plan
from kvsim.study.plan_search import PROBES_PER_ROUND

METRIC = "time_to_first_token_seconds_p99"


def _fake_evaluator(monkeypatch: pytest.MonkeyPatch, metric_of: Any, calls: list[float]) -> None:
    """Replace simulation by ``metric_of(knob)`` so that only the search is under test."""

    def evaluate(self: Any, xs: Any) -> None:
        for x in xs:
            if x not in self.seen:
                calls.append(x)
                self._seen(x, {METRIC: metric_of(self.plan.value(x))})

    monkeypatch.setattr(planning._Evaluator, "evaluate", evaluate)


def _plan(direction: str, lo: float, hi: float, bound: float, **kw: Any) -> Plan:
    return Plan(
        name="t",
        base={},
        field="cache.kv_cache_gib",
        direction=direction,  # type: ignore[arg-type]
        lo=lo,
        hi=hi,
        targets=(Target(METRIC, bound),),
        **kw,
    )


def _naive(plan: Plan, metric_of: Any) -> float | None:
    """Scan every candidate: the smallest (largest) whose metric meets the bound."""
    values = [plan.value(x) for x in candidates(plan)]
    ok = [v for v in values if metric_of(v) <= plan.targets[0].bound]
    if not ok:
        return None
    return float(min(ok) if plan.direction == "smallest" else max(ok))


@settings(max_examples=60, deadline=None)
@given(
    bound=st.floats(0.01, 200),
    jobs=st.integers(1, 5),
    integer=st.booleans(),
    smallest=st.booleans(),
)
def test_bisection_finds_what_a_scan_finds(
    bound: float, jobs: int, integer: bool, smallest: bool, tmp_path_factory: Any
) -> None:
    # smallest: latency falls as KV grows (100 / x); largest: latency grows with the rate (x / 5)
    def metric_of(x: float) -> float:
        return 100.0 / x if smallest else x / 5.0

    plan = _plan("smallest" if smallest else "largest", 1, 500, bound, integer=integer)
    calls: list[float] = []
    with pytest.MonkeyPatch.context() as mp:
        _fake_evaluator(mp, metric_of, calls)
        result = run_plan(plan, tmp_path_factory.mktemp("plan"), jobs=jobs)
    assert result.answer == _naive(plan, metric_of)
    assert result.monotone
    # two ends, then two probes a round, each round keeping at most a third of the interval
    # (plus one): about 2 log3(candidates) evaluations, never a scan
    assert len(calls) <= 2 + PROBES_PER_ROUND * math.ceil(math.log(len(candidates(plan)), 3) + 1)


def test_answer_names_its_binding_target_and_margin(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # two targets: TTFT = 100/x <= 10 binds at x >= 10, TPOT = 1/x <= 0.5 at x >= 2
    def evaluate(self: Any, xs: Any) -> None:
        for x in xs:
            v = self.plan.value(x)
            self._seen(x, {METRIC: 100 / v, "request_time_per_output_token_seconds_p99": 1 / v})

    monkeypatch.setattr(planning._Evaluator, "evaluate", evaluate)
    plan = Plan(
        name="t",
        base={},
        field="scheduler.max_num_seqs",
        direction="smallest",
        lo=1,
        hi=64,
        integer=True,
        targets=(
            Target(METRIC, 10.0),
            Target("request_time_per_output_token_seconds_p99", 0.5),
        ),
    )
    result = run_plan(plan, tmp_path)
    assert result.answer == 10
    assert result.binding == METRIC
    assert result.headroom == pytest.approx(0.0)  # 100/10 is exactly the bound
    assert result.beyond is not None
    assert result.beyond.startswith("9: ")


def test_non_monotone_points_are_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # meets above 10 except at 43; candidates 1..64 (indices 0..63): the first round probes
    # indices 63 * 1 // 3 = 21 and 63 * 2 // 3 = 42, values 22 (meets) and 43 (fails)
    _fake_evaluator(monkeypatch, lambda x: 0.0 if x > 10 and x != 43 else 1.0, [])
    result = run_plan(_plan("smallest", 1, 64, 0.5, integer=True), tmp_path, jobs=3)
    assert not result.monotone
    assert result.points.loc[result.points["cache.kv_cache_gib"] == 43, "meets"].item() is False
    # the same function seen only where it is monotone is not flagged
    _fake_evaluator(monkeypatch, lambda x: 0.0 if x > 10 else 1.0, [])
    assert run_plan(_plan("smallest", 1, 64, 0.5, integer=True), tmp_path / "b", jobs=3).monotone


@pytest.mark.parametrize("jobs", [2, 3, 5])
def test_the_points_visited_and_the_answer_do_not_depend_on_jobs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, jobs: int
) -> None:
    # a metric that meets non-monotonically (above 10, and in 3..5): which side of 5 a search
    # lands on depends on the points it visits; -j must not choose them
    def metric_of(x: float) -> float:
        return 0.0 if x > 10 or 3 <= x <= 5 else 1.0

    runs = {}
    for n in (1, jobs):
        calls: list[float] = []
        _fake_evaluator(monkeypatch, metric_of, calls)
        result = run_plan(_plan("smallest", 1, 64, 0.5, integer=True), tmp_path / str(n), jobs=n)
        runs[n] = (sorted(calls), result.answer)
    assert runs[jobs] == runs[1]


def _tp_plan() -> Plan:
    """The smallest TP size of 1/2/4/8/16 whose metric is at most 10."""
    return Plan(
        name="t",
        base={},
        field="parallel.tensor_parallel_size",
        direction="smallest",
        lo=1,
        hi=16,
        choices=(1, 2, 4, 8, 16),
        targets=(Target(METRIC, 10.0),),
    )


def test_choices_are_the_only_answers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls: list[float] = []
    _fake_evaluator(monkeypatch, lambda tp: 70 / tp, calls)  # fits below 10 from TP 8 on
    plan = _tp_plan()
    assert run_plan(plan, tmp_path).answer == 8
    assert set(calls) <= {1, 2, 4, 8, 16}


def test_tp_sizes_the_model_cannot_use_are_skipped_not_failed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # the default model, OPT-13B, has 40 = 2^3 x 5 attention heads: of 1/2/4/8/16 only 16 does
    # not divide them. Latency 70 / TP meets 10 from TP 8 on (70 / 4 = 17.5, 70 / 8 = 8.75).
    # Counted as a failure, an invalid 16 at the bracket's top made the answer "none".
    calls: list[float] = []
    _fake_evaluator(monkeypatch, lambda tp: 70 / tp, calls)
    plan = _tp_plan()
    result = run_plan(plan, tmp_path)
    assert result.answer == 8
    assert 16 not in calls  # never simulated
    assert list(result.skipped) == [16]
    assert "40 attention heads, not divisible by tensor_parallel_size = 16" in result.skipped[16]
    assert result.monotone
    assert result.beyond is not None
    assert result.beyond.startswith("4: ")
    # from --lo 3 the valid sizes are 4 and 8; every size meets 100: the answer is 4
    _fake_evaluator(monkeypatch, lambda tp: 70 / tp, [])
    plan = dataclasses.replace(plan, lo=3, targets=(Target(METRIC, 100.0),))
    assert run_plan(plan, tmp_path / "lo3").answer == 4


def test_no_valid_choice_is_an_error_naming_each(tmp_path: Path) -> None:
    # 40 heads: neither 16 nor 32 divides them (40 = 2 x 16 + 8 = 1 x 32 + 8)
    plan = Plan(
        name="t",
        base={},
        field="parallel.tensor_parallel_size",
        direction="smallest",
        lo=16,
        hi=32,
        choices=(16, 32),
        targets=(Target(METRIC, 10.0),),
    )
    with pytest.raises(ValueError, match=r"no valid value .*16: .*; 32: .*not divisible"):
        run_plan(plan, tmp_path)


def test_an_invalid_best_end_is_an_error_not_no_answer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # every value would meet the bound but the best end, which is no valid config
    invalid = [64.0]

    def evaluate(self: Any, xs: Any) -> None:
        for x in xs:
            self._seen(x, {"error": "bad"} if x in invalid else {METRIC: 0.0})

    monkeypatch.setattr(planning._Evaluator, "evaluate", evaluate)
    with pytest.raises(ValueError, match=r"= 64 \(the bracket's best end, --hi\) .*: bad"):
        run_plan(_plan("smallest", 1, 64, 2.0, integer=True), tmp_path)
    invalid[:] = [1.0]
    with pytest.raises(ValueError, match=r"= 1 \(the bracket's best end, --lo\) .*: bad"):
        run_plan(_plan("largest", 1, 64, 2.0, integer=True), tmp_path / "b")
    # an invalid worst end is a failing value, as before: the answer is the next one
    assert run_plan(_plan("smallest", 1, 64, 2.0, integer=True), tmp_path / "c").answer == 2


def test_no_answer_when_even_the_best_end_fails(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_evaluator(monkeypatch, lambda x: 1000.0, [])
    result = run_plan(_plan("smallest", 1, 64, 2.0), tmp_path)
    assert result.answer is None
    assert result.binding is None


@pytest.mark.parametrize(
    ("text", "metric", "bound"),
    [
        ("time_to_first_token_seconds_p99<=2", METRIC, 2.0),
        (" e2e_request_latency_seconds_p90 <= 30.5 ", "e2e_request_latency_seconds_p90", 30.5),
        ("preemptions_per_request<=0", "preemptions_per_request", 0.0),
    ],
)
def test_target_parse(text: str, metric: str, bound: float) -> None:
    assert Target.parse(text) == Target(metric, bound)


@pytest.mark.parametrize("text", ["ttft", "x<=", "<=2", "a<=nan", "a<=inf", "a>=2"])
def test_target_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="METRIC<=NUMBER"):
        Target.parse(text)


@pytest.mark.parametrize(
    ("text", "operator"),
    [
        ("preemptions_per_request<0.01", "'<'"),  # was read as <= 0.01
        ("time_to_first_token_seconds_p99 > 2", "'>'"),
        ("time_to_first_token_seconds_p99>=2", "'>='"),
        ("num_preemptions=0", "'='"),
    ],
)
def test_target_parse_refuses_other_operators(text: str, operator: str) -> None:
    with pytest.raises(ValueError, match=f"only <= is accepted .*got {operator}"):
        Target.parse(text)


def test_a_strict_bound_is_refused_with_the_target_to_write() -> None:
    with pytest.raises(ValueError, match=r"write preemptions_per_request<=0\.01"):
        Target.parse("preemptions_per_request<0.01")


@pytest.mark.parametrize(
    "metric", ["time_to_first_token_seconds_p99", "num_preemptions", "kv_cache_usage_perc"]
)
def test_a_negative_bound_no_run_can_meet_is_refused(metric: str) -> None:
    with pytest.raises(ValueError, match=f"--target: {metric} <= -1: no run can meet it"):
        Target.parse(f"{metric}<=-1")
    with pytest.raises(ValueError, match="never negative"):
        Target(metric, -0.001)
    with pytest.raises(ValueError, match=r"p\.toml: .*never negative"):  # a plan file's table
        plan_from_dict(
            "p", {}, {"field": "cache.kv_cache_gib", "targets": {metric: -1}}, {}, "p.toml"
        )
    assert Target(metric, 0.0).bound == 0.0  # no preemptions at all: a bound a run can meet


def test_a_non_finite_bound_in_a_plan_file_is_refused() -> None:
    for bound in (math.nan, math.inf):
        with pytest.raises(ValueError, match="expected a finite bound"):
            plan_from_dict("p", {}, {"field": "cache.kv_cache_gib", "targets": {METRIC: bound}})


def test_geometric_grid_spans_the_bracket_at_the_resolution() -> None:
    grid = candidates(_plan("smallest", 0.5, 64.0, 1.0, resolution=0.05))
    assert grid[0] == pytest.approx(0.5)
    assert grid[-1] == pytest.approx(64.0)
    ratios = [b / a for a, b in itertools.pairwise(grid)]
    assert max(ratios) <= 1.05 + 1e-12
    # ceil(ln(128) / ln(1.05)) = ceil(99.45) = 100 steps
    assert len(grid) == 101


@pytest.mark.parametrize(
    ("field", "flipped"),
    [
        ("workload.rate_per_s", "smallest"),  # more load only makes latency worse
        ("cache.kv_cache_gib", "largest"),  # more KV only makes it better
        ("parallel.tensor_parallel_size", "largest"),
    ],
)
def test_a_known_knob_asked_the_wrong_way_round_is_refused(field: str, flipped: str) -> None:
    question = {"field": field, "direction": flipped, "targets": {METRIC: 2.0}}
    with pytest.raises(ValueError, match=r"only the (smallest|largest) value"):
        planning.plan_from_dict("p", {}, question)


def test_an_unknown_knob_names_the_knobs_with_ranges() -> None:
    field = "scheduler.max_num_batched_tokens"  # a field, without a default bracket
    question = {"field": field, "direction": "smallest", "targets": {METRIC: 2.0}}
    with pytest.raises(ValueError, match=f"'{field}' is not a knob with a default range"):
        planning.plan_from_dict("p", {}, question)
    # any field with an explicit range is accepted
    plan = planning.plan_from_dict("p", {}, {**question, "lo": 1.0, "hi": 4.0})
    assert (plan.lo, plan.hi) == (1.0, 4.0)
    # no field at all is said so, with or without a range
    for bracket in ({}, {"lo": 1.0, "hi": 4.0}):
        with pytest.raises(ValueError, match="'foo' is not a config field"):
            planning.plan_from_dict("p", {}, {**question, "field": "foo", **bracket})


def test_the_kv_budget_bracket_starts_where_one_longest_request_fits():
    from kvsim.study.plan import knob_bracket

    # Llama-3.1-8B: 128 KiB of KV per token. One 4,096-token request takes 256 blocks of 16
    # and vLLM v1 keeps block 0 as its null block: 257 x 16 x 128 KiB = 0.50195 GiB -> 0.51
    base = {"model": "llama-3.1-8b", "gpu": "h100-80gb", "scheduler": {"max_model_len": 4096}}
    assert knob_bracket("cache.kv_cache_gib", base)["lo"] == 0.51
    v0 = {**base, "scheduler": {"max_model_len": 4096, "engine": "vllm-v0"}}
    assert knob_bracket("cache.kv_cache_gib", v0)["lo"] == 0.5  # no null block: 256 blocks


def test_a_metric_targeted_twice_keeps_the_tighter_bound_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # the later --target used to replace the earlier one, looser or not
    texts = [f"{METRIC}<=1", "num_preemptions<=0", f"{METRIC}<=2", f"{METRIC}<=1"]
    with caplog.at_level(logging.WARNING, logger="kvsim"):
        kept = planning.tightest([Target.parse(t) for t in texts])
    assert kept == (Target(METRIC, 1.0), Target("num_preemptions", 0.0))
    assert [r.getMessage() for r in caplog.records] == [
        f"{METRIC} is targeted twice (<= 1 and <= 2): the plan holds the tighter bound, <= 1"
    ]  # the repeat of <= 1 asks nothing new: no second warning
    question = {"field": "cache.kv_cache_gib", "targets": [f"{METRIC}<=2", f"{METRIC}<=0.5"]}
    assert plan_from_dict("p", {}, question).targets == (Target(METRIC, 0.5),)


def test_a_plan_of_one_choice_checks_it_and_is_not_called_moot() -> None:
    # lo == hi with that one choice asks whether it meets the targets; check_field compared
    # the config at lo with the one at hi, the same point, and refused the knob as having no
    # effect ("the config at 2 and at 2 is the same")
    question = {
        "field": "parallel.tensor_parallel_size",
        "direction": "smallest",
        "targets": {METRIC: 2.0},
        "lo": 2.0,
        "hi": 2.0,
        "choices": [2.0],
    }
    plan = planning.plan_from_dict("p", {"model": "llama-3.1-8b", "gpu": "h100-80gb"}, question)
    plan.check_field()  # (raised "has no effect")
    assert (plan.lo, plan.hi, plan.choices) == (2.0, 2.0, (2.0,))


def test_an_invalid_top_of_the_bracket_is_no_second_failing_end(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # max_num_seqs past max_num_batched_tokens is no valid config: here past 40. The metric
    # 100 / x meets a bound of 10 from x = 10 up, so the largest value meeting it is 40; read as
    # failing the target, the invalid top made it "fail at both ends": no answer
    def evaluate(self: Any, xs: Any) -> None:
        for x in xs:
            value = self.plan.value(x)
            self._seen(x, {"error": "too many"} if value > 40 else {METRIC: 100 / value})

    monkeypatch.setattr(planning._Evaluator, "evaluate", evaluate)
    result = run_plan(_plan("largest", 1, 64, 10.0, integer=True), tmp_path)
    assert result.answer == 40
    assert result.ends_valid_range
    # the same with the target failing at both valid ends: no answer, and the ends named are
    # the valid ones (1 and 40), not the invalid top
    result = run_plan(_plan("largest", 1, 64, 1.0, integer=True), tmp_path / "b")
    assert result.answer is None
    assert result.why_none is not None
    assert "fails at both ends (1: " in result.why_none
    assert "40: " in result.why_none
    assert "64" not in result.why_none.split(";")[0]


def test_a_target_no_run_measures_is_refused_not_failed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # goodput without [slo] targets is NaN in every summary: read as failing, the plan answered
    # "none" and advised widening the bracket
    _fake_evaluator(monkeypatch, lambda x: math.nan, [])
    with pytest.raises(planning.UnmeasuredTargetError, match=f"--target {METRIC}: the plan's"):
        run_plan(_plan("smallest", 1, 64, 2.0), tmp_path)


def test_other_draws_past_the_last_seed_wrap_to_0(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # seed 2**64 - 1: its next draws were seeds 2**64 and 2**64 + 1, invalid configs reported
    # as the answer failing on other draws
    seeds: list[int] = []

    def evaluate(self: Any, xs: Any) -> None:
        seeds.append(self.plan.base.get("seed", 0))
        for x in xs:
            self._seen(x, {METRIC: 1.0})

    monkeypatch.setattr(planning._Evaluator, "evaluate", evaluate)
    plan = dataclasses.replace(_plan("smallest", 2, 64, 2.0), base={"seed": 2**64 - 1})
    result = planning.other_draws(run_plan(plan, tmp_path), 2)
    assert [d.seed for d in result.other_draws] == [0, 1]
    assert all(d.meets for d in result.other_draws)
