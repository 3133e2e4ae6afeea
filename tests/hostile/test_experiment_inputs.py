"""Hostile experiment and plan files: sections of the wrong type, axes that are not lists, names
that would leave the results root, bad snapshot times, grids too large to run. Each is refused
before a point runs, with one line naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

BASE = """
[base.cache]
kv_cache_gib = 2.0
[base.workload]
lengths = "fixed"
fixed_prompt_tokens = 16
fixed_output_tokens = 4
num_requests = 2
"""

# id: (experiment TOML, fragments of the error line); the file is cwd/exp.toml. BASE's lines:
# 1 blank, 2 [base.cache], ..., 8 num_requests; a table after it starts on line 9
EXPERIMENTS: dict[str, tuple[str | bytes, list[str]]] = {
    "base_not_table": (
        'name = "e"\nbase = 3\n',
        ["exp.toml line 2: base", "must be a table", "3"],
    ),
    "quick_not_table": ('name = "e"\nquick = 3\n' + BASE, ["exp.toml", "quick", "table"]),
    "zip_number": ('name = "e"\nzip = 3\n' + BASE, ["exp.toml", "zip", "3"]),
    "zip_list_of_numbers": ('name = "e"\nzip = [3]\n' + BASE, ["exp.toml", "zip[0]", "3"]),
    "grid_number": ('name = "e"\ngrid = 3\n' + BASE, ["exp.toml", "grid", "3"]),
    "grid_axis_scalar": (
        BASE + '[grid]\n"cache.block_size_tokens" = 8\n',
        ["exp.toml line 10: grid.cache.block_size_tokens", "non-empty list", "8"],
    ),
    "grid_axis_empty": (
        BASE + '[grid]\n"cache.block_size_tokens" = []\n',
        ["exp.toml", "grid.cache.block_size_tokens", "non-empty list"],
    ),
    "grid_axis_empty_part": (
        BASE + '[grid]\n"cache..block_size_tokens" = [8]\n',
        ["exp.toml", "cache..block_size_tokens"],
    ),
    "zip_unequal": (
        BASE + '[[zip]]\nlabel = ["a", "b"]\n"cache.block_size_tokens" = [8]\n',
        ["exp.toml", "zip[0]", "equal lengths"],
    ),
    # an empty [[zip]] (a stray header): zero points, exit 0, nothing run
    "zip_empty": (
        BASE + "[grid]\nseed = [1, 2]\n[[zip]]\n",
        ["exp.toml", "zip[0]", "empty [[zip]] table would make no point"],
    ),
    # a line break or a terminal escape printed into the sweep's table and the figures' legends
    "zip_label_control": (
        BASE + '[[zip]]\nlabel = ["a\\nb", "c\\u001b[31m"]\n"cache.block_size_tokens" = [8, 16]\n',
        ["exp.toml", "zip[0].label", "without line breaks or control characters", "'a\\nb'"],
    ),
    "zip_label_tables": (
        BASE + '[[zip]]\nlabel = [{x = 1}]\n"cache.block_size_tokens" = [8]\n',
        ["exp.toml", "zip[0].label", "strings"],
    ),
    "snapshot_list": ("snapshot_at_s = [1]\n" + BASE, ["exp.toml", "snapshot_at_s", "[1]"]),
    "snapshot_negative": ("snapshot_at_s = -1\n" + BASE, ["exp.toml", "snapshot_at_s", "-1"]),
    "snapshot_inf": ("snapshot_at_s = inf\n" + BASE, ["exp.toml", "snapshot_at_s", "inf"]),
    "snapshot_text": ('snapshot_at_s = "soon"\n' + BASE, ["exp.toml", "snapshot_at_s", "soon"]),
    "snapshot_bool": ("snapshot_at_s = true\n" + BASE, ["exp.toml", "snapshot_at_s", "True"]),
    "quick_snapshot_list": (
        BASE + "[quick]\nsnapshot_at_s = [1]\n",
        ["exp.toml", "quick.snapshot_at_s"],
    ),
    "quick_unknown_key": (BASE + "[quick]\nsett = {}\n", ["exp.toml", "quick", "sett"]),
    "quick_set_not_table": (BASE + "[quick]\nset = 3\n", ["exp.toml", "quick.set", "3"]),
    "quick_grid_scalar": (
        BASE + '[quick.grid]\n"cache.block_size_tokens" = 8\n',
        ["exp.toml", "quick.grid.cache.block_size_tokens"],
    ),
    "unknown_top_key": ("nmae = 'x'\n" + BASE, ["exp.toml", "unknown keys", "nmae"]),
    "name_parent": ('name = "../x"\n' + BASE, ["exp.toml", "name", "'../x'"]),
    "name_deep_parent": ('name = "../../../x"\n' + BASE, ["exp.toml", "name"]),
    "name_empty": ('name = ""\n' + BASE, ["exp.toml", "name", "''"]),
    "name_slash": ('name = "a/b"\n' + BASE, ["exp.toml", "name", "'a/b'"]),
    "name_backslash": ('name = "a\\\\b"\n' + BASE, ["exp.toml", "name"]),
    "name_dot": ('name = "."\n' + BASE, ["exp.toml", "name", "'.'"]),
    "name_reserved_quick": ('name = "quick"\n' + BASE, ["exp.toml", "name", "'quick'"]),
    "name_reserved_plan": ('name = "plan"\n' + BASE, ["exp.toml", "name", "'plan'"]),
    "name_number": ("name = 5\n" + BASE, ["exp.toml", "name", "5"]),
    "name_newline": ('name = "a\\nb"\n' + BASE, ["exp.toml", "name"]),
    "name_too_long": (f'name = "{"a" * 200}"\n' + BASE, ["exp.toml", "name"]),
    "description_number": ("description = 5\n" + BASE, ["exp.toml", "description", "5"]),
    "analysis_number": ("analysis = 3\n" + BASE, ["exp.toml", "analysis", "3"]),
    "base_date": (BASE + "[base.extra]\nwhen = 1979-05-27\n", ["exp.toml", "base.extra.when"]),
    "base_inf": (
        BASE.replace("kv_cache_gib = 2.0", "kv_cache_gib = inf"),
        ["exp.toml", "base.cache.kv_cache_gib", "finite"],
    ),
    "grid_date": (BASE + '[grid]\n"seed" = [1979-05-27]\n', ["exp.toml", "grid.seed[0]"]),
    "grid_too_many_points": (
        BASE
        + "[grid]\n"
        + "".join(f'"x{i}" = [{", ".join(str(v) for v in range(40))}]\n' for i in range(4)),
        ["exp.toml", "2,560,000 points", "100,000"],
    ),
    "every_point_invalid": (
        BASE + '[grid]\n"cache.block_size_tokens" = [0, -1]\n',
        ["exp.toml line 10: no point has a valid config", "cache.block_size_tokens"],
    ),
    "one_point_invalid": (
        BASE + '[grid]\n"cache.block_size_tokens" = [16, 0]\n',
        [
            "exp.toml line 10: point 1 (cache.block_size_tokens=0)",
            "no point was run",
            "cache.block_size_tokens:",
        ],
    ),
    "base_field_invalid": (  # a [base] field's line, not the swept axis's
        BASE.replace("kv_cache_gib = 2.0", "kv_cache_gib = -2.0")
        + '[grid]\n"cache.block_size_tokens" = [16]\n',
        ["exp.toml line 3: no point has a valid config", "cache.kv_cache_gib", "-2.0"],
    ),
    "every_point_bad_preset": (  # line 3: the preset's own line
        'name = "e"\n[base.workload]\npreset = "nosuch"\n',
        ["exp.toml line 3: no point has a valid config", "workload.preset", "nosuch"],
    ),
    "swept_bad_preset": (
        'name = "e"\n[grid]\n"workload.preset" = ["alpaca_like", "nosuch"]\n',
        ["exp.toml line 3: point 1 (workload.preset='nosuch')", "no workload preset 'nosuch'"],
    ),
    "field_on_grid_and_zip": (
        BASE + '[grid]\n"cache.block_size_tokens" = [16]\n'
        '[[zip]]\n"cache.block_size_tokens" = [32, 64]\n',
        ["exp.toml", "zip[0].cache.block_size_tokens", "already swept by grid", "one axis"],
    ),
    "label_on_two_zips": (
        BASE + '[[zip]]\nlabel = ["a", "b"]\nseed = [1, 2]\n'
        '[[zip]]\nlabel = ["c", "d"]\n"cache.block_size_tokens" = [16, 32]\n',
        ["exp.toml", "zip[1].label", "already swept by zip[0]"],
    ),
    "field_on_quick_grid_and_zip": (
        BASE + "[[zip]]\nseed = [1, 2]\n[quick.grid]\nseed = [3]\n",
        ["exp.toml", "zip[0].seed", "already swept by quick.grid"],
    ),
    "analysis_targets_list": (
        BASE + "[analysis]\ntargets = [1]\n",
        ["exp.toml", "analysis.targets", "valid dictionary", "[1]"],
    ),
    "analysis_targets_number": (
        BASE + "[analysis]\ntargets = 5\n",
        ["exp.toml", "analysis.targets", "5"],
    ),
    "analysis_target_text": (
        BASE + '[analysis]\ntargets = { time_to_first_token_seconds_p99 = "abc" }\n',
        [
            "exp.toml line 10: analysis.targets.time_to_first_token_seconds_p99",
            "number",
            "'abc'",
        ],
    ),
    "analysis_target_unknown_metric": (
        BASE + "[analysis]\ntargets = { ttft = 2 }\n",
        ["exp.toml", "analysis.targets", "unknown 'ttft'"],
    ),
    "analysis_vs_unknown_metric": (
        BASE + '[analysis]\nvs_metrics = ["no_such_metric"]\n',
        ["exp.toml", "analysis.vs_metrics", "unknown 'no_such_metric'"],
    ),
    "analysis_vs_number": (
        BASE + "[analysis]\nvs_metrics = [5]\n",
        ["exp.toml", "analysis.vs_metrics[0]", "string", "5"],
    ),
    "analysis_vs_empty": (
        BASE + "[analysis]\nvs_metrics = []\n",
        ["exp.toml", "analysis.vs_metrics", "at least 1"],
    ),
    "analysis_vs_text": (
        BASE + '[analysis]\nvs_metrics = "ttft"\n',
        ["exp.toml", "analysis.vs_metrics", "list", "'ttft'"],
    ),
    "analysis_unknown_key": (
        BASE + '[analysis]\nvs_metric = ["num_preemptions"]\n',
        ["exp.toml", "analysis.vs_metric", "not permitted"],
    ),
    "analysis_bracket_reversed": (
        BASE + "[analysis]\nrate_bracket = [20.0, 0.5]\n",
        ["exp.toml", "analysis.rate_bracket", "lo < hi", "[20.0, 0.5]"],
    ),
    "not_utf8": (b'name = "\xff"\n', ["exp.toml line 1", "not UTF-8", "0xff"]),
    "invalid_toml": ("name = \n", ["exp.toml", "invalid TOML"]),
    "empty": ("# nothing yet\n", ["exp.toml: sets nothing", "expected an experiment"]),
}


@pytest.mark.parametrize("case", sorted(EXPERIMENTS))
def test_bad_experiment(hostile, case: str) -> None:
    content, expected = EXPERIMENTS[case]
    path = hostile.write("exp.toml", content)
    hostile.run(["sweep", path, "--out", "out", "--no-progress"], *expected)


def test_a_quick_points_invalid_field_is_blamed_on_its_quick_line(hostile) -> None:
    # lines 9-12: [grid], seed = [1], [quick], set = {...}: --quick's value is at fault, not
    # [base]'s (line 8, which the full run uses)
    path = hostile.write(
        "exp.toml", BASE + '[grid]\nseed = [1]\n[quick]\nset = { "workload.num_requests" = 0 }\n'
    )
    args = ["sweep", path, "--quick", "--out", "out", "--no-progress"]
    hostile.run(args, "exp.toml line 12: no point has a valid config", "workload.num_requests")


def test_absolute_name_outside_the_root(hostile) -> None:
    target = hostile.root / "abs"
    path = hostile.write("exp.toml", f'name = "{target}"\n' + BASE)
    hostile.run(["sweep", path, "--out", "out", "--no-progress"], "name", str(target))
    assert not target.exists()


def test_experiment_paths(hostile) -> None:
    folder = hostile.cwd / "dir.toml"
    folder.mkdir()
    hostile.run(["sweep", folder, "--no-progress"], "dir.toml", "folder")
    hostile.run(["sweep", "no-such-experiment", "--no-progress"], "no-such-experiment")
    dots = hostile.write("..toml", BASE)
    hostile.run(["sweep", dots, "--out", "out", "--no-progress"], "name", "'.'")


def test_workload_preset_not_utf8(hostile) -> None:
    preset = hostile.write("wl.toml", b'[workload]\nname = "\xff"\n')
    path = hostile.write("exp.toml", f'name = "e"\n[base.workload]\npreset = "{preset}"\n')
    hostile.run(["sweep", path, "--out", "out", "--no-progress"], "wl.toml", "not UTF-8")


PLAN = """
name = "{name}"
[base.cache]
kv_cache_gib = 2.0
[question]
field = "cache.kv_cache_gib"
targets = {{ time_to_first_token_seconds_p99 = 2 }}
"""

# id: (plan TOML, extra CLI arguments, fragments of the error line). PLAN's lines: 1 blank,
# 2 name, 3 [base.cache], 4 kv_cache_gib, 5 [question], 6 field, 7 targets
PLANS: dict[str, tuple[str | bytes, list[str], list[str]]] = {
    "name_parent": (PLAN.format(name="../../evil"), [], ["plan name", "'../../evil'"]),
    "name_absolute": (PLAN.format(name="/tmp/evil"), [], ["plan name", "'/tmp/evil'"]),
    "set_not_table": ("set = 3\n" + PLAN.format(name="p"), [], ["plan.toml line 1: [set]", "3"]),
    "question_unknown_key": (
        PLAN.format(name="p") + "set = 3\n",
        [],
        ["plan.toml line 8: [question]", "'set'"],
    ),
    "question_not_table": (
        'name = "p"\nquestion = "kv"\n',
        [],
        ["plan.toml line 2: [question]", "'kv'"],
    ),
    "lo_above_hi": (PLAN.format(name="p") + "", ["--lo", "5", "--hi", "1"], ["lo", "hi"]),
    "hi_infinite": (PLAN.format(name="p"), ["--hi", "inf"], ["hi", "expected a finite", "inf"]),
    "direction_unknown": (  # (was blamed on the knob's natural direction)
        PLAN.format(name="p").replace("[question]\n", '[question]\ndirection = "sideways"\n'),
        [],
        ["plan.toml line 6: direction: expected 'smallest' or 'largest'", "'sideways'"],
    ),
    "set_unknown_field": (  # (was blamed on the knob: "'cache.kv_cache_gib' is not a field")
        PLAN.format(name="p") + '[set]\n"cache.blok" = 1\n',
        ["--quick"],
        ["plan.toml line 9: cache.blok", "Extra inputs", "1"],
    ),
    "resolution_zero": (PLAN.format(name="p"), ["--resolution", "0"], ["resolution", "0"]),
    "resolution_nan": (PLAN.format(name="p"), ["--resolution", "nan"], ["resolution", "nan"]),
    "experiment_escape": (
        'name = "p"\nexperiment = "../../x"\n[question]\nfield = "cache.kv_cache_gib"\n',
        [],
        ["experiment", "'../../x'"],
    ),
    "experiment_unknown": (
        'name = "p"\nexperiment = "nosuch"\n[question]\nfield = "cache.kv_cache_gib"\n',
        [],
        ["plan.toml line 2: experiment", "'nosuch'"],
    ),
    "experiment_number": (
        'name = "p"\nexperiment = 5\n[question]\nfield = "cache.kv_cache_gib"\n',
        [],
        ["plan.toml line 2: experiment", "5"],
    ),
    "target_text": (
        PLAN.format(name="p").replace("= 2 }", '= "low" }'),
        [],
        ["plan.toml line 7: [question] targets", "low"],
    ),
    "unknown_top_level_key": (  # (read as a config before: "say what to find")
        "foo = 1\n" + PLAN.format(name="p"),
        [],
        ["plan.toml line 1: unknown keys ['foo']", "'question'"],
    ),
    "quick_set_invalid": (  # blamed on the bracket's end before (--hi); line 9: the set
        PLAN.format(name="p") + '[quick]\nset = { "workload.duration_s" = -1 }\n',
        ["--quick"],
        [
            "plan.toml line 9: the plan's [quick] set is invalid whatever cache.kv_cache_gib",
            "workload.duration_s",
            "-1",
        ],
    ),
    "base_invalid": (
        PLAN.format(name="p").replace(
            "kv_cache_gib = 2.0", "kv_cache_gib = 2.0\nblock_size_tokens = 0"
        ),
        ["--quick"],
        ["plan's config is invalid whatever cache.kv_cache_gib", "block_size_tokens", "0"],
    ),
    "target_number_in_list": (
        PLAN.format(name="p").replace("{ time_to_first_token_seconds_p99 = 2 }", "[5]"),
        [],
        ["plan.toml line 7: [question] targets", "METRIC<=NUMBER", "'5'"],
    ),
    "target_unknown_metric": (
        PLAN.format(name="p").replace("{ time_to_first_token_seconds_p99 = 2 }", '"ttft<=2"'),
        [],
        ["plan.toml line 7: [question] targets: unknown metric 'ttft'", "_p99"],
    ),
    "unknown_field": (
        PLAN.format(name="p").replace('"cache.kv_cache_gib"', '"cache.kv_cache_tb"'),
        ["--lo", "1", "--hi", "2"],
        ["plan.toml line 6: 'cache.kv_cache_tb' is not a config field"],
    ),
    "not_utf8": (b'name = "\xff"\n', [], ["plan.toml line 1", "not UTF-8"]),
}


@pytest.mark.parametrize("case", sorted(PLANS))
def test_bad_plan(hostile, case: str) -> None:
    content, extra, expected = PLANS[case]
    path = hostile.write("plan.toml", content)
    hostile.run(["plan", path, "--out", "out", *extra], *expected)


TARGET = "time_to_first_token_seconds_p99<=2"
PLAN_ARGS: dict[str, tuple[list[str], list[str]]] = {
    "name_parent": (["--smallest", "kv", "--target", TARGET, "--name", "../x"], ["'../x'"]),
    "both_directions": (
        ["--smallest", "kv", "--largest", "rate", "--target", TARGET],
        ["--smallest", "--largest"],
    ),
    "target_garbage": (["--smallest", "kv", "--target", "fast please"], ["--target"]),
    "target_infinite": (["--smallest", "kv", "--target", "ttft<=inf"], ["--target", "inf"]),
    "target_unknown_metric": (
        ["--smallest", "kv", "--target", "time_to_first_token_p99<=2"],
        ["--target", "time_to_first_token_p99"],
    ),
    "no_question": ([], ["--smallest", "--target"]),
    "unknown_knob": (
        ["--smallest", "nosuch.field", "--target", TARGET, "--lo", "1", "--hi", "2"],
        ["nosuch.field", "not a config field"],
    ),
    "set_unknown_field": (  # (was blamed on the knob: "'cache.kv_cache_gib' is not a field")
        ["--smallest", "kv", "--target", TARGET, "--set", "cache.blok=1"],
        ["--set cache.blok=1", "cache.blok: Extra inputs"],
    ),
    "set_invalid_at_both_ends": (  # (blamed on "the plan's config" without the --set)
        ["--smallest", "kv", "--target", TARGET, "--set", "cache.block_size_tokens=0"],
        ["config with --set cache.block_size_tokens is invalid whatever", "got 0"],
    ),
    "cheapest_replica_override_gpu": (  # (ran an RTX 4090 priced and named as an H100)
        [
            "--cheapest",
            "--target",
            TARGET,
            "--set",
            'fleet.replica_overrides=[{"gpu": "rtx-4090"}]',
        ],
        ["fleet.replica_overrides sets gpu", "--gpus, --tp"],
    ),
    "set_unknown_field_cheapest": (  # (every fleet kind failed alike, in a table)
        ["--cheapest", "--target", TARGET, "--set", "cache.blok=1"],
        ["--set cache.blok=1", "cache.blok: Extra inputs"],
    ),
    "fractional_lo_integer_knob": (
        ["--largest", "max_num_seqs", "--target", TARGET, "--lo", "0.5", "--hi", "3"],
        ["lo (--lo)", "scheduler.max_num_seqs takes whole numbers", "0.5"],
    ),
    "fractional_hi_tp": (
        ["--smallest", "tp", "--target", TARGET, "--hi", "3.7"],
        ["hi (--hi)", "parallel.tensor_parallel_size takes whole numbers", "3.7"],
    ),
    "out_root": (["--smallest", "kv", "--target", TARGET, "--out", "/"], ["--out", "'/'"]),
    "source_missing": (["nosuch.toml", "--smallest", "kv", "--target", TARGET], ["nosuch.toml"]),
    "shipped_plan_other_knob": (
        ["long-outputs-max-num-seqs", "--smallest", "kv", "--target", TARGET],
        ["long-outputs-max-num-seqs asks for", "--smallest/--target", "--name NAME"],
    ),
    "shipped_plan_other_targets": (
        ["bursty-kv", "--target", TARGET],
        ["bursty-kv asks for", "--target asks for", "--name NAME"],
    ),
}


@pytest.mark.parametrize("case", sorted(PLAN_ARGS))
def test_bad_plan_arguments(hostile, case: str) -> None:
    args, expected = PLAN_ARGS[case]
    if "--out" not in args:
        args = [*args, "--out", "out"]
    hostile.run(["plan", *args], *expected)


def test_plan_out_under_a_file(hostile) -> None:
    hostile.write("afile", "x")
    out = Path("afile") / "sub"
    hostile.run(["plan", "--smallest", "kv", "--target", TARGET, "--out", out], "afile")


def test_plot_refuses_an_old_sweeps_bad_analysis_before_drawing(hostile) -> None:
    # a sweep from before [analysis] was checked: its experiment.json holds targets = [1]
    import json

    path = hostile.write("exp.toml", 'name = "e"\n' + BASE)
    hostile.run(["sweep", path, "--out", "out", "--no-progress"], code=0)
    meta_path = hostile.out / "e" / "experiment.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "analysis": {"targets": [1]}}))
    figures = hostile.out / "figs"
    hostile.run(
        ["plot", hostile.out / "e", "--out", figures], "experiment.json", "analysis.targets"
    )
    assert not figures.exists() or not any(figures.iterdir())  # not even the waste bars


def test_a_label_list_naming_two_points_alike_is_warned_about(hostile, caplog) -> None:
    # label "a" twice and "b" once in one zip: 3 points, 2 named alike
    zipped = '[[zip]]\nlabel = ["a", "a", "b"]\n"cache.block_size_tokens" = [16, 32, 64]\n'
    path = hostile.write("exp.toml", 'name = "e"\n' + BASE + zipped)
    hostile.run(["sweep", path, "--out", "out", "--no-progress"], code=0)
    said = [r.getMessage() for r in caplog.records if r.name == "kvsim.study.experiment"]
    assert said == ["zip[0].label: 'a' 2 times; the points it names share a label"]


def test_points_with_one_config_are_counted_in_a_warning(hostile, caplog) -> None:
    # seed 1 twice and seed 2 once: 3 points, 2 configs; point 1 repeats point 0
    path = hostile.write("exp.toml", 'name = "e"\n' + BASE + "[grid]\nseed = [1, 1, 2]\n")
    outcome = hostile.run(["sweep", path, "--out", "out", "--no-progress"], code=0)
    said = [r.getMessage() for r in caplog.records if r.name == "kvsim.study.sweep"]
    assert said == [
        "e: 1 of 3 points repeat an earlier point's config (e.g. point 1 = point 0: the same "
        "values); each config runs once and its row repeats in summary.parquet"
    ]
    assert "3 points in summary.parquet (2 run, 0 resumed, 0 failed)" in outcome.output


def test_a_sweep_prints_its_points_swept_fields_and_metrics(hostile) -> None:
    # 2 points: the swept field's values in order, the experiment's vs_metrics as columns
    analysis = '[analysis]\nvs_metrics = ["num_preemptions", "token_utilization_perc"]\n'
    grid = '[grid]\n"cache.block_size_tokens" = [16, 32]\n'
    path = hostile.write("exp.toml", 'name = "e"\n' + BASE + grid + analysis)
    outcome = hostile.run(["sweep", path, "--out", "out", "--no-progress"], code=0)
    lines = outcome.output.splitlines()
    header = next(line for line in lines if "cache.block_size_tokens" in line)
    assert "num_preemptions" in header
    assert "token_utilization_perc" in header
    assert "time_to_first_token" not in header  # the experiment's metrics, not the defaults
    rows = [line for line in lines if line.startswith("│")]
    assert [row.split("│")[1].strip() for row in rows] == ["16", "32"]


TRACE = "prompt_tokens,output_tokens\n10,5\n12,6\n"


def test_a_relative_trace_beside_an_experiment_or_plan_is_named(hostile) -> None:
    """``sub/exp.toml`` and ``sub/plan.toml`` name ``trace = "t.csv"``, which is ``sub/t.csv``;
    run from ``cwd`` the path is read from there (as ``kvsim run`` reads a config's): each error
    names the line (5: ``trace``) and the file beside it, as ``kvsim run`` does (a sweep said
    only "no such trace")."""
    hostile.write("sub/t.csv", TRACE)
    workload = '[base.workload]\ntrace = "t.csv"\nsample = "replay"\n'
    exp = hostile.write("sub/exp.toml", 'name = "e"\n[base]\nmodel = "opt-13b"\n' + workload)
    expected = ["exp.toml line 5: workload.trace = 't.csv'", "current folder", "sub/t.csv"]
    hostile.run(["sweep", exp, "--out", "out", "--no-progress"], *expected)
    plan = hostile.write(
        "sub/plan.toml",
        'name = "p"\n[base]\nmodel = "opt-13b"\n'
        + workload
        + '[question]\nfield = "cache.kv_cache_gib"\n'
        + "targets = { time_to_first_token_seconds_p99 = 2 }\n",
    )
    hostile.run(["plan", plan, "--out", "out"], "plan.toml line 5: workload.trace", "sub/t.csv")


def test_a_relative_trace_swept_by_a_grid_is_named(hostile) -> None:
    """A grid of traces named beside ``sub/exp.toml`` (line 6: the axis) is read from ``cwd``
    as the base's trace is: the error names the line and the file beside it."""
    hostile.write("sub/t.csv", TRACE)
    exp = hostile.write(
        "sub/exp.toml",
        'name = "e"\n[base]\nmodel = "opt-13b"\nworkload = { sample = "replay" }\n'
        '[grid]\n"workload.trace" = ["t.csv"]\n',
    )
    expected = ["exp.toml line 6: workload.trace = 't.csv'", "current folder", "sub/t.csv"]
    hostile.run(["sweep", exp, "--out", "out", "--no-progress"], *expected)
