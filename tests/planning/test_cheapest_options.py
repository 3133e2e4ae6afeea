"""``kvsim plan --cheapest``'s options: bad lists refused before anything runs, repeats
considered once, answers kept within --replicas, and a bandwidth knob printed in the unit its
label names."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from kvsim.cli import app
from kvsim.study import cheapest
from kvsim.study.cheapest import FleetOption, run_cheapest
from kvsim.study.plan import Target

runner = CliRunner()
TARGET = "time_to_first_token_seconds_p99<=5"


def _cheapest(tmp_path, *options: str) -> list[str]:
    return ["plan", "--cheapest", *options, "--target", TARGET, "--out", str(tmp_path)]


@pytest.fixture
def no_runs(monkeypatch):
    """Fail any test that reaches a simulation: refusals come before anything runs."""

    def refuse(*args, **kwargs):
        raise AssertionError("a refused command ran a plan")

    monkeypatch.setattr(cheapest, "run_plan", refuse)


def _refused(result, message: str) -> None:
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert result.output.count("error") == 1
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("tp", "message"),
    [
        ("0", "--tp: expected whole numbers >= 1, got 0"),
        ("-2", "--tp: expected whole numbers >= 1, got -2"),
        ("2,0", "--tp: expected whole numbers >= 1, got 0"),  # the bad item, not the list
        ("1.5", "--tp: expected whole numbers >= 1, got 1.5"),
        ("two", "--tp: expected whole numbers >= 1, got 'two'"),
    ],
)
def test_a_tp_size_below_1_or_not_whole_is_refused_up_front(tmp_path, no_runs, tp, message):
    result = runner.invoke(app, _cheapest(tmp_path, "--gpus", "h100-80gb", "--tp", tp))
    _refused(result, message)


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        # given but empty: not the defaults (leaving the option out gives those)
        ("--gpus", "", "--gpus: expected a comma-separated list, got ''"),
        ("--tp", "", "--tp: expected a comma-separated list, got ''"),
        ("--gpus", " ", "--gpus: expected a comma-separated list, got ' '"),
        # an empty item: named with the option, not a price table's "GPU ''"
        ("--gpus", "h100-80gb,", "--gpus: expected a comma-separated list without empty items"),
        ("--gpus", " , ", "--gpus: expected a comma-separated list without empty items"),
        ("--tp", "1,,2", "--tp: expected a comma-separated list without empty items"),
    ],
)
def test_an_empty_list_or_item_is_refused_naming_the_option(
    tmp_path, no_runs, option, value, message
):
    other = {"--gpus": ["--tp", "1"], "--tp": ["--gpus", "h100-80gb"]}[option]
    result = runner.invoke(app, _cheapest(tmp_path, option, value, *other))
    _refused(result, message)
    assert "price" not in result.output


def test_an_unknown_gpu_is_named_as_one_not_as_unpriced(tmp_path, no_runs):
    result = runner.invoke(app, _cheapest(tmp_path, "--gpus", "h100-80gb,h999"))
    _refused(result, "--gpus: unknown gpu preset 'h999'; choose from [")
    assert "price" not in result.output


@pytest.mark.parametrize(
    "flags",
    [["--gpus", "h200"], ["--tp", "2"], ["--split", "1:1"], ["--replicas", "4"]],
)
def test_fleet_flags_without_cheapest_are_refused(tmp_path, no_runs, flags):
    # a one-knob plan ran and ignored them
    args = ["plan", "--smallest", "kv", "--target", TARGET, *flags, "--out", str(tmp_path)]
    _refused(runner.invoke(app, args), f"plan: {flags[0]} shape --cheapest's search of fleets")


def test_no_valid_fleet_kind_exits_2_after_the_table(tmp_path, no_runs):
    # Llama-3.1-8B's 32 query and 8 KV heads split over no TP 3: every kind is an invalid
    # config and nothing runs (it exited 0 with "no fleet considered meets every target")
    args = [*_cheapest(tmp_path, "--tp", "3"), "--set", "model=llama-3.1-8b", "--quick"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "error: plan --cheapest: none of the 3 fleet kinds is a valid config" in result.output
    assert "fleet kinds considered" in result.output


def test_repeated_gpus_tp_sizes_and_splits_are_considered_once_with_a_warning(
    tmp_path, monkeypatch, caplog
):
    seen: dict[str, object] = {}

    def capture(name, base, options, targets, **kwargs):
        seen["options"] = list(options)
        raise ValueError("stop here")  # (nothing runs: the options are what is tested)

    monkeypatch.setattr(cheapest, "run_cheapest", capture)
    caplog.set_level(logging.WARNING)
    args = _cheapest(
        tmp_path, "--gpus", "h100-80gb, h100-80gb", "--tp", "1,1,1",
        "--split", "1:2", "--split", "1:2",
    )  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    # one GPU x one TP size x (co-located, 1:2): two fleet kinds, not 2 x 3 x 3 = 18
    assert seen["options"] == [
        FleetOption("h100-80gb", 1, None),
        FleetOption("h100-80gb", 1, (1, 2)),
    ]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert any(m.startswith("--gpus: 'h100-80gb' named twice") for m in warnings), warnings
    assert any(m.startswith("--tp: 1 named 3 times") for m in warnings), warnings
    assert any(m.startswith("--split: 1:2 named twice") for m in warnings), warnings


def _fake_plans(monkeypatch, answers: dict[str, int | None]) -> list[tuple[str, tuple]]:
    """``run_plan`` answering each option (by its name) with ``answers``' replicas, as a plan
    whose fewest meeting replicas that is; returns the (plan, choices) asked."""
    asked: list[tuple[str, tuple]] = []

    def fake(plan, out_root, **kwargs):
        option = next(o for o in answers if plan.name.endswith(o))
        asked.append((option, plan.choices))
        answer = answers[option]
        if answer not in plan.choices:  # (a plan answers from its choices only)
            answer = None
        return SimpleNamespace(
            answer=None if answer is None else float(answer),
            why_none=None if answer is not None else "none meets",
            binding="time_to_first_token_seconds_p99",
            headroom=0.5,
        )

    monkeypatch.setattr(cheapest, "run_plan", fake)
    return asked


def test_no_fleet_past_max_replicas_is_simulated(tmp_path, monkeypatch):
    # max_replicas=1: the plan asks of 1 replica only (it looked at 2 as well, as a search
    # needs two values: a fleet the user ruled out, simulated); 2 would meet, 1 does not, so
    # the option has no answer and says to raise --replicas
    asked = _fake_plans(monkeypatch, {"h100-80gb-tp1": 2})
    targets = [Target("time_to_first_token_seconds_p99", 5.0)]
    result = run_cheapest(
        "t", {}, [FleetOption("h100-80gb", 1)], targets, max_replicas=1, out_root=tmp_path
    )
    assert asked == [("h100-80gb-tp1", (1.0,))]
    assert result.best is None
    only = result.options[0]
    assert (only.replicas, only.usd_per_hour) == (None, None)
    assert only.why_not == (
        "none of up to 1 replica (max_replicas) meets every target; raise --replicas or relax "
        "a target"
    )


def test_an_answer_dearer_than_the_best_is_not_found(tmp_path, monkeypatch):
    # prices (this table): h100-80gb $2/h, h200 $3/h a GPU. h100 x2 meets: best $4/h. Then
    # h200 may use floor(4 / 3) = 1 replica; its plan asks of 1 only (2, $6/h, would meet:
    # dearer than the best), so h200 has no answer, and the best stays 2 x h100
    table = tmp_path / "prices.toml"
    table.write_text("[h100-80gb]\nusd_per_gpu_hour = 2.0\n[h200]\nusd_per_gpu_hour = 3.0\n")
    base = {"pricing": {"table": str(table)}}
    _fake_plans(monkeypatch, {"h100-80gb-tp1": 2, "h200-tp1": 2})
    options = [FleetOption("h100-80gb", 1), FleetOption("h200", 1)]
    targets = [Target("time_to_first_token_seconds_p99", 5.0)]
    result = run_cheapest("t", base, options, targets, max_replicas=8, out_root=tmp_path)
    h100, h200 = result.options
    assert result.best == 0
    assert (h100.replicas, h100.usd_per_hour) == (2, pytest.approx(4.0))
    assert (h200.replicas, h200.usd_per_hour) == (None, None)
    assert (
        h200.why_not == "none of up to 1 replica (all that cost at most $4.00/h) meets every target"
    )


def test_a_unit_larger_than_max_replicas_says_so(tmp_path, monkeypatch):
    # a 1:2 split grows 3 replicas at a time: none fits in 2, and there is no best yet
    asked = _fake_plans(monkeypatch, {})
    targets = [Target("time_to_first_token_seconds_p99", 5.0)]
    option = FleetOption("h100-80gb", 1, (1, 2))
    result = run_cheapest("t", {}, [option], targets, max_replicas=2, out_root=tmp_path)
    assert asked == []
    assert result.options[0].why_not == "one unit is 3 replicas, more than max_replicas = 2"


def test_a_bandwidth_knob_prints_and_draws_in_the_gb_per_s_its_label_names(tmp_path, monkeypatch):
    from kvsim.study import plan_figure

    drawn = []
    draw = plan_figure.plan_figure
    monkeypatch.setattr(plan_figure, "plan_figure", lambda r: drawn.append(draw(r)) or drawn[-1])
    args = [
        "plan", "--smallest", "offload.link_bandwidth_bytes_per_s", "--lo", "16e9", "--hi",
        "64e9", "--target", "time_to_first_token_seconds_mean<=100", "--set",
        "model=llama-3.1-8b", "--set", "offload.kv_offloading_size=4", "--set",
        "workload.num_requests=20", "--name", "bw", "--out", str(tmp_path), "--no-progress",
    ]  # fmt: skip
    result = runner.invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    # a lax target: the bracket's low end, 16e9 bytes/s = 16 GB/s, is the answer
    assert "link bandwidth, one direction (GB/s): 16" in result.output
    assert "16 GB/s to 64 GB/s" in result.output  # (the values meeting every target)
    assert "1.6e+10" not in result.output.rsplit("bw: smallest", 1)[1]  # the table, not the log
    (figure,) = drawn
    ax = figure.axes[0]
    assert ax.get_xlabel() == "link bandwidth, one direction (GB/s)"
    # the ticks in GB/s: 16e9 and 64e9 bytes/s read 16 and 64 (not 1.6e+10)
    ticks = [ax.xaxis.get_major_formatter()(x, 0) for x in (16e9, 64e9)]
    assert ticks == ["16", "64"]
    assert figure.get_suptitle().endswith("(GB/s) = 16")


def test_format_value_gives_a_bandwidth_in_gb_per_s():
    from kvsim.study.plan import format_value

    # the plan's reasons, answer table and figure write a knob's value with format_value and
    # the plan's field: 1.6e10 bytes/s is 16 GB/s, 2.5e9 is 2.5
    field = "offload.link_bandwidth_bytes_per_s"
    assert format_value(1.6e10, field) == "16 GB/s"
    assert format_value(2.5e9, field, unit=False) == "2.5"
    assert format_value(1.6e10) == "1.6e+10"  # a knob without a display unit as it was
    assert format_value(4096, "max_num_batched_tokens") == "4,096"


def test_a_target_no_run_measures_stops_the_search_with_exit_2(tmp_path):
    # goodput without [slo] targets is NaN at every fleet size: each kind "failed" it and the
    # frontier figure stopped on matplotlib's "Data cannot be log-scaled"
    args = [
        "plan", "--cheapest", "--quick", "--no-progress", "--gpus", "h100-80gb", "--tp", "1",
        "--replicas", "2", "--target", "goodput_requests_per_s<=100",
        "--set", "model=llama-3.1-8b", "--out", str(tmp_path),
    ]  # fmt: skip
    result = runner.invoke(app, args)
    _refused(result, "--target goodput_requests_per_s: the plan's runs give no value for it")
    assert "[slo] targets" in result.output


def test_a_bad_price_is_one_line_naming_the_field(tmp_path, no_runs):
    # it came as pydantic's dump: "1 validation error for PricingSpec ... [type=value_error, ..."
    args = [*_cheapest(tmp_path, "--gpus", "h100-80gb"), "--set", "pricing.usd_per_gpu_hour=-2"]
    result = runner.invoke(app, args)
    _refused(result, "pricing.usd_per_gpu_hour: Input should be greater than or equal to 0")
    assert "validation error" not in result.output
    assert "pydantic" not in result.output


def test_a_price_row_near_a_gpu_presets_name_is_warned(tmp_path, caplog):
    from kvsim.config.fleet import price_table
    from tests.conftest import forget_warnings

    path = tmp_path / "prices.toml"
    path.write_text(
        "[a100-80gb]\nusd_per_gpu_hour = 1.59\n[a100_80gb]\nusd_per_gpu_hour = 0.1\n"
        "[my-asic]\nusd_per_gpu_hour = 2.0\n"
    )
    forget_warnings(caplog)
    with caplog.at_level("WARNING", logger="kvsim.config.fleet"):
        price_table(str(path))
    said = [r.getMessage() for r in caplog.records]
    assert any("line 3: [a100_80gb] names no GPU preset" in m and "'a100-80gb'" in m for m in said)
    assert not [m for m in said if "my-asic" in m]  # (a custom GPU's name, near no preset)


def test_draws_are_refused_with_cheapest(tmp_path, no_runs):
    # --draws was read by no part of --cheapest, while --lo, --hi, --window were refused
    result = runner.invoke(app, [*_cheapest(tmp_path, "--gpus", "h100-80gb"), "--draws", "5"])
    _refused(result, "plan --cheapest: --draws shape a one-knob plan and are not read here")


def test_a_configs_split_and_a_free_gpu_are_warned(tmp_path, monkeypatch, caplog):
    # the config's prefill_replicas was dropped for co-located fleets without a word; a GPU at
    # $0/h wins every search
    def stop(*args, **kwargs):
        raise RuntimeError("stop before running")

    monkeypatch.setattr(cheapest, "run_plan", stop)
    args = [
        *_cheapest(tmp_path, "--gpus", "h100-80gb", "--tp", "1"),
        "--set", "fleet.replicas=2", "--set", "fleet.prefill_replicas=1",
        "--set", "pricing.usd_per_gpu_hour=0",
    ]  # fmt: skip
    with caplog.at_level("WARNING", logger="kvsim.cli"):
        runner.invoke(app, args)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "fleet.prefill_replicas = 1 is not read" in said
    assert "h100-80gb is priced at $0/h" in said


def test_quick_keeps_a_count_set_gives(tmp_path, monkeypatch):
    # --quick's small runs are 100 requests a point, but not over a count --set gives
    seen: list = []

    def capture(base, targets, **kwargs):
        seen.append(kwargs["quick"])

    monkeypatch.setattr("kvsim.cli.cheapest.run_cheapest_command", capture)
    runner.invoke(app, [*_cheapest(tmp_path, "--quick"), "--set", "workload.num_requests=30"])
    runner.invoke(app, _cheapest(tmp_path, "--quick"))
    assert seen == [{}, {"workload.num_requests": 100}]


def test_a_quick_search_with_every_quick_setting_given_stays_a_quick_one(tmp_path, monkeypatch):
    # --quick --set workload.num_requests=30: the quick settings left are none ({}), and the
    # search is still quick: its answer goes to plan/quick/NAME, not over the full run's
    _fake_plans(monkeypatch, {"h100-80gb-tp1": 1})
    targets = [Target("time_to_first_token_seconds_p99", 5.0)]
    option = [FleetOption("h100-80gb", 1)]
    quick = run_cheapest("t", {}, option, targets, max_replicas=2, out_root=tmp_path, quick={})
    full = run_cheapest("t", {}, option, targets, max_replicas=2, out_root=tmp_path)
    assert (quick.folder, full.folder) == (tmp_path / "plan/quick/t", tmp_path / "plan/t")
