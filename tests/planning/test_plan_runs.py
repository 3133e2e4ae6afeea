"""``run_plan`` and ``kvsim plan`` on real simulations whose answers are worked out by hand."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvsim.base import say_once
from kvsim.cli import app
from kvsim.presets import plans_dir
from kvsim.study.plan import Plan, Target, load_plan, plan_from_dict, run_plan
from kvsim.study.plan_figure import save_plan
from tests.conftest import forget_warnings, moot_warnings

# Ten requests arrive together (Poisson at 10^6 req/s: within microseconds), each a 100-token
# prompt and 28 output tokens, on Llama-3.1-8B (2 x 32 layers x 8 KV heads x 128 dims x 2 bytes
# = 131,072 bytes per token), 16-token blocks, vLLM v1. A request writes KV for 100 + 28 - 1 =
# 127 tokens (the last token is never fed back): ceil(127 / 16) = 8 blocks, all ten at once in
# the final steps: 80 blocks, plus vLLM's null block = 81 blocks = 1,296 token slots =
# 169,869,312 bytes. One slot fewer and the pool has 80 blocks: someone is preempted.
BURST = {
    "model": "llama-3.1-8b",
    "gpu": "h100-80gb",
    "scheduler": {"max_model_len": 128},
    "workload": {
        "lengths": "fixed",
        "fixed_prompt_tokens": 100,
        "fixed_output_tokens": 28,
        "rate_per_s": 1e6,
        "num_requests": 10,
    },
}
BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2
SMALLEST_WITHOUT_PREEMPTION = 81 * 16 * BYTES_PER_TOKEN
# the smallest KV budget (between 16 and 200 blocks of 16 tokens) at which nothing is preempted
BURST_PLAN = Plan(
    name="burst",
    base=BURST,
    field="cache.kv_cache_bytes",
    direction="smallest",
    lo=16 * 16 * BYTES_PER_TOKEN,
    hi=200 * 16 * BYTES_PER_TOKEN,
    integer=True,
    targets=(Target("num_preemptions", 0.0),),
)


def test_smallest_budget_without_preemption_is_81_blocks(tmp_path: Path) -> None:
    plan = BURST_PLAN
    result = run_plan(plan, tmp_path)
    assert result.answer == SMALLEST_WITHOUT_PREEMPTION
    assert result.beyond is not None
    assert result.beyond.startswith(f"{SMALLEST_WITHOUT_PREEMPTION - 1:,}: num_preemptions")
    # every point is a stored sweep point: a second run simulates nothing
    again = run_plan(plan, tmp_path)
    assert again.answer == result.answer
    stored = {p.name for p in (tmp_path / "plan" / "burst" / "points").iterdir()}
    assert len(stored) == len(result.points)


def test_a_plan_runs_again_the_points_another_kvsim_finished(tmp_path: Path, caplog) -> None:
    """A stored point whose recorded kvsim differs (``kvsim_build`` in ``point.json``) is run
    again, with a warning, and replaced; the others are reused untouched."""
    plan = BURST_PLAN
    first = run_plan(plan, tmp_path)
    points = sorted((tmp_path / "plan" / "burst" / "points").iterdir())
    stale = points[0] / "point.json"
    stale.write_text(json.dumps({**json.loads(stale.read_text()), "kvsim_build": "0" * 16}))
    untouched = {p.name: (p / "summary.json").stat().st_mtime_ns for p in points[1:]}
    with caplog.at_level(logging.WARNING, logger="kvsim"):
        again = run_plan(plan, tmp_path)
    assert again.answer == first.answer
    assert "plan burst: 1 point(s)" in caplog.text
    assert json.loads(stale.read_text())["kvsim_build"] != "0" * 16
    assert {p.name: (p / "summary.json").stat().st_mtime_ns for p in points[1:]} == untouched


def test_cli_plan_answers_and_draws(tmp_path: Path) -> None:
    # 28 output tokens -> 27 decode steps; TPOT target far above any step: only the KV binds
    runner = CliRunner()
    args = ["plan", "--smallest", "cache.kv_cache_bytes", "--target", "num_preemptions<=0"]
    for key, value in (
        ("model", "llama-3.1-8b"),
        ("gpu", "h100-80gb"),
        ("scheduler.max_model_len", 128),
        ("workload.lengths", "fixed"),
        ("workload.fixed_prompt_tokens", 100),
        ("workload.fixed_output_tokens", 28),
        ("workload.rate_per_s", 1e6),
        ("workload.num_requests", 10),
    ):
        args += ["--set", f"{key}={value}"]
    args += ["--lo", str(16 * 16 * BYTES_PER_TOKEN), "--hi", str(200 * 16 * BYTES_PER_TOKEN)]
    args += ["--out", str(tmp_path), "--name", "burst"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"{SMALLEST_WITHOUT_PREEMPTION:,}" in result.output
    # the setup under the question (a new user found the plan named no model, GPU or workload)
    assert result.output.splitlines()[1] == (
        "  llama-3.1-8b on h100-80gb, paged; workload: fixed lengths: 100-token prompts, 28 "
        "output tokens, Poisson arrivals at 1e+06 req/s"
    )
    # the answer row names the knob and its unit once (it read "N  (kv_cache_bytes (bytes))")
    answer_row = next(line for line in result.output.splitlines() if "│ answer" in line)
    assert f"kv_cache_bytes (bytes): {SMALLEST_WITHOUT_PREEMPTION:,}" in answer_row
    # and as vLLM's own knob: (169,869,312 B of KV + 8.03 B x 2 B of weights + 2 GiB of
    # headroom) / 81,089 MiB = 18,377,352,960 / 85,027,979,264 = 0.21613, up to 0.217
    flat = " ".join(result.output.replace("│", " ").split())
    assert "as gpu_memory_utilization 0.217 of 79.2 GiB (KV + 15.0 GiB of weights" in flat
    # on other draws too: fixed lengths, and all ten arrive (within microseconds) before the
    # first step ends, whatever the seed: the same batch, no preemption
    assert "at seed 1 meets (0)" in flat
    assert "at seed 2 meets (0)" in flat
    folder = tmp_path / "plan" / "burst"
    answer = json.loads((folder / "answer.json").read_text())
    assert answer["answer"] == SMALLEST_WITHOUT_PREEMPTION
    assert answer["binding_target"] == "num_preemptions"
    assert answer["gpu_memory_utilization"] == 0.217  # (worked above)
    assert isinstance(answer["answer"], int)  # (a byte knob's: not 554729472.0)
    assert (folder / "plan.png").stat().st_size > 10_000


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (  # a short name without its statistic: the full name with one
            ["--smallest", "kv", "--target", "ttft<=2"],
            "unknown metric 'ttft'; did you mean 'time_to_first_token_seconds_p99'",
        ),
        (  # the closest name first
            ["--smallest", "kv", "--target", "time_to_first_token_second_p99<=2"],
            "did you mean 'time_to_first_token_seconds_p99' or",
        ),
        (  # vLLM's benchmark short names point at kvsim's full ones
            ["--smallest", "kv", "--target", "ttft_p99<=2"],
            "did you mean 'time_to_first_token_seconds_p99'?",
        ),
        (
            ["--smallest", "kv", "--target", "tpot_p50<=0.05"],
            "did you mean 'request_time_per_output_token_seconds_p50'?",
        ),
        (  # a misspelling gets the closest names
            ["--smallest", "kv", "--target", "time_to_frist_token_seconds_p99<=2"],
            "did you mean 'time_to_first_token_seconds_p99'",
        ),
        (["--smallest", "kv", "--target", "time_to_first_token_seconds_p99"], "METRIC<=NUMBER"),
        (["--smallest", "kv"], "at least one --target"),
        (["--smallest", "kv", "--largest", "rate", "--target", "num_preemptions<=0"], "not both"),
        (["no-such-plan"], "neither a file nor a shipped plan"),
        (
            ["--smallest", "kv", "--target", "time_to_first_token_seconds_p99<2"],
            "only <= is accepted (METRIC<=NUMBER), got '<'",
        ),
        (
            ["--smallest", "kv", "--target", "time_to_first_token_seconds_p99<=-1"],
            "no run can meet it",
        ),
        (["--set", "workload.num_requests=5", "cache.kv_cache_gib=4"], "its own --set"),
        (
            ["--smallest", "kv", "--target", "num_preemptions<=0", "--lo", "8", "--hi", "2"],
            "need 0 < lo < hi",
        ),
    ],
)
def test_cli_plan_bad_input_exits_2(args: list[str], message: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["plan", *args, "--out", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_shipped_plans_load_with_their_questions() -> None:
    names = sorted(p.stem for p in plans_dir().glob("*.toml"))
    assert names == [
        "bursty-kv",
        "contiguous-slabs-kv",
        "long-outputs-max-num-seqs",
        "parallel-sampling-kv",
        "replica-24gib-rate",
    ]
    for name in names:
        plan = load_plan(plans_dir() / f"{name}.toml")
        assert plan.targets, name
        assert plan.quick, name
    bursty_kv = load_plan(plans_dir() / "bursty-kv.toml")
    assert bursty_kv.field == "cache.kv_cache_gib"
    assert bursty_kv.base["cache"]["allocator"] == "paged"
    assert {t.metric: t.bound for t in bursty_kv.targets} == {
        "time_to_first_token_seconds_p95": 2.0,
        "request_time_per_output_token_seconds_p95": 0.1,
    }


def test_a_kv_plans_low_end_starts_at_the_kv_one_request_needs(caplog) -> None:
    # bursty-kv asked from lo = 0.5 GiB, but Llama-3.1-8B's 8,192-token request needs (512
    # blocks + the null block) x 16 x 131,072 B = 1,075,838,976 B = 1.002 GiB: every budget
    # below is an invalid config, and 4 of the 17 points of its quick run were spent on them.
    # A lo below the need starts the search at 1.01 GiB (the need rounded up to a hundredth of
    # a GiB), with a warning; a lo at or above the need stays, 1.0025 (between the need and its
    # rounding) included; the shipped plan now asks from 1.01 itself
    import logging

    shipped = load_plan(plans_dir() / "bursty-kv.toml")
    assert (shipped.lo, shipped.hi) == (1.01, 48.0)
    with caplog.at_level(logging.WARNING, logger="kvsim.study.plan"):
        forget_warnings(caplog)
        low = load_plan(plans_dir() / "bursty-kv.toml", lo=0.5)
    assert low.lo == 1.01
    assert "plan: lo = 0.5 is below the KV one max_model_len request needs (1.002)" in caplog.text
    for lo in (1.0025, 2.0):
        assert load_plan(plans_dir() / "bursty-kv.toml", lo=lo).lo == lo


def test_quick_bursty_kv_draws_its_answer(tmp_path: Path) -> None:
    plan = load_plan(plans_dir() / "bursty-kv.toml")
    result = run_plan(plan, tmp_path, jobs=1, quick=True)
    written = save_plan(result)
    assert [p.name for p in written] == ["points.csv", "answer.json", "plan.png"]
    assert result.answer is not None
    assert plan.lo < result.answer < plan.hi


def _plan_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["plan", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, result.output


def test_a_shipped_plan_keeps_its_own_question(tmp_path: Path) -> None:
    # long-outputs-max-num-seqs asks for the largest max_num_seqs under a preemption target;
    # asking for the smallest KV with a TTFT target used to drop that question silently and write
    # the KV answer over its answer.json
    out = ["--quick", "--out", str(tmp_path), "--no-progress"]
    code, output = _plan_cli("long-outputs-max-num-seqs", *out)
    assert code == 0, output
    folder = tmp_path / "plan" / "quick" / "long-outputs-max-num-seqs"
    shipped = (folder / "answer.json").read_bytes()
    assert json.loads(shipped)["field"] == "scheduler.max_num_seqs"
    other = ["--smallest", "kv", "--target", "time_to_first_token_seconds_p99<=2"]
    for extra in (
        [],
        ["--name", "long-outputs-max-num-seqs"],
    ):  # its own folder by name: refused too
        code, output = _plan_cli("long-outputs-max-num-seqs", *other, *extra, *out)
        assert code == 2, output
        errors = [line for line in output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, output
        flat = " ".join(output.split())
        assert "long-outputs-max-num-seqs asks for the largest scheduler.max_num_seqs" in flat
        assert "--smallest/--target ask for the smallest cache.kv_cache_gib" in flat
        assert "--name NAME" in flat
        assert "Traceback" not in output
    code, output = _plan_cli(
        "long-outputs-max-num-seqs", "--target", "preemptions_per_request<=0.5", *out
    )
    assert code == 2, output  # other targets are another question too
    assert (folder / "answer.json").read_bytes() == shipped
    # the same question restated is the plan as shipped (its points are reused)
    same = ["--largest", "max_num_seqs", "--target", "preemptions_per_request<=0.05"]
    code, output = _plan_cli("long-outputs-max-num-seqs", *same, *out)
    assert code == 0, output
    assert json.loads((folder / "answer.json").read_bytes()) == json.loads(shipped)
    # under another name the question is asked of the plan's config, and said so
    code, output = _plan_cli("long-outputs-max-num-seqs", *other, "--name", "long-outputs-kv", *out)
    assert code == 0, output
    assert "long-outputs-max-num-seqs's config with your question, not its own" in " ".join(
        output.split()
    )
    kv = json.loads((tmp_path / "plan" / "quick" / "long-outputs-kv" / "answer.json").read_text())
    assert kv["field"] == "cache.kv_cache_gib"
    assert (folder / "answer.json").read_bytes() == shipped
    # its question on another config (--set) would replace its answer too: refused without --name
    for extra in ([], ["--name", "long-outputs-max-num-seqs"]):
        code, output = _plan_cli(
            "long-outputs-max-num-seqs", "--set", "cache.kv_cache_gib=3", *extra, *out
        )
        assert code == 2, output
        assert "--set cache.kv_cache_gib changes long-outputs-max-num-seqs's config" in " ".join(
            output.split()
        )
    assert (folder / "answer.json").read_bytes() == shipped
    # a --set of the plan's own value changes no config: the plan as shipped (it was refused)
    for value in ("2.0", "2"):
        code, output = _plan_cli(
            "long-outputs-max-num-seqs", "--set", f"cache.kv_cache_gib={value}", *out
        )
        assert code == 0, output
        assert json.loads((folder / "answer.json").read_bytes()) == json.loads(shipped)


def test_a_plan_never_writes_over_another_shipped_plans_answer(tmp_path: Path) -> None:
    # contiguous-slabs-kv's question on paging, named bursty-kv, replaced bursty-kv's answer.json
    out = ["--quick", "--out", str(tmp_path), "--no-progress"]
    copy = tmp_path / "bursty-kv.toml"  # a file of the user's, named as the shipped plan
    copy.write_bytes((plans_dir() / "bursty-kv.toml").read_bytes())
    config = tmp_path / "burst.toml"
    config.write_text('model = "llama-3.1-8b"\n[scheduler]\nmax_model_len = 128\n')
    question = ["--largest", "max_num_seqs", "--target", "num_preemptions<=0", "--hi", "4"]
    for args in (
        ["contiguous-slabs-kv", "--set", "cache.allocator=paged", "--name", "bursty-kv"],
        ["contiguous-slabs-kv", "--name", "bursty-kv"],
        [str(config), *question, "--name", "bursty-kv"],
        [str(copy)],
    ):
        code, output = _plan_cli(*args, *out)
        assert code == 2, output
        errors = [line for line in output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1, output
        assert "bursty-kv is a shipped plan's name" in " ".join(output.split())
        assert not (tmp_path / "plan").exists()
    # the shipped plan under its own name is its own answer
    code, output = _plan_cli("bursty-kv", "--name", "bursty-kv", *out)
    assert code == 0, output
    assert (tmp_path / "plan" / "quick" / "bursty-kv" / "answer.json").is_file()


def test_cli_plan_takes_progress_like_run_and_reproduce(tmp_path: Path) -> None:
    args = ["--largest", "max_num_seqs", "--target", "num_preemptions<=0", "--hi", "4"]
    for key, value in BURST["workload"].items():
        args += ["--set", f"workload.{key}={value}"]
    args += ["--set", "model=llama-3.1-8b", "--set", "scheduler.max_model_len=128"]
    code, output = _plan_cli(*args, "--out", str(tmp_path), "--no-progress")
    assert code == 0, output
    assert "points evaluated" in output


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_warning_every_point_gives_is_said_once_per_plan(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, jobs: int
) -> None:
    # a 3,010-token request of the trace cannot run on OPT-13B (max_model_len 2,048) whatever
    # max_num_seqs is: every point warns alike. The bisection takes several rounds (one point
    # each with -j 1); the warning used to be said once per round
    rows = ["input_len,output_len", "3000,10"]
    rows += [f"{200 + 40 * i},{300 + 20 * i}" for i in range(20)]
    trace = tmp_path / "t.csv"
    trace.write_text("\n".join(rows) + "\n")
    base = {
        "cache": {"kv_cache_gib": 2.5},
        "workload": {"trace": str(trace), "sample": "replay", "rate_per_s": 20.0},
    }
    question = {"field": "scheduler.max_num_seqs", "hi": 32, "targets": {"num_preemptions": 0}}
    plan = plan_from_dict("warned", base, question)
    with caplog.at_level(logging.WARNING, logger="kvsim"):
        result = run_plan(plan, tmp_path / "out", jobs=jobs)
    assert len(result.points) >= 4  # several rounds
    said = [r.getMessage() for r in caplog.records if "cannot run" in r.getMessage()]
    assert said == [
        "1 of 21 requests cannot run and is skipped: 1 longer than max_model_len = 2,048 "
        "(first: request 0, prompt 3,000 + output 10 tokens) (raise scheduler.max_model_len "
        "or filter the workload)"
    ]


def test_a_warning_naming_a_points_value_is_said_once_per_plan(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # each rate of a 10 s workload draws another number of requests from the 40-row trace, and
    # each KV budget of bursty-kv is another value: warnings that named them were said once per
    # point (7 copies of the resampling warning)
    monkeypatch.setattr(say_once, "SAID", set())
    rows = ["input_len,output_len", *(f"{100 + 10 * i},{50 + 5 * i}" for i in range(40))]
    trace = tmp_path / "t.csv"
    trace.write_text("\n".join(rows) + "\n")
    base = {"workload": {"trace": str(trace), "arrival": "poisson", "duration_s": 10.0}}
    question = {
        "field": "workload.rate_per_s",
        "lo": 0.5,
        "hi": 64.0,
        "targets": {"time_to_first_token_seconds_p95": 2.0},
    }
    bursty_kv = load_plan(plans_dir() / "bursty-kv.toml", {"cache.gpu_memory_utilization": 0.8})
    for plan, fragment in (
        (plan_from_dict("rates", base, question), "resampled with replacement"),
        (dataclasses.replace(bursty_kv, name="m4-util"), "cache.kv_cache_gib sets the KV budget"),
    ):
        forget_warnings(caplog)
        with caplog.at_level(logging.WARNING, logger="kvsim"):
            result = run_plan(plan, tmp_path / "out", quick=True)
        assert len(result.points) >= 4  # several rounds, each at another value
        said = [r.getMessage() for r in caplog.records if fragment in r.getMessage()]
        assert len(said) == 1, said


def test_a_plans_set_is_a_later_layer_than_its_config(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # contiguous-slabs-kv's point reserves prompt + max_tokens for its slabs; --set moves the plan
    # to paging, so the reservation goes unread because of the user's choice: no warning, as
    # kvsim run CONFIG --set gives none (it warned of a setting the user never wrote)
    monkeypatch.setattr(say_once, "SAID", set())
    out = ["--quick", "--out", str(tmp_path), "--no-progress"]
    paged = ["contiguous-slabs-kv", "--set", "cache.allocator=paged"]
    with caplog.at_level(logging.WARNING, logger="kvsim"):
        code, output = _plan_cli(*paged, "--name", "m1-paged", *out)
        assert code == 0, output
        assert moot_warnings(caplog) == []
        # a reservation set beside it on the command line is the user's own: warned, once
        pow2 = ["--set", "cache.reservation=pow2", "--name", "m1-pow2"]
        code, output = _plan_cli(*paged, *pow2, *out)
        assert code == 0, output
    said = moot_warnings(caplog)
    assert len(said) == 1, said
    assert said[0].startswith("cache.reservation = 'pow2' has no effect: allocator 'paged'")


def test_a_set_table_applies_before_its_fields_in_any_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # --set workload.num_requests=5 before --set workload=sharegpt_like was dropped: the preset
    # replaced the table it had set a field in
    import typer

    from kvsim.config import config_from_dict
    from kvsim.study import plan as planning

    asked: list[Plan] = []

    def stop(plan: Plan, *args: object, **kwargs: object) -> None:
        asked.append(plan)
        raise typer.Exit(0)  # the plan's configs are under test, not its answer

    monkeypatch.setattr(planning, "run_plan", stop)
    fields = ["--set", "workload.num_requests=5", "--set", "workload.rate_per_s=100"]
    preset = ["--set", "workload=sharegpt_like"]
    question = ["--smallest", "kv", "--target", "num_preemptions<=0", "--out", str(tmp_path)]
    for sets in ([*fields, *preset], [*preset, *fields]):
        code, output = _plan_cli(*question, *sets)
        assert code == 0, output
        spec = asked[-1].config(8.0)
        workload = config_from_dict(spec["data"], spec["overrides"]).workload
        assert (workload.num_requests, workload.rate_per_s) == (5, 100.0)
        assert workload.lengths == "sharegpt_like"
    # a plan file's [set] is an earlier layer: the command line's table replaces its fields
    plan = load_plan(
        plans_dir() / "long-outputs-max-num-seqs.toml", {"cache.block_size_tokens": 32, "cache": {}}
    )
    assert plan.base["cache"] == {"block_size_tokens": 32}


def test_cli_plan_bounds_readmission_hits_and_evictions(tmp_path: Path) -> None:
    # BURST on 80 blocks: the ten need their 8th block in the same step with 79 - 70 = 9 free;
    # the last running request is preempted and frees 7 full blocks that nobody else needs (the
    # others hold their 8 blocks), so re-admitted with 100 + 13 tokens it finds (113 - 1) // 16
    # = 7 of them: prefix_cache_preempted_hits = 112 > 0. On 81 blocks nobody is preempted, and
    # no block is freed before the last one is taken: no re-admission hit, no eviction.
    args = ["--smallest", "cache.kv_cache_bytes"]
    args += ["--target", "prefix_cache_preempted_hits<=0", "--target", "num_cache_evictions<=0"]
    for key, value in BURST["workload"].items():
        args += ["--set", f"workload.{key}={value}"]
    args += ["--set", "model=llama-3.1-8b", "--set", "gpu=h100-80gb"]
    args += ["--set", "scheduler.max_model_len=128"]
    args += ["--lo", str(80 * 16 * BYTES_PER_TOKEN), "--hi", str(SMALLEST_WITHOUT_PREEMPTION)]
    code, output = _plan_cli(*args, "--out", str(tmp_path), "--name", "readmit", "--no-progress")
    assert code == 0, output
    answer = json.loads((tmp_path / "plan" / "readmit" / "answer.json").read_text())
    assert answer["answer"] == SMALLEST_WITHOUT_PREEMPTION
    assert "prefix_cache_preempted_hits = 112 > 0" in " ".join(output.split())


def test_every_target_metric_is_in_some_summary() -> None:
    """A target names a metric some run's summary holds: one that none holds (the list once had
    ``num_requests_waiting_max``) would be accepted and then never met."""
    from kvsim import config_from_dict, simulate
    from kvsim.study.targets import target_metrics

    tiny = {"num_requests": 8, "rate_per_s": 100.0}
    runs = [
        {**BURST, "cache": {"kv_cache_bytes": 40 * 16 * BYTES_PER_TOKEN}},  # v1, preempting
        {  # v0 groups of two samples on a small paged pool: they share, copy and swap
            "scheduler": {"engine": "vllm-v0", "max_model_len": 512},
            "cache": {"kv_cache_gib": 0.5},
            "workload": {**tiny, "n": 2},
        },
        {"cache": {"allocator": "radix"}, "workload": tiny},
        # a disaggregated fleet: the fleet's own metrics (replicas, GPUs, KV transfers)
        {"fleet": {"replicas": 2, "prefill_replicas": 1}, "workload": tiny},
        # speculative decoding: vLLM's spec_decode_* counters
        {"speculative": {"num_speculative_tokens": 2, "acceptance_rate": 0.5}, "workload": tiny},
        # a CPU tier and a disk below it: vLLM's external_prefix_cache_* and kv offload counters
        {
            "cache": {"enable_prefix_caching": True},
            "offload": {"kv_offloading_size": 1, "disk_offloading_size": 4},
            "workload": tiny,
        },
    ]
    held: set[str] = set()
    for run in runs:
        held |= set(simulate(config_from_dict(run)).summary)
    assert set(target_metrics()) - held == set()
    # and so does every metric an experiment's [analysis] may draw (vs_metrics)
    from kvsim.study.analysis import summary_metrics

    assert set(summary_metrics()) - held == set()


def test_a_point_with_one_request_too_long_says_one_request() -> None:
    from kvsim.study.plan import failure

    target = (Target("num_preemptions", 0.0),)
    plan = Plan("p", {}, "cache.kv_cache_gib", "smallest", lo=1, hi=2, targets=target)
    assert failure(plan, {"num_rejected_kv_pool": 1}) == "1 request too long for the pool"
    assert failure(plan, {"num_rejected_kv_pool": 2}) == "2 requests too long for the pool"


def test_plan_shows_token_utilization_as_a_percentage() -> None:
    # token_utilization_perc is token states / allocated in percent (despite vLLM's 0-1 _perc)
    from kvsim.cli.plan import _fmt

    assert _fmt(97.5, "token_utilization_perc") == "97.5 %"
    assert _fmt(0.5, "kv_cache_usage_perc") == "0.5 0-1"


def _rate_plan(**kwargs: object) -> Plan:
    return Plan(
        name="window",
        base={"workload": {"preset": "alpaca_like", "num_requests": 1000}},
        field="workload.rate_per_s",
        direction="largest",
        lo=0.5,
        hi=80.0,
        targets=(Target("normalized_latency_seconds_mean", 0.1),),
        quick={"workload.num_requests": 150},
        **kwargs,  # type: ignore[arg-type]
    )


def test_a_rate_plans_window_raises_the_request_count_only_where_it_spans_less() -> None:
    plan = _rate_plan(min_window_s=600.0)
    # 50 req/s x 600 s = 30,000 requests; 0.5 req/s x 600 s = 300, under the config's 1,000
    assert plan.config(50.0)["overrides"]["workload.num_requests"] == 30_000
    assert plan.config(0.5)["overrides"]["workload.num_requests"] == 1000
    assert plan.config(1.0001)["overrides"]["workload.num_requests"] == 1000
    assert plan.config(1.7)["overrides"]["workload.num_requests"] == 1020  # ceil(1,020.0)
    assert plan.config(50.0, quick=True)["overrides"]["workload.num_requests"] == 150
    no_window = _rate_plan()
    assert "workload.num_requests" not in no_window.config(50.0)["overrides"]


def test_quick_runs_keep_a_count_plan_set_gives() -> None:
    # kvsim plan --set workload.num_requests=N --quick: the user's N (here the base's 1,000,
    # which --set wrote: ``varied``) stays; --quick replaced it with the plan's quick 150
    plan = _rate_plan(varied=("workload.num_requests",))
    assert "workload.num_requests" not in plan.config(50.0, quick=True)["overrides"]
    assert plan.config(50.0, quick=True)["data"]["workload"]["num_requests"] == 1000


@pytest.mark.parametrize("window", [0.0, -5.0, float("inf"), float("nan")])
def test_a_rate_plans_window_must_be_positive_seconds(window: float) -> None:
    with pytest.raises(ValueError, match="min_window_s"):
        _rate_plan(min_window_s=window)


def test_a_window_needs_the_rate_knob() -> None:
    with pytest.raises(ValueError, match=r"min_window_s.*workload.rate_per_s"):
        dataclasses.replace(_rate_plan(), field="cache.kv_cache_gib", min_window_s=600.0)


def test_a_rate_plans_window_also_lifts_a_shorter_arrival_window() -> None:
    plan = dataclasses.replace(
        _rate_plan(min_window_s=30.0),
        base={"workload": {"preset": "alpaca_like", "duration_s": 20.0}},
    )
    overrides = plan.config(5.0)["overrides"]
    assert overrides["workload.duration_s"] == 30.0  # 20 s would stop arrivals at 100 requests
    assert overrides["workload.num_requests"] == 2000  # the preset's count spans 400 s already
    longer = dataclasses.replace(plan, base={"workload": {"duration_s": 60.0}})
    assert "workload.duration_s" not in longer.config(5.0)["overrides"]


@pytest.mark.parametrize("value", ['"abc"', '"30"', "true", "[30]", "{ a = 1 }"])
@pytest.mark.parametrize("key", ["min_window_s", "resolution", "lo"])
def test_a_plan_files_numbers_are_numbers_and_errors_name_them(
    key: str, value: str, tmp_path: Path
) -> None:
    question = {"lo": "0.5", "hi": "50.0", key: value}
    path = tmp_path / "p.toml"
    path.write_text(
        'name = "p"\n[base]\nworkload = "alpaca_like"\n[question]\n'
        'field = "workload.rate_per_s"\ndirection = "largest"\n'
        "targets = { normalized_latency_seconds_mean = 0.1 }\n"
        + "".join(f"{k} = {v}\n" for k, v in question.items())
    )
    line = 8 if key == "lo" else 10  # (lo keeps its place; another key is the 10th line)
    with pytest.raises(ValueError, match=rf"p.toml line {line}: \[question\] {key}: expected a"):
        load_plan(path)
    if key != "min_window_s":  # the same value given as an argument: no line of the file
        with pytest.raises(ValueError, match=rf"p.toml: \[question\] {key}: expected a number"):
            load_plan(path, **{key: question[key].strip('"')})


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        # bool("false") is True: a rate plan answered 2 where it answers 2.047 without the key
        ("integer", '"false"', "integer: expected true or false, got 'false'"),
        ("integer", "1", "integer: expected true or false, got 1"),
        # float("64KiB") and iterating 65536 failed in Python's own words, with no key or line
        ("choices", '["64KiB", "2MiB"]', "choices: expected a list of numbers, got ['64KiB'"),
        ("choices", "65536", "choices: expected a list of numbers, got 65536"),
    ],
)
def test_a_plan_files_flags_and_choices_are_checked_naming_the_line(
    key: str, value: str, said: str, tmp_path: Path
) -> None:
    path = tmp_path / "p.toml"
    path.write_text(
        'name = "p"\n[base]\nworkload = "alpaca_like"\n[question]\n'
        'field = "workload.rate_per_s"\ndirection = "largest"\nlo = 1.0\nhi = 3.0\n'
        "targets = { normalized_latency_seconds_mean = 0.1 }\n"
        f"{key} = {value}\n"
    )
    with pytest.raises(ValueError, match=r"p.toml line 10: \[question\] " + re.escape(said)):
        load_plan(path)


def test_a_window_is_part_of_a_plans_question(tmp_path: Path) -> None:
    path = tmp_path / "rate.toml"
    path.write_text(
        'name = "rate-plan"\n[base]\nworkload = { preset = "alpaca_like", num_requests = 40 }\n'
        '[question]\nfield = "workload.rate_per_s"\ndirection = "largest"\nlo = 0.5\n'
        "hi = 50.0\ntargets = { normalized_latency_seconds_mean = 0.1 }\nmin_window_s = 30.0\n"
    )
    out = ["--out", str(tmp_path), "--no-progress"]
    code, output = _plan_cli(str(path), *out)
    assert code == 0, output
    answer = tmp_path / "plan" / "rate-plan" / "answer.json"
    assert json.loads(answer.read_text())["min_window_s"] == 30.0
    shipped = answer.read_bytes()
    code, output = _plan_cli(str(path), "--window", "300", *out)  # another question
    assert code == 2, output
    assert "over at least 30 s of arrivals" in " ".join(output.split())
    assert answer.read_bytes() == shipped
    code, output = _plan_cli(str(path), "--window", "300", "--name", "rate-300", *out)
    assert code == 0, output
    assert (
        json.loads((tmp_path / "plan" / "rate-300" / "answer.json").read_text())["min_window_s"]
        == 300.0
    )


def test_a_plan_refuses_a_knob_its_config_ignores() -> None:
    # replayed trace arrivals have no rate: every rate would run the same workload, and the
    # plan used to answer the bracket's top (100 req/s)
    plan = dataclasses.replace(
        _rate_plan(),
        base={"workload": {"trace": "mooncake_conversation", "arrival": "trace"}},
    )
    with pytest.raises(ValueError, match=r"workload.rate_per_s has no effect on this config"):
        plan.check_field()
    _rate_plan().check_field()  # synthetic arrivals read it


def test_a_knob_every_replicas_table_sets_is_refused() -> None:
    # each replica's fleet.replica_overrides sets its own KV: the fleet-wide budget moves
    # nothing, and the plan answered "none ... relax the target" from two identical ends
    fleet = {
        "replicas": 2,
        "replica_overrides": [
            {"cache": {"kv_cache_bytes": 2**30}},
            {"cache": {"kv_cache_bytes": 2**30}},
        ],
    }
    plan = dataclasses.replace(BURST_PLAN, base={**BURST, "fleet": fleet})
    with pytest.raises(ValueError, match=r"fleet.replica_overrides sets it for each"):
        plan.check_field()
    one = {"replicas": 2, "replica_overrides": [{"cache": {"kv_cache_bytes": 2**30}}]}
    dataclasses.replace(BURST_PLAN, base={**BURST, "fleet": one}).check_field()  # (replica 1)


@pytest.mark.parametrize("lo", [1e8, 0.5])  # 0.5 bytes/s: below the field's bound, invalid
def test_a_knob_whose_ends_give_one_config_is_refused(lo: float) -> None:
    """A disk tier's bandwidth beside a disk of 0 GiB written (a sweep's "off" point, which no
    ignored-setting rule calls moot): the config at either end is the same (the search crashed
    with a KeyError when two values shared one point; with an invalid low end the bracket's
    middle is compared instead). With no disk size written at all, the rule names why."""
    plan = dataclasses.replace(
        _rate_plan(),
        field="offload.disk_read_bandwidth_bytes_per_s",
        direction="smallest",
        lo=lo,
        hi=1e10,
    )
    with pytest.raises(ValueError, match=r"has no effect on this config \(there is no disk tier"):
        plan.check_field()
    base = {**plan.base, "offload": {"disk_offloading_size": 0}}
    with pytest.raises(ValueError, match=r"has no effect on this config \(the config at "):
        dataclasses.replace(plan, base=base).check_field()


@pytest.mark.parametrize("hi", [32, 100_000])  # 100,000 tokens: past the field's bound
def test_an_integer_field_makes_an_integer_knob(hi: int) -> None:
    """num_speculative_tokens is an integer field: the search tried 3.17... and every midpoint
    failed validation, so a largest-plan answered 1. Its plan takes whole numbers only, however
    its bracket ends; a real field (the rate) stays real."""
    from kvsim.study.plan import candidates

    base = {"speculative": {"acceptance_rate": 0.5}, "workload": {"num_requests": 10}}
    field = "speculative.num_speculative_tokens"
    plan = dataclasses.replace(_rate_plan(), base=base, field=field, lo=1, hi=hi)
    assert plan.integer
    assert candidates(plan) == range(1, hi + 1)
    assert not _rate_plan().integer
    with pytest.raises(ValueError, match=r"lo \(--lo\): .* takes whole numbers, got 1.5"):
        dataclasses.replace(plan, lo=1.5)


def test_an_answer_at_the_brackets_end_says_it_may_lie_beyond(tmp_path: Path) -> None:
    # 0.5 s per output token holds at 5 req/s for 50 requests (10 s of arrivals): the plan's
    # top is its answer
    args = ["--largest", "rate", "--target", "normalized_latency_seconds_mean<=0.5", "--hi", "5"]
    args += ["--set", "workload.num_requests=50", "--window", "10"]
    code, output = _plan_cli(*args, "--out", str(tmp_path), "--no-progress")
    assert code == 0, output
    assert "none: 5 ends the bracket (widen --hi)" in " ".join(output.split())


def test_a_rate_plan_draws_600_s_of_arrivals_unless_told_otherwise(tmp_path: Path) -> None:
    # 5 requests at 0.1 req/s arrive in 50 s: a queue past the knee could not show in it.
    # Asked without --window, every rate draws ceil(rate x 600 s) requests (0.1 -> 60)
    args = ["--largest", "rate", "--target", "normalized_latency_seconds_mean<=0.5"]
    args += ["--lo", "0.02", "--hi", "0.1", "--set", "workload.num_requests=5"]
    code, output = _plan_cli(*args, "--out", str(tmp_path), "--no-progress")
    assert code == 0, output
    flat = " ".join(output.split())
    assert "Poisson arrivals at the rate tried, at least 600 s of arrivals each" in flat
    assert "0.1 req/s" not in flat  # (the bracket's top is no setting of the plan's)
    folder = tmp_path / "plan" / "largest-rate_per_s"
    assert json.loads((folder / "answer.json").read_text())["min_window_s"] == 600.0
    drawn = {}
    for point in folder.glob("points/*"):
        rate = json.loads((point / "config.json").read_text())["workload"]["rate_per_s"]
        drawn[rate] = json.loads((point / "summary.json").read_text())["num_requests"]
    assert len(drawn) == 2, drawn  # (the bracket's ends meet the target: no more points)
    for rate, count in drawn.items():
        assert count == max(5, math.ceil(rate * 600)), (rate, count)
    code, output = _plan_cli(*args, "--window", "20", "--name", "windowed", "--out", str(tmp_path))
    assert code == 0, output
    assert "at least 20 s of arrivals each" in " ".join(output.split())


def test_a_tp_plan_skips_the_sizes_the_models_heads_do_not_divide(tmp_path: Path) -> None:
    # OPT-13B (the default model) has 40 = 2^3 x 5 heads: of the TP sizes from --lo 3 (4, 8,
    # 16) 16 cannot split them. Five short requests are never preempted at TP 4 or 8, so the
    # smallest size meeting "no preemption" is 4 (it used to be "none: even 16 fails")
    args = ["--smallest", "tp", "--lo", "3", "--target", "num_preemptions<=0"]
    args += ["--set", "workload.num_requests=5", "--set", "workload.lengths=fixed"]
    code, output = _plan_cli(*args, "--out", str(tmp_path), "--no-progress")
    assert code == 0, output
    flat = " ".join(output.replace("│", " ").split())
    assert "answer tensor_parallel_size (GPUs): 4 " in flat
    assert "skipped 16 parallel.tensor_parallel_size: opt-13b has 40 attention heads" in flat
    # piped, the table is as wide as it needs, its long rows folded (the skipped size's reason
    # made it one line as wide as the reason)
    table = [line for line in output.splitlines() if line.startswith("│")]
    assert max(map(len, table)) <= 3 + 25 + 3 + 100 + 2  # borders, label, value (100 at most)
    answer = json.loads(
        (tmp_path / "plan" / "smallest-tensor_parallel_size" / "answer.json").read_text()
    )
    assert answer["answer"] == 4
    assert list(answer["skipped"]) == ["16"]
    assert answer["next_value_fails"] is None  # 4 is the bracket's lowest valid size


@pytest.mark.parametrize(
    ("metric", "ylabel"),
    [
        ("time_to_first_token_seconds_p99", "TTFT p99 (s)"),
        ("request_time_per_output_token_seconds_p95", "TPOT p95 (s)"),
        ("e2e_request_latency_seconds_mean", "E2E mean (s)"),
        ("normalized_latency_seconds_p99", "p99 (s)"),  # no short name in vLLM's benchmark
        ("num_preemptions", "count"),
    ],
)
def test_a_plan_panel_names_its_latency_on_the_axis(metric: str, ylabel: str) -> None:
    from kvsim.study.plan_figure import _panel_labels

    title, label = _panel_labels(metric, 2.0)
    assert label == ylabel
    assert title.startswith(f"{metric} <= 2")


def test_values_that_share_a_config_run_one_point_and_are_all_seen(tmp_path, monkeypatch):
    # max_num_seqs is an integer knob: 4.0 and 4.4 both run max_num_seqs = 4, one config, so
    # one point runs (and one stale-point check is made), and both values get its summary
    from kvsim.study import plan as planning

    plan = dataclasses.replace(
        _rate_plan(),
        base={"workload": {"num_requests": 5}},
        field="scheduler.max_num_seqs",
        direction="largest",
        lo=1,
        hi=8,
    )
    ran: list[int] = []
    real = planning.outcomes

    def counted(points, **kwargs):
        ran.append(len(points))
        return real(points, **kwargs)

    monkeypatch.setattr(planning, "outcomes", counted)
    checked: list[str] = []  # (each check reads the point's files; a stale one is counted)
    real_check = planning.finished_by
    monkeypatch.setattr(planning, "finished_by", lambda f, k: checked.append(k) or real_check(f, k))
    seen: list[float | int] = []
    evaluator = planning._Evaluator(plan, tmp_path, 1, False, lambda v, s, m: seen.append(v))
    evaluator.evaluate([4.0, 4.4])
    assert ran == [1]
    assert len(checked) == 1  # (was 2: a stale point was warned about as two)
    assert seen == [4, 4]
    assert evaluator.seen[4.0] is evaluator.seen[4.4]


def test_a_zero_bound_met_exactly_has_a_margin_of_zero_not_minus_zero() -> None:
    # num_preemptions <= 0 met by 0 preemptions: the margin is 0 - 0 = 0; it printed
    # "-0.0 % under its bound" (the negation of 0.0 is -0.0)
    margin = Target("num_preemptions", 0.0).headroom({"num_preemptions": 0})
    assert f"{100 * margin:.1f}" == "0.0"
    assert Target("num_preemptions", 0.0).headroom({"num_preemptions": 2}) == -2.0
    assert Target("ttft", 2.0).headroom({"ttft": 1.5}) == 0.25  # 1 - 1.5 / 2


def test_a_misspelt_knob_is_named_before_a_bracket_is_asked_for() -> None:
    # "workload.rate" is no field: the plan said it "is not a knob with a default range ...
    # give --lo and --hi", and only with both did it hint at rate_per_s
    with pytest.raises(ValueError, match=r"'workload\.rate' is not a config field; did you mean "
                       r"'workload\.rate_per_s'\?"):  # fmt: skip
        plan_from_dict("p", {}, {"field": "workload.rate", "targets": {"num_preemptions": 0}})


def test_the_answer_as_a_share_is_left_out_where_replicas_differ() -> None:
    from kvsim.cli.plan import _as_utilization
    from kvsim.study.plan import plan_from_dict

    base = {"model": "llama-3.1-8b", "gpu": "h100-80gb", "scheduler": {"max_model_len": 1024}}
    question = {"field": "cache.kv_cache_gib", "lo": 1, "hi": 20, "targets": {"num_preemptions": 0}}
    # (4 GiB + 16.06e9 B + 2 GiB) / 81,089 MiB = 0.26465, up to 0.265 (test_capacity_arithmetic)
    one = plan_from_dict("smallest", base, question)
    assert _as_utilization(one, 4.0).startswith("0.265 of 79.2 GiB (KV + 15.0 GiB of weights")
    # an A100-40GB replica beside an H100 needs another share of its own GPU: no one answer
    fleet = {"replicas": 2, "replica_overrides": [{}, {"gpu": "a100-40gb"}]}
    mixed = plan_from_dict("smallest", {**base, "fleet": fleet}, question)
    assert _as_utilization(mixed, 4.0) == ""
    # a replica of 10 GiB of headroom needs another share; one of its own budget takes no knob
    for cache in ({"activation_headroom_bytes": 10 * 2**30}, {"kv_cache_gib": 8}):
        fleet = {"replicas": 2, "replica_overrides": [{}, {"cache": cache}]}
        assert (
            _as_utilization(plan_from_dict("smallest", {**base, "fleet": fleet}, question), 4) == ""
        )


def test_answer_json_has_no_share_above_1() -> None:
    from kvsim.study.plan import plan_from_dict
    from kvsim.study.plan_figure import _utilization

    # (64 GiB + 16.06e9 B + 2 GiB) / 81,089 MiB = 1.022: no gpu_memory_utilization vLLM takes
    base = {"model": "llama-3.1-8b", "gpu": "h100-80gb", "scheduler": {"max_model_len": 1024}}
    question = {"field": "cache.kv_cache_gib", "lo": 1, "hi": 64, "targets": {"num_preemptions": 0}}
    plan = plan_from_dict("smallest", base, question)
    assert _utilization(plan, 64.0) is None
    assert _utilization(plan, 4.0) == 0.265  # (4 GiB + 16.06e9 B + 2 GiB) / 81,089 MiB


T99 = "time_to_first_token_seconds_p99"


@pytest.mark.parametrize(
    ("earlier", "warned"),
    [
        ({"field": "cache.kv_cache_gib", "direction": "smallest", "targets": {T99: 2.0}}, False),
        ({"field": "workload.rate_per_s", "direction": "largest", "targets": {T99: 3.0}}, True),
        ({"targets": {T99: 2.0}, "answer": None, "options": []}, True),  # a --cheapest answer
    ],
    ids=["same question", "another question", "the cheapest fleet"],
)
def test_a_plan_named_as_one_answering_another_question_says_it_replaces_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, earlier: dict, warned: bool
) -> None:
    """A plan folder holding another question's answer (hand-written here as kvsim writes
    answer.json) is replaced with a warning naming that question; the same question, asked
    again, replaces its answer silently."""
    folder = tmp_path / "plan" / "p1"
    folder.mkdir(parents=True)
    (folder / "answer.json").write_text(json.dumps(earlier))
    args = ["plan", "--smallest", "kv", "--target", f"{T99}<=2", "--name", "p1", "--no-progress"]
    args += ["--set", "workload=sharegpt_like", "--set", "workload.num_requests=40"]
    with caplog.at_level(logging.WARNING, logger="kvsim.cli"):
        result = CliRunner().invoke(app, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    said = [r.getMessage() for r in caplog.records if "replacing the answer" in r.getMessage()]
    assert bool(said) is warned
    if warned:
        asked = "the cheapest fleet" if "options" in earlier else "largest workload.rate_per_s"
        assert f"({asked} with {T99} <= " in said[0]
    assert json.loads((folder / "answer.json").read_text())["field"] == "cache.kv_cache_gib"


def test_the_cheapest_fleet_named_as_a_plan_says_it_replaces_its_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "plan" / "p1"
    folder.mkdir(parents=True)
    earlier = {"field": "cache.kv_cache_gib", "direction": "smallest", "targets": {T99: 2.0}}
    (folder / "answer.json").write_text(json.dumps(earlier))
    args = ["plan", "--cheapest", "--target", f"{T99}<=2", "--name", "p1", "--no-progress"]
    args += ["--gpus", "h100-80gb", "--tp", "1", "--replicas", "1"]
    args += ["--set", "workload=sharegpt_like", "--set", "workload.num_requests=20"]
    with caplog.at_level(logging.WARNING, logger="kvsim.cli"):
        result = CliRunner().invoke(app, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    said = [r.getMessage() for r in caplog.records if "replacing the answer" in r.getMessage()]
    assert len(said) == 1
    assert f"(smallest cache.kv_cache_gib with {T99} <= 2)" in said[0]


def test_a_window_leaves_a_configs_own_duration_as_the_arrivals_end() -> None:
    # workload.duration_s = 1,200 s with no count draws every arrival in 1,200 s (4,800 at
    # 4 req/s); setting num_requests = max(1,000, 4 x 100) = 1,000 cut it to 250 s
    plan = dataclasses.replace(
        _rate_plan(min_window_s=100.0), base={"workload": {"duration_s": 1200.0}}
    )
    assert plan.config(4.0)["overrides"] == {"workload.rate_per_s": 4.0}
    short = dataclasses.replace(plan, base={"workload": {"duration_s": 50.0}})
    assert short.config(4.0)["overrides"] == {
        "workload.rate_per_s": 4.0,
        "workload.duration_s": 100.0,  # raised to the window, still no count
    }


def test_a_window_counts_the_arrivals_a_time_scale_squeezes_into_it() -> None:
    # time_scale 0.25 multiplies inter-arrival times by a quarter: 10 req/s arrive at 40 a
    # simulated second, so 600 s of arrivals are 10 x 600 / 0.25 = 24,000 requests (not 6,000)
    plan = dataclasses.replace(
        _rate_plan(min_window_s=600.0),
        base={"workload": {"preset": "alpaca_like", "num_requests": 1000, "time_scale": 0.25}},
    )
    assert plan.config(10.0)["overrides"]["workload.num_requests"] == 24_000


def test_a_rate_plan_refuses_a_closed_loop_and_a_window_past_the_request_limit() -> None:
    closed = dataclasses.replace(
        _rate_plan(), base={"workload": {"max_concurrency": 4, "num_requests": 100}}
    )
    with pytest.raises(ValueError, match="only caps the arrivals"):
        closed.check_field()
    # 3 req/s x 700,000 s = 2,100,000 requests, over the 1,000,000 a run holds: the points
    # above 1,000,000 / 700,000 = 1.43 req/s were "fails" with an invalid config
    huge = dataclasses.replace(_rate_plan(min_window_s=700_000.0), lo=1.2, hi=3.0)
    with pytest.raises(ValueError, match=r"700000 s of arrivals \(--window\) are 2,100,000"):
        huge.check_field()
    # 4 sequences a request (n = 4): 400 req/s x 600 s = 240,000 requests are 960,000
    # sequences, within the 1,000,000; 1,000 req/s are 2,400,000 sequences, past it
    base = {"workload": {"preset": "alpaca_like", "num_requests": 1000, "n": 4}}
    dataclasses.replace(_rate_plan(min_window_s=600.0), base=base, hi=400.0).check_field()
    wide = dataclasses.replace(_rate_plan(min_window_s=600.0), base=base, hi=1000.0)
    with pytest.raises(ValueError, match="of 4 sequences are 2,400,000"):
        wide.check_field()


def test_a_rate_plans_window_is_part_of_its_question(tmp_path: Path, caplog) -> None:
    # the same targets over another window replaced the answer without a word; --window under
    # --quick (not read there) is said, and not recorded as the answer's window
    args = ["--largest", "rate", "--target", "normalized_latency_seconds_mean<=0.5", "--hi", "5"]
    args += ["--set", "workload.num_requests=20", "--out", str(tmp_path), "--no-progress"]
    code, output = _plan_cli(*args, "--window", "4")
    assert code == 0, output
    with caplog.at_level("WARNING", logger="kvsim"):
        code, output = _plan_cli(*args, "--window", "8")
    assert code == 0, output
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "replacing the answer" in said
    assert "over at least 4 s of arrivals" in said
    caplog.clear()
    with caplog.at_level("WARNING", logger="kvsim"):
        code, output = _plan_cli(*args, "--window", "8", "--quick")
    assert code == 0, output
    assert "--window is not read with --quick" in " ".join(r.getMessage() for r in caplog.records)
    quick = tmp_path / "plan" / "quick" / "largest-rate_per_s" / "answer.json"
    assert json.loads(quick.read_text())["min_window_s"] is None


def test_a_rate_plan_on_a_traces_own_times_is_one_error(tmp_path: Path, caplog) -> None:
    # it printed the ignored-setting warning and then the error for the same thing
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n")
    args = ["--largest", "rate", "--target", "normalized_latency_seconds_mean<=0.5"]
    args += ["--set", f"workload.trace={trace}", "--set", "workload.arrival=trace"]
    args += ["--out", str(tmp_path), "--no-progress"]
    with caplog.at_level("WARNING", logger="kvsim"):
        code, output = _plan_cli(*args)
    assert code == 2, output
    assert "has no effect on this config" in output
    assert not [r for r in caplog.records if "rate_per_s" in r.getMessage()]


def test_a_quick_answer_says_it_is_not_one_to_rely_on(tmp_path: Path) -> None:
    # --quick ran 100 requests a point and answered a rate 3 times what a full plan sustains,
    # told to widen --hi
    args = ["--largest", "rate", "--target", "normalized_latency_seconds_mean<=0.5", "--hi", "5"]
    code, output = _plan_cli(*args, "--quick", "--out", str(tmp_path), "--no-progress")
    assert code == 0, output
    assert "its answer is not one to rely on" in " ".join(output.split())
    code, output = _plan_cli(*args, "--window", "5", "--out", str(tmp_path), "--no-progress")
    assert "not one to rely on" not in " ".join(output.split())


def test_the_answer_is_run_on_other_draws_of_its_workload(tmp_path: Path) -> None:
    """Each other draw is the answer's config at seed 1, then 2 (the config's seed is 0), run
    as it would run alone: its targets' metrics and verdict are that run's."""
    from kvsim.config import config_from_dict
    from kvsim.fleet import simulate
    from kvsim.study.plan import other_draws

    plan = load_plan(plans_dir() / "bursty-kv.toml")
    result = other_draws(run_plan(plan, tmp_path, quick=True), 2, quick=True)
    assert result.answer is not None
    assert [d.seed for d in result.other_draws] == [1, 2]
    for draw in result.other_draws:
        spec = plan.config(result.answer, quick=True)
        alone = simulate(config_from_dict(spec["data"], {**spec["overrides"], "seed": draw.seed}))
        for target in plan.targets:
            assert draw.values[target.metric] == alone.summary[target.metric]
        held = all(alone.summary[t.metric] <= t.bound for t in plan.targets)
        assert draw.meets == (held and not alone.summary.get("num_rejected_kv_pool", 0))
    save_plan(result)
    saved = json.loads((result.folder / "answer.json").read_text())["other_draws"]
    assert [(d["seed"], d["meets"]) for d in saved] == [
        (1, result.other_draws[0].meets),
        (2, result.other_draws[1].meets),
    ]


def test_a_knob_whose_valid_values_are_not_one_range_is_refused(tmp_path: Path) -> None:
    # vAttention maps pages of a power of two bytes. On 0.5 GiB of KV a 64 KiB page holds 32
    # tokens (2 KiB a token a tensor): each request 4 page rows of 128 tokens, all ten 10 x 128
    # x 128 KiB = 160 MiB, a peak kv_cache_usage_perc of 160 / 512 = 0.3125; a 2 MiB page holds
    # 1,024 tokens, a row of 64 tensors 128 MiB, so 4 requests fill the pool: 1.0. The search
    # probes between the two (both valid), where its first probe, no power of two, is
    # invalid: read as failing the target, it would make 64 KiB the answer
    cache = {"allocator": "vattention", "enable_prefix_caching": False, "kv_cache_gib": 0.5}
    plan = Plan(
        name="pages",
        base={**BURST, "cache": cache},
        field="cache.page_size_bytes",
        direction="largest",
        lo=65_536,
        hi=2_097_152,
        integer=True,
        targets=(Target("kv_cache_usage_perc_max", 0.5),),
    )
    with pytest.raises(
        ValueError, match=r"is not a valid config, though 65,536 below it and 2,097,152 above"
    ):
        run_plan(plan, tmp_path)


def test_an_answer_where_the_knobs_valid_values_end_says_so(tmp_path: Path) -> None:
    # acceptance_rate is a share: every rate up to 1 runs and meets a bound nothing reaches, the
    # rates past 1 are invalid: the answer is the last grid value below 1, bound by validity
    plan = Plan(
        name="rates",
        base={**BURST, "speculative": {"num_speculative_tokens": 3}},
        field="speculative.acceptance_rate",
        direction="largest",
        lo=0.1,
        hi=2.0,
        targets=(Target("num_preemptions", 1e9),),
    )
    result = run_plan(plan, tmp_path)
    assert result.answer is not None
    assert 0.9 < result.answer <= 1.0
    assert result.ends_valid_range
    assert result.beyond is not None
    assert "invalid config" in result.beyond


@pytest.mark.parametrize(
    ("target", "said"),
    [
        # 2000 meant as ms: a 2,000 s bound every point meets
        ("time_to_first_token_seconds_p99<=2000", "write 2 if 2000 ms was meant"),
        # vLLM's 0-1 share: 80 never binds
        ("kv_cache_usage_perc<=80", "write 0.8 if 80 % was meant"),
        # higher is better: the bound asks for at most 90 % of requests meeting the SLO
        ("prefix_cache_hit_rate<=0.9", "higher is better for this metric"),
    ],
)
def test_a_bound_in_another_unit_or_direction_is_warned(target: str, said: str, caplog) -> None:
    from kvsim.cli.plan import _check_targets
    from kvsim.study.plan import Target

    forget_warnings(caplog)
    with caplog.at_level(logging.WARNING, logger="kvsim.cli"):
        _check_targets([Target.parse(target)])
    assert said in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kvsim.cli"):  # (a plain bound: quiet)
        _check_targets([Target.parse("time_to_first_token_seconds_p99<=2")])
    assert not caplog.text


def test_a_resolution_of_one_or_more_is_warned(caplog) -> None:
    # --resolution 5 meant as 5 %: steps of x6, an answer 2.4 times the true one
    forget_warnings(caplog)
    with caplog.at_level(logging.WARNING, logger="kvsim.study.plan"):
        Plan(
            name="rate",
            base=BURST,
            field="workload.rate_per_s",
            direction="largest",
            lo=1.0,
            hi=10.0,
            resolution=5.0,
            targets=(Target("num_preemptions", 0.0),),
        )
    assert "steps by a factor of 6 (a resolution is a fraction: 0.05 for 5 %)" in caplog.text


def test_quick_on_a_config_runs_100_requests_a_point(tmp_path: Path) -> None:
    # a config has no [quick] table: --quick ran the config's 1,000 default requests a point
    # (its help says 100)
    args = ["plan", "--smallest", "cache.kv_cache_gib", "--lo", "4", "--hi", "8", "--quick"]
    args += ["--target", "num_preemptions<=1000000", "--draws", "0", "--no-progress"]
    for pair in (
        "model=llama-3.1-8b",
        "gpu=h100-80gb",
        "scheduler.max_model_len=128",
        "workload.lengths=fixed",
        "workload.fixed_prompt_tokens=20",
        "workload.fixed_output_tokens=4",
    ):
        args += ["--set", pair]
    args += ["--out", str(tmp_path), "--name", "q"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    points = list((tmp_path / "plan" / "quick" / "q" / "points").glob("*/summary.json"))
    assert points
    assert {json.loads(p.read_text())["num_requests"] for p in points} == {100}


@pytest.mark.parametrize(
    ("head", "said"),
    [
        # the experiment's base ran; [base] was ignored without a word
        ('experiment = "kv-budget"\n[base]\nmodel = "opt-13b"\n', "line 2: [base] and experiment"),
        # "sets": read as no quick settings
        ('[base]\nmodel = "opt-13b"\n[quick]\nsets = { seed = 1 }\n', "line 4: [quick] unknown"),
        # the knob in [quick] set: the plan moved it, the set never read
        (
            '[base]\nmodel = "opt-13b"\n[quick]\nset = { "cache.kv_cache_gib" = 30 }\n',
            "line 4: [quick] set gives cache.kv_cache_gib, the knob the plan moves",
        ),
    ],
)
def test_a_plan_files_ignored_tables_are_refused(head: str, said: str, tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(
        head + '[question]\nfield = "cache.kv_cache_gib"\n'
        "targets = { time_to_first_token_seconds_p99 = 2 }\n"
    )
    with pytest.raises(ValueError, match=re.escape(f"p.toml {said}")):
        load_plan(path)


def test_an_empty_name_is_refused_not_ignored(tmp_path: Path) -> None:
    """``--name ""`` names no folder: refused as any bad folder name is (exit 2, one line), where
    it was taken as no --name and the results went to the question's default folder."""
    code, output = _plan_cli(
        "--name", "", "--smallest", "kv", "--target", "time_to_first_token_seconds_p99<=5",
        "--set", "workload.num_requests=10", "--out", str(tmp_path), "--no-progress",
    )  # fmt: skip
    assert code == 2, output
    assert "plan name: expected a folder name" in " ".join(output.split())
    assert not (tmp_path / "plan").exists()
