"""``kvsim plan --cheapest`` and the fleet's bad inputs: one clear error each."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from kvsim.cli import app
from kvsim.config.fleet import PricingSpec, gpu_price_per_hour
from kvsim.study.cheapest import FleetOption, replica_price, run_cheapest
from kvsim.study.plan import Target
from tests.conftest import forget_warnings

runner = CliRunner()
BASE = {
    "model": "llama-3.1-8b",
    "scheduler": {"max_model_len": 4096},
    "workload": {"lengths": "lognormal", "rate_per_s": 30.0, "num_requests": 150},
}


def test_the_answer_is_the_cheapest_fleet_that_meets_every_target(tmp_path):
    targets = [Target("time_to_first_token_seconds_p99", 0.5)]
    options = [FleetOption("h100-80gb", 1), FleetOption("a100-80gb", 1), FleetOption("h200", 1)]
    result = run_cheapest("t", BASE, options, targets, max_replicas=6, out_root=tmp_path)
    assert result.best is not None
    best = result.options[result.best]
    # every fleet evaluated that meets the targets costs at least the answer's price
    meeting = result.points[result.points["meets"]]
    assert len(meeting)
    assert meeting["usd_per_hour"].min() == pytest.approx(best.usd_per_hour)
    # its price is its replicas x GPUs x the table's price
    price = gpu_price_per_hour(best.option.gpu, PricingSpec())
    assert best.usd_per_hour == pytest.approx(best.replicas * price)
    # one replica fewer of the answer's kind fails (the plan's answer is the fewest)
    if best.replicas > 1:
        fewer = result.points[result.points["fleet"] == f"{best.option.name} x{best.replicas - 1}"]
        assert not fewer["meets"].any()


def test_one_replica_at_most_simulates_one_and_says_why_it_fails(tmp_path):
    # 30 req/s on one H100 with a TTFT p99 of 1 ms: no single replica meets it. With
    # max_replicas = 1 the fleet of 2 (which the search used to simulate) is never run
    targets = [Target("time_to_first_token_seconds_p99", 0.001)]
    result = run_cheapest(
        "one", BASE, [FleetOption("h100-80gb", 1)], targets, max_replicas=1, out_root=tmp_path
    )
    assert list(result.points["fleet"]) == ["h100-80gb-tp1 x1"]
    assert result.best is None
    why = str(result.options[0].why_not)
    assert why.startswith("none of up to 1 replica (max_replicas) meets every target (1 replica: ")
    assert "time_to_first_token_seconds_p99 = " in why
    assert why.endswith("> 0.001); raise --replicas or relax a target")


def test_an_option_whose_config_is_invalid_says_the_configs_whole_error(tmp_path):
    # Llama-3.1-70B at TP 2 on an H100: 0.9 x 81,089 MiB - 70,554,000,000 - 2 GiB =
    # 3,823,697,689.6 B, 23,337 slots of 160 KiB: 1,458 blocks of 16 less the null block hold
    # 23,312 tokens, short of the default max_model_len 131,072. The why-not was the plan's
    # error, cut at 160 characters before its advice; now it is the config's, and nothing is
    # simulated
    targets = [Target("time_to_first_token_seconds_p99", 2.0)]
    result = run_cheapest(
        "bad",
        {"model": "llama-3.1-70b"},
        [FleetOption("h100-80gb", 2)],
        targets,
        max_replicas=2,
        out_root=tmp_path,
    )
    why = str(result.options[0].why_not)
    assert why.startswith("invalid config: cache.gpu_memory_utilization = 0.9 (llama-3.1-70b")
    assert why.endswith(
        "lower scheduler.max_model_len to at most 23,312; parallel.tensor_parallel_size = 4 fits"
    )
    assert result.points.empty
    from kvsim.cli.cheapest import _table

    # (it was titled "fleets that meet every target" with none meeting)
    assert (
        _table(result).title == "fleet kinds considered, those meeting every target cheapest first"
    )


def test_replica_price_reads_the_table_or_the_config():
    assert replica_price(FleetOption("h200", 4), {}) == pytest.approx(4 * 4.59)
    assert replica_price(FleetOption("h200", 2), {"pricing": {"usd_per_gpu_hour": 1.5}}) == 3.0
    # a replica of TP 4 over 2 pipeline stages is 8 GPUs (ParallelConfig.world_size)
    staged = {"parallel": {"pipeline_parallel_size": 2}}
    assert replica_price(FleetOption("h200", 4), staged) == pytest.approx(8 * 4.59)


def test_a_pipeline_parallel_answer_counts_every_stages_gpus(tmp_path):
    """TP 1 over 2 pipeline stages: a replica is 2 GPUs at $1.50 each, $3.00/h, as the run's own
    summary prices it (usd_per_hour by world_size); the answer said 1 GPU, $1.50/h."""
    base = {
        **BASE,
        "parallel": {"pipeline_parallel_size": 2},
        "pricing": {"usd_per_gpu_hour": 1.5},
        "workload": {**BASE["workload"], "rate_per_s": 2.0, "num_requests": 20},
    }
    targets = [Target("time_to_first_token_seconds_p99", 5.0)]
    result = run_cheapest(
        "pp", base, [FleetOption("h100-80gb", 1)], targets, max_replicas=2, out_root=tmp_path
    )
    assert result.best is not None
    best = result.options[result.best]
    assert best.replicas == 1
    assert best.gpus_per_replica == 2
    assert best.usd_per_hour == pytest.approx(3.0)
    row = result.points.iloc[0]
    assert row["num_gpus"] == 2
    assert row["usd_per_hour"] == pytest.approx(3.0)  # (the run's own summary, the same price)
    from kvsim.study.cheapest import answer_record

    assert answer_record(result)["answer"]["num_gpus"] == 2


def test_cli_cheapest_writes_answer_points_and_frontier(tmp_path):
    args = [
        "plan", "--cheapest", "--gpus", "h100-80gb,a100-80gb", "--tp", "1",
        "--replicas", "4", "--target", "time_to_first_token_seconds_p99<=0.5",
        "--set", "model=llama-3.1-8b", "--set", "scheduler.max_model_len=4096",
        "--set", "workload.lengths=lognormal", "--set", "workload.num_requests=100",
        "--set", "workload.rate_per_s=20", "--out", str(tmp_path), "--no-progress",
    ]  # fmt: skip
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    folder = tmp_path / "plan" / "cheapest"
    answer = json.loads((folder / "answer.json").read_text())
    assert answer["answer"]["gpu"] in ("h100-80gb", "a100-80gb")
    assert (folder / "frontier.png").stat().st_size > 0
    points = pd.read_csv(folder / "points.csv")
    assert len(points) >= 2
    # a fleet that meets says its measured value against the bound (it said "meets  meets
    # every target"), the one points.csv holds
    met = points[points["meets"]].iloc[0]
    value = float(met["time_to_first_token_seconds_p99"])
    line = next(x for x in result.output.splitlines() if x.strip().startswith(met["fleet"]))
    assert f"meets  time_to_first_token_seconds_p99 = {value:.4g} <= 0.5" in line


def test_a_gpu_without_a_price_is_one_clear_error(tmp_path):
    result = runner.invoke(
        app,
        ["plan", "--cheapest", "--gpus", "a100-40gb,gb200", "--tp", "1",
         "--target", "time_to_first_token_seconds_p99<=1", "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "error:" in result.output
    assert "no price for GPU 'gb200'" in result.output  # checked before anything runs
    assert "Traceback" not in result.output
    # among several GPUs, one price for all (pricing.usd_per_gpu_hour) is not the advice: it
    # would price a100-40gb as gb200 too, and the cheapest fleet would be a tie of chips
    flat = " ".join(result.output.split())
    assert (
        "add a row [gb200] usd_per_gpu_hour = ... to a copy of kvsim/data/prices.toml and set "
        "pricing.table to it" in flat
    )
    assert "or leave the GPU out of --gpus" in flat
    table = tmp_path / "prices.toml"
    table.write_text("[h100-80gb]\nusd_per_gpu_hour = 2.0\n")
    result = runner.invoke(
        app,
        ["plan", "--cheapest", "--gpus", "h200", "--tp", "1", "--set",
         f"pricing.table={table}", "--target", "time_to_first_token_seconds_p99<=1",
         "--out", str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "no price for GPU 'h200'" in result.output
    assert str(table) in result.output


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("fleet.router=random", "fleet.router: unknown router 'random'; choose from"),
        ("fleet.prefill_replicas=3", "fleet.prefill_replicas: 3 prefill replica(s) leave no"),
    ],
)
def test_fleet_bad_input_is_one_clear_line(setting, expected):
    result = runner.invoke(
        app, ["run", "--set", "fleet.replicas=2", "--set", setting, "--no-progress"]
    )
    assert result.exit_code == 2
    assert expected in result.output
    assert result.output.count("error") == 1
    assert "Traceback" not in result.output


def test_a_split_option_grows_in_units_with_its_prefill_share(tmp_path):
    # P:D = 1:2 grows 3 replicas at a time, a third of them prefill: every fleet evaluated
    # has 3, 6, 9... replicas, and the answer's price is whole units
    targets = [Target("time_to_first_token_seconds_p99", 1.0)]
    option = FleetOption("h100-80gb", 1, (1, 2))
    seen: list[tuple[int, int]] = []

    def on_point(o, replicas, summary, meets):
        seen.append((replicas, int(summary.get("num_prefill_replicas", -1))))

    result = run_cheapest(
        "s", BASE, [option], targets, max_replicas=9, out_root=tmp_path, on_point=on_point
    )
    assert seen
    assert all(r % 3 == 0 and p == r // 3 for r, p in seen)
    best = result.options[0]
    if best.replicas is not None:
        assert best.replicas % 3 == 0
        assert best.usd_per_hour == pytest.approx(best.replicas * 3.49)


def test_each_replica_has_its_own_gpu_and_price():
    from kvsim import config_from_dict, simulate

    cfg = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "scheduler": {"max_model_len": 4096},
            "workload": {"num_requests": 20, "rate_per_s": 10.0},
            "fleet": {
                "replicas": 3,
                "replica_overrides": [{}, {"gpu": "h200", "parallel": {"tensor_parallel_size": 2}}],
            },
        }
    )
    results = simulate(cfg)
    assert results.replicas["gpu"].tolist() == ["h100-80gb", "h200", "h100-80gb"]
    assert results.replicas["tensor_parallel_size"].tolist() == [1, 2, 1]
    # 1 x 3.49 + 2 x 4.59 + 1 x 3.49 USD per hour (kvsim/data/prices.toml)
    assert results.summary["usd_per_hour"] == pytest.approx(3.49 + 9.18 + 3.49)
    assert results.summary["num_gpus"] == 4
    with pytest.raises(ValueError, match=r"replica_overrides\[0\]: 'workload' is the fleet's"):
        config_from_dict({"fleet": {"replicas": 2, "replica_overrides": [{"workload": {}}]}})


def test_a_what_if_gpu_without_a_price_is_an_info_line_a_preset_without_one_a_warning(
    tmp_path, caplog
):
    from kvsim.results.money import price_or_none

    table = tmp_path / "prices.toml"
    table.write_text('[h100-80gb]\nusd_per_gpu_hour = 3.0\nsource = "test"\ndate = "2026-12-04"\n')
    spec = PricingSpec(table=str(table))
    caplog.set_level("INFO", logger="kvsim.results.money")
    # a GPU of the config's own (an experiment's what-if): no table could price it, an info
    # line; a preset GPU the table leaves out: a warning
    for gpu, level in (("h200 what-if", "INFO"), ("a100-80gb", "WARNING")):
        forget_warnings(caplog)
        price = price_or_none(lambda g=gpu: gpu_price_per_hour(g, spec), gpu_names=[gpu])
        assert price is None
        (record,) = caplog.records
        assert record.levelname == level
        assert f"no price for GPU {gpu!r}" in record.getMessage()


def test_the_frontier_labels_only_what_it_draws_in_plain_numbers():
    # a new user's frontier listed a hollow "h100-80gb" (failing fleets) that had no point, its
    # price ticks read 4 x 10^0, and the legend beside the panel ran into the title
    from kvsim.view.fleet_plots import cost_frontier

    points = pd.DataFrame(
        {
            "fleet": ["h100-80gb-tp1 x1", "h100-80gb-tp1 x2"],
            "gpu": ["h100-80gb", "h100-80gb"],
            "usd_per_hour": [3.49, 6.98],
            "meets": [True, True],
            "time_to_first_token_seconds_p99": [0.09, 0.08],
        }
    )
    fig = cost_frontier(points, {"time_to_first_token_seconds_p99": 2.0}, cheapest=0)
    (legend,) = fig.legends
    frontier = "the best of the fleets meeting every target, at that price or less"
    assert [t.get_text() for t in legend.get_texts()] == ["h100-80gb (meets)", frontier]
    ax = fig.axes[0]
    assert ax.xaxis.get_minor_formatter()(4.0) == "4"  # within a decade: each minor tick
    assert ax.xaxis.get_major_formatter()(10.0) == "10"
