"""The command line: clear errors without tracebacks, a summary table, results on disk."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from kvsim.cli import app

runner = CliRunner()


def test_bad_config_value_is_one_clear_line(tmp_path):
    result = runner.invoke(app, ["run", "--set", "cache.block_size_tokens=0", "--no-progress"])
    assert result.exit_code == 2
    assert "cache.block_size_tokens" in result.output
    assert "got 0" in result.output
    assert "Traceback" not in result.output


def test_bad_toml_and_missing_file(tmp_path):
    bad = tmp_path / "x.toml"
    bad.write_text("[cache]\nallocator = 'nope'\n")
    result = runner.invoke(app, ["run", str(bad)])
    assert result.exit_code == 2
    assert "unknown allocator 'nope'" in result.output
    result = runner.invoke(app, ["run", str(tmp_path / "missing.toml")])
    assert result.exit_code == 2
    assert "missing.toml" in result.output
    assert "Traceback" not in result.output


def test_malformed_trace_line_is_reported(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,12,3\n2023-11-16 18:15:47.0,abc,3\n"
    )
    result = runner.invoke(
        app,
        [
            "run",
            "--set",
            f"workload.trace={trace}",
            "--set",
            "workload.arrival=trace",
            "--no-progress",
        ],
    )
    assert result.exit_code == 2
    assert "line 3" in result.output
    assert "ContextTokens" in result.output
    assert "'abc'" in result.output


def test_run_prints_summary_and_writes_results(tmp_path):
    out = tmp_path / "res"
    result = runner.invoke(
        app,
        [
            "run",
            "--set",
            "workload.num_requests=60",
            "--set",
            "cache.allocator=buddy",
            "--set",
            "cache.reservation=oracle",
            "--out",
            str(out),
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "token states (% of KV)" in result.output
    assert "buddy/oracle" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_requests"] == 60
    assert (out / "requests.parquet").exists()
    assert (out / "memory.parquet").exists()


def test_presets_lists_models():
    result = runner.invoke(app, ["presets"])
    assert result.exit_code == 0
    assert "opt-13b" in result.output
    assert "800" in result.output


@pytest.mark.parametrize(
    ("args", "listed"), [(["presets"], "mooncake_conversation"), (["plan", "--list"], "bursty-kv")]
)
def test_preset_lists_wrap_their_descriptions_when_piped(args, listed, monkeypatch):
    # piped (no terminal, no COLUMNS), tables print as wide as they need; a description in one
    # cell made the workloads table 320 columns wide. A description cell now holds at most 80
    # characters a line (PROSE_WIDTH), and every line fits the 120 columns kvsim logs at
    from kvsim.cli.presets import PROSE_WIDTH

    monkeypatch.delenv("COLUMNS", raising=False)
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert listed in result.output
    cells = [c.strip() for line in result.output.splitlines() for c in line.split("│")[2:3]]
    assert cells, result.output  # (the second column of each row: the description)
    assert max(len(c) for c in cells) <= PROSE_WIDTH, max(cells, key=len)
    widest = max(result.output.splitlines(), key=len)
    assert len(widest) <= 120, widest


def test_presets_show_each_models_sliding_and_state_layers():
    from kvsim.cli.presets import _models

    table = _models()
    cells = {c.header: list(c.cells) for c in table.columns}
    rows = {name: i for i, name in enumerate(cells["name"])}
    # Gemma-3-27B: every 6th of 62 layers global, so 62 - 10 = 52 sliding, 1,024-token window;
    # Qwen3-Next: every 4th of 48 layers full attention, so 36 linear-attention (state) layers
    assert cells["sliding (window)"][rows["gemma-3-27b"]] == "52 (1,024)"
    assert cells["state"][rows["qwen3-next-80b-a3b"]] == "36"
    assert cells["sliding (window)"][rows["llama-3.1-8b"]] == "-"


def test_preset_description_is_a_whole_sentence_across_comment_lines(tmp_path):
    from kvsim.cli.presets import _first_comment

    path = tmp_path / "w.toml"
    path.write_text("# Beam search: width 4 (one parameter,\n# FITTED on width 4). More.\nx = 1\n")
    assert _first_comment(path) == "Beam search: width 4 (one parameter, FITTED on width 4)."


def test_run_counts_rejected_requests_and_strict_fails(tmp_path):
    # a 3,000-token prompt of a trace cannot run on OPT-13B (max_model_len 2,048)
    trace = tmp_path / "t.csv"
    trace.write_text("input_len,output_len\n3000,10\n100,10\n200,10\n")
    args = [
        "run",
        "--no-progress",
        "--set",
        f"workload.trace={trace}",
        "--set",
        "workload.sample=replay",
        "--out",
        str(tmp_path / "out"),
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["num_requests_rejected"] == 1
    assert summary["num_requests"] == 2
    assert "3 requests (2 run, 1 rejected)" in " ".join(result.output.split())  # the header
    strict = runner.invoke(app, [*args[:-2], "--strict"])
    assert strict.exit_code == 2
    assert "1 of 3 requests cannot run: 1 longer than max_model_len = 2,048" in strict.output
    assert "skipped" not in strict.output


def test_the_library_reaches_a_result_in_three_lines():
    import kvsim
    from kvsim import config_from_dict, simulate

    results = simulate(config_from_dict({"workload": {"num_requests": 20}}))
    assert results.summary["num_requests"] == 20
    assert kvsim.__version__
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        kvsim.nope  # noqa: B018


def test_reproduce_help_names_every_reproduction():
    from kvsim.study.paper import REPRODUCTIONS

    result = runner.invoke(app, ["reproduce", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    for name in REPRODUCTIONS:
        assert f"{name}," in text or f"{name}." in text or f"{name} (" in text, name


def test_data_list_without_a_data_folder_says_where_it_looked(monkeypatch, tmp_path):
    missing = tmp_path / "nowhere"
    monkeypatch.setenv("KVSIM_DATA", str(missing))
    result = runner.invoke(app, ["data", "list"])
    assert result.exit_code == 0, result.output
    assert f"none found; looked in KVSIM_DATA={missing} (not a directory)" in result.output


def test_set_of_a_preset_applies_before_its_fields_in_any_order(tmp_path):
    # --set workload.num_requests=... before --set workload=sharegpt_like ran the preset's 1,000
    config = tmp_path / "some.toml"
    config.write_text("[cache]\nkv_cache_gib = 2.0\n")
    fields = ["--set", "workload.num_requests=5", "--set", "workload.rate_per_s=100"]
    preset = ["--set", "workload=sharegpt_like"]
    for i, sets in enumerate(([*fields, *preset], [*preset, *fields])):
        out = tmp_path / f"out{i}"
        args = ["run", str(config), *sets, "--out", str(out), "--no-progress", "--map-frames", "0"]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        workload = json.loads((out / "config.json").read_text())["workload"]
        assert (workload["num_requests"], workload["rate_per_s"]) == (5, 100)
        assert workload["lengths"] == "sharegpt_like"
        assert json.loads((out / "summary.json").read_text())["num_requests"] == 5


def test_an_error_an_override_causes_names_the_override_not_the_file(tmp_path):
    config = tmp_path / "base.toml"
    config.write_text("[scheduler]\nmax_num_seqs = 1024\n")
    result = runner.invoke(
        app, ["run", str(config), "--set", "scheduler.max_num_batched_tokens=512"]
    )
    assert result.exit_code == 2
    error = " ".join(result.output.split())
    assert error.startswith(
        f"error: {config} with --set scheduler.max_num_batched_tokens=512: "
        "scheduler.max_num_batched_tokens (512) must be >= max_num_seqs (1024)"
    )


def test_two_pairs_after_one_set_say_each_needs_its_own_set(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["run", "--set", "seed=1", "cache.kv_cache_gib=4"])
    assert result.exit_code == 2
    error = " ".join(result.output.split())
    assert "'cache.kv_cache_gib=4' is no file but reads as a KEY=VALUE override" in error
    assert "each override needs its own --set" in error
    assert "Traceback" not in result.output
    # a config file whose name reads as KEY=VALUE is still a config file
    (tmp_path / "kv=4.toml").write_text("[workload]\nnum_requests = 3\n")
    result = runner.invoke(app, ["run", "kv=4.toml", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "3 requests" in result.output


@pytest.mark.parametrize("command", ["run", "plan"])
def test_help_is_whole_at_80_columns(command):
    # the --set example was cut to "cache.block_size_token…" at 80 columns
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    assert max(len(line) for line in result.output.splitlines()) <= 80
    assert "…" not in result.output
    assert "--set" in result.output


@pytest.mark.parametrize("command", ["plan", "report", "calibrate"])
def test_help_paragraphs_fill_their_lines_at_80_columns(command):
    # the docstring's line breaks were kept and each line wrapped again at 80 columns:
    # "fig12-alpaca (its" / "Alpaca" / "panels), ..."; a paragraph's lines before its last now
    # reach within a word of the width (each frame line is 80 wide with its margins)
    result = runner.invoke(app, [command, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0
    prose = result.output.split("╭")[0].splitlines()  # the help text above the option boxes
    paragraphs: list[list[str]] = [[]]
    for line in prose[3:]:  # (after the usage line)
        if line.strip():
            paragraphs[-1].append(line.rstrip())
        elif paragraphs[-1]:
            paragraphs.append([])
    lines = [line for paragraph in paragraphs for line in paragraph[:-1]]
    assert lines, result.output
    assert all(len(line) >= 80 - 2 - 16 for line in lines), lines  # (no word near 16 letters)


def test_version_prints_the_installed_package_version():
    from importlib.metadata import version

    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"kvsim {version('kvsim')}\n"


def _commands(group, path=()):
    """Every command path of the app: ("run",), ("data", "fetch"), ..."""
    import typer.main

    click_group = typer.main.get_command(group) if not hasattr(group, "commands") else group
    for name, command in click_group.commands.items():
        yield (*path, name)
        if hasattr(command, "commands"):
            yield from _commands(command, (*path, name))


def test_h_is_help_on_every_command():
    paths = [(), *_commands(app)]
    assert ("data", "fetch") in paths  # the nested group's commands too
    for path in paths:
        short = runner.invoke(app, [*path, "-h"], env={"COLUMNS": "100"})
        long = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "100"})
        assert short.exit_code == 0, (path, short.output)
        assert short.output == long.output, path
        assert "Usage:" in short.output


def test_flags_show_no_type_in_help():
    """An on/off flag takes no value: typer's ``<bool>`` label beside it read as if it did
    (``--debug <bool>``). Options that take a value keep their type."""
    for path in [(), *_commands(app)]:
        result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "120"})
        assert "<bool>" not in result.output, (path, result.output)
    result = runner.invoke(app, ["reproduce", "--help"], env={"COLUMNS": "120"})
    assert "N [x>=1]" in result.output  # --jobs: its value and range


# Llama-3.1-8B on an H100-80GB at gpu_memory_utilization 0.222: 0.222 x 81,089 MiB - 8.03e9
# params x 2 B - 2 GiB of activation headroom = 668,727,748 B of KV = 0.623 GiB, / 128 KiB per
# token = 5,101 slots = 318 blocks of 16 (5,088 slots) + 13 slots no block holds.
SMALL_H100 = {
    "model": "llama-3.1-8b",
    "gpu": "h100-80gb",
    "cache": {"gpu_memory_utilization": 0.222},
    "scheduler": {"max_model_len": 4096},
}


# SMALL_H100's derived budget: 0.222 x 79.19 GiB = 17.58 GiB, less Llama-3.1-8B's 16.06e9 B
# (14.96 GiB) of weights and 2 GiB of headroom: 0.623 GiB
SMALL_BUDGET = ": 0.222 x 79.2 GiB less 15.0 GiB of weights and 2.0 GiB of activation headroom"
SMALL_POOL = "5,101 KV slots of 128 KiB (0.623 GiB per GPU" + SMALL_BUDGET


@pytest.mark.parametrize(
    ("engine", "cache", "pool"),
    [
        (  # vLLM v1 reserves block 0 as its null block (BlockPool)
            "vllm-v1",
            {},
            "5,101 KV slots of 128 KiB (0.623 GiB per GPU"
            + SMALL_BUDGET
            + "): 318 blocks of 16 tokens (5,088 slots; 13 slots "
            "in no block; block 0 is vLLM v1's null block)",
        ),
        (
            "vllm-v0",
            {},
            "5,101 KV slots of 128 KiB (0.623 GiB per GPU"
            + SMALL_BUDGET
            + "): 318 blocks of 16 tokens (5,088 slots; 13 slots "
            "in no block)",
        ),
        (
            "vllm-v0",
            {"block_size_tokens": 1},
            SMALL_POOL + "): 5,101 blocks of 1 token",
        ),
        (
            "vllm-v1",
            {"allocator": "first_fit"},
            SMALL_POOL + ")",
        ),
        (
            "vllm-v1",
            {"allocator": "buddy"},
            SMALL_POOL + ")",
        ),
        (
            "vllm-v1",
            {"allocator": "radix"},
            SMALL_POOL + ")",
        ),
    ],
)
def test_run_header_pool_arithmetic_holds(engine, cache, pool):
    from kvsim.cli.run import pool_text
    from kvsim.config import config_from_dict

    data = {**SMALL_H100, "cache": {**SMALL_H100["cache"], **cache}}
    cfg = config_from_dict({**data, "scheduler": {**data["scheduler"], "engine": engine}})
    assert cfg.capacity_tokens == 5_101
    assert pool_text(cfg) == pool


def test_run_header_gives_a_state_groups_raised_block_size():
    # Qwen3-Next at TP 2: a token's K and V in one layer 2 x 1 head x 256 x 2 B = 1,024 B; groups
    # of 12 layers (1 full + 3 state): a slot is 12 x 1,024 = 12,288 B; a state layer's
    # 1,097,728 / 2 = 548,864 B page needs cdiv(548864, 1024) = 536 -> 544 tokens a block (not
    # the configured 16). 1 GiB / 12,288 B = 87,381 slots = 160 blocks of 544 (87,040) + 341
    from kvsim.cli.run import pool_text
    from kvsim.config import config_from_dict

    cfg = config_from_dict(
        {
            "model": "qwen3-next-80b-a3b",
            "gpu": "h200",
            "parallel": {"tensor_parallel_size": 2},
            "cache": {"kv_cache_gib": 1.0},
            "scheduler": {"max_model_len": 8192},
        }
    )
    assert pool_text(cfg) == (
        "87,381 KV slots of 12 KiB (1.0 GiB per GPU) in 4 KV cache groups of 12 layers: 160 "
        "blocks of 544 tokens (87,040 slots; 341 slots in no block; block 0 is vLLM v1's null "
        "block)"
    )


def test_run_header_names_an_fp8_kv_cache():
    # Llama-3.1-8B's K and V in fp8: 32 layers x 8 heads x 128 x 2 x 1 B = 64 KiB a slot (the
    # header said 128 KiB's pool arithmetic without naming the dtype): 0.25 GiB / 64 KiB = 4,096
    from kvsim.cli.run import pool_text
    from kvsim.config import config_from_dict

    cfg = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "cache": {"kv_cache_gib": 0.25, "kv_cache_dtype": "fp8"},
            "scheduler": {"max_model_len": 4080},
        }
    )
    assert pool_text(cfg).startswith("4,096 KV slots of 64 KiB in fp8 (0.25 GiB per GPU)")


def test_run_header_says_one_request_and_a_quarter_gib():
    # 0.25 GiB / 128 KiB per token = 2,048 slots = 128 blocks of 16, 127 of them usable by
    # requests under v1 (block 0 is the null block): max_model_len at most 2,032
    args = ["run", "--no-progress", "--set", "model=llama-3.1-8b", "--set", "gpu=h100-80gb"]
    args += ["--set", "cache.kv_cache_gib=0.25", "--set", "scheduler.max_model_len=2032"]
    args += ["--set", "workload.num_requests=1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "2,048 KV slots of 128 KiB (0.25 GiB per GPU): 128 blocks of 16 tokens" in text
    assert result.output.splitlines()[0].endswith(", 1 request")  # the header's first line
    assert result.output.splitlines()[1] == (  # its second: the default workload
        "workload: sharegpt_like lengths, Poisson arrivals at 1 req/s"
    )
    assert result.output.splitlines()[2].startswith("KV pool: 2,048 KV slots")  # its third


def test_run_header_names_the_drafter():
    # Llama-3.1-8B's EAGLE head by default: (8.03e9 - 2 x 128,256 x 4,096) / 32 + 2 x 4,096**2
    # = 251,658,396 parameters, 0.252 B; the header said nothing of speculation
    args = ["run", "--no-progress", "--set", "model=llama-3.1-8b", "--set", "gpu=h100-80gb"]
    args += ["--set", "workload.num_requests=2", "--set", "speculative.num_speculative_tokens=3"]
    args += ["--set", "speculative.acceptance_rate=0.7"]
    eagle = runner.invoke(app, args)
    assert eagle.exit_code == 0, eagle.output
    first = eagle.output.splitlines()[0]
    assert "; EAGLE-style drafts k = 3 (drafter 0.252 B parameters), 2 requests" in first
    ngram = runner.invoke(app, [*args, "--set", "speculative.method=ngram"])
    assert "; n-gram drafts k = 3, 2 requests" in ngram.output.splitlines()[0]


def test_run_header_gives_the_pool_each_replica_runs():
    # a replica's own 0.25 GiB is 2,048 slots = 128 blocks of 16 (the others' 0.5 GiB: 256);
    # the header showed the base config's pool however the replicas overrode it
    args = ["run", "--no-progress", "--set", "model=llama-3.1-8b", "--set", "gpu=h100-80gb"]
    args += ["--set", "cache.kv_cache_gib=0.5", "--set", "scheduler.max_model_len=2032"]
    args += ["--set", "workload.num_requests=4"]
    override = 'fleet.replica_overrides=[{"cache": {"kv_cache_gib": 0.25}}]'
    one = runner.invoke(app, [*args, "--set", "fleet.replicas=1", "--set", override])
    assert one.exit_code == 0, one.output
    assert "; 1 replica, round_robin router" in one.output.splitlines()[0]
    assert one.output.splitlines()[2].startswith(
        "KV pool (the replica's): 2,048 KV slots of 128 KiB (0.25 GiB per GPU): 128 blocks of 16 "
    )
    three = runner.invoke(app, [*args, "--set", "fleet.replicas=3", "--set", override])
    assert three.exit_code == 0, three.output
    lines = three.output.splitlines()
    assert lines[2].startswith(
        "KV pool (replica 0): 2,048 KV slots of 128 KiB (0.25 GiB per GPU): 128 "
    )
    assert lines[3].startswith(
        "KV pool (replicas 1-2): 4,096 KV slots of 128 KiB (0.5 GiB per GPU): 256 "
    )


def test_run_header_says_where_a_derived_budget_comes_from():
    # Llama-3.1-8B on an H100: 0.9 x 79.19 GiB = 71.27 GiB, less 8.03e9 x 2 B = 16,060,000,000
    # B (14.96 GiB) of weights and 2 GiB of headroom: 54.31 GiB for KV. An explicit budget says
    # only its size.
    from kvsim.cli.run import pool_text
    from kvsim.config import config_from_dict

    base = {"model": "llama-3.1-8b", "gpu": "h100-80gb", "scheduler": {"max_model_len": 8192}}
    assert (
        "(54.3 GiB per GPU: 0.9 x 79.2 GiB less 15.0 GiB of weights and 2.0 GiB of activation "
        "headroom)"
    ) in pool_text(config_from_dict(base))
    explicit = pool_text(config_from_dict({**base, "cache": {"kv_cache_gib": 4}}))
    assert "(4.0 GiB per GPU)" in explicit


@pytest.mark.parametrize(
    ("workload", "text"),
    [
        ({}, "sharegpt_like lengths, Poisson arrivals at 1 req/s"),
        (
            {"lengths": "fixed", "fixed_prompt_tokens": 1000, "arrival": "gamma", "cv": 2.0},
            "fixed lengths: 1,000-token prompts, 128 output tokens, gamma arrivals at 1 req/s "
            "(cv 2)",
        ),
        (
            {"name": "chat", "num_turns": 4, "turn_gap_s": 20.0, "shared_prefix_tokens": 128},
            # the arrivals start conversations: 1 a second of 4 requests each = 4 req/s
            "chat: sharegpt_like lengths, Poisson arrivals at 1 conversations/s (4 requests "
            "each: 4 req/s), 4 turns 20 s apart, a 128-token shared prefix",
        ),
        ({"max_concurrency": 8, "n": 2}, "sharegpt_like lengths, n = 2"),  # (the loop: line 1)
        (  # a preset named as its lengths or its trace is not named twice
            {"name": "sharegpt_like", "rate_per_s": 2.0},
            "sharegpt_like lengths, Poisson arrivals at 2 req/s",
        ),
    ],
)
def test_run_header_names_the_workload(workload, text):
    from kvsim.cli.run import workload_text
    from kvsim.workload import WorkloadSpec

    assert workload_text(WorkloadSpec.model_validate(workload)) == text


def test_a_plans_rate_of_a_multi_turn_workload_counts_conversations():
    from kvsim.cli.run import workload_text
    from kvsim.study.plan import plan_from_dict
    from kvsim.workload import WorkloadSpec

    question = {"field": "workload.rate_per_s", "hi": 8.0, "targets": {"num_preemptions": 0}}
    chat = plan_from_dict("c", {"workload": {"num_turns": 3}}, question)
    assert chat.knob_label() == "conversation rate (conversations/s, 3 requests each)"
    assert plan_from_dict("r", {}, question).knob_label() == "request rate (req/s)"
    spec = WorkloadSpec(num_turns=3)
    assert workload_text(spec, "the rate tried") == (
        "sharegpt_like lengths, Poisson arrivals at the rate tried, in conversations/s "
        "(3 requests each), 3 turns 30 s apart"
    )


def test_run_header_describes_a_trace_file_as_it_was_read(tmp_path):
    # a trace file's arrivals are known only once it is read (workload.arrival unset): one with
    # arrival_time_s replays them, every row; one without gives lengths at Poisson 1 req/s. The
    # header said "resampled, the trace's arrival times" for both
    timed, lengths = tmp_path / "timed.csv", tmp_path / "lengths.csv"
    timed.write_text("arrival_time_s,prompt_tokens,output_tokens\n0,10,5\n1,20,5\n")
    lengths.write_text("prompt_tokens,output_tokens\n10,5\n20,5\n")
    lines = {}
    for trace in (timed, lengths):
        args = ["run", "--no-progress", "--set", f"workload.trace={trace}"]
        result = runner.invoke(app, [*args, "--set", "workload.num_requests=2"])
        assert result.exit_code == 0, result.output
        lines[trace.stem] = result.output.splitlines()[1]
    assert lines["timed"] == f"workload: trace {timed}, the trace's arrival times"
    assert lines["lengths"] == (
        f"workload: trace {lengths}, resampled, Poisson arrivals at 1 req/s"
    )


def test_run_header_says_a_drafter_came_out_of_the_derived_budget():
    """A derived budget loses the drafter's weights (2e9 parameters x 2 bytes = 4e9 bytes on
    one GPU: 4e9 / 131,072 B a token = 30,517.6 -> 30,517 or 30,518 slots fewer), and the
    header says why; an explicit budget does not move and says nothing. A drafter with KV
    layers (an EAGLE head's one, by default) is named in every slot."""
    from kvsim.cli.run import pool_text
    from kvsim.config import config_from_dict

    base = {"model": "llama-3.1-8b", "gpu": "h100-80gb", "scheduler": {"max_model_len": 8192}}
    spec = {
        "num_speculative_tokens": 3,
        "acceptance_rate": 0.7,
        "draft_num_params": 2 * 10**9,
        "draft_num_kv_layers": 0,  # weights only, so the slots stay 131,072 B
    }
    plain, drafted = config_from_dict(base), config_from_dict({**base, "speculative": spec})
    assert plain.capacity_tokens - drafted.capacity_tokens in (30_517, 30_518)
    assert "of weights (a drafter's 2,000,000,000 parameters included) and" in pool_text(drafted)
    assert "drafter" not in pool_text(plain)
    explicit = config_from_dict({**base, "speculative": spec, "cache": {"kv_cache_gib": 4}})
    assert "drafter" not in pool_text(explicit)
    # 4 GiB / (33 layers x 4,096 B = 132 KiB) = 31,775 slots
    del spec["draft_num_kv_layers"]
    eagle = config_from_dict({**base, "speculative": spec, "cache": {"kv_cache_gib": 4}})
    assert pool_text(eagle).startswith(
        "31,775 KV slots of 132 KiB (4.0 GiB per GPU, 1 drafter layer in every"
    )


def test_run_header_names_the_kv_cache_groups_a_drafter_layer_joins():
    """Under hybrid groups a slot is one token of one group: Gemma-3-27B with an EAGLE head has
    10 + 1 full layers beside 52 sliding ones, 6 groups of 11 layers (kvsim.config.layers), a
    slot 11 x 8,192 B = 90,112 B (88 KiB): 8 GiB / 90,112 B = 95,325.1 -> 95,325 slots."""
    from kvsim.cli.run import pool_text
    from kvsim.config import config_from_dict

    cfg = config_from_dict(
        {
            "model": "gemma-3-27b",
            "gpu": "h100-80gb",
            "cache": {"kv_cache_gib": 8},
            "scheduler": {"max_model_len": 8192},
            "speculative": {"num_speculative_tokens": 3, "acceptance_rate": 0.7},
        }
    )
    assert pool_text(cfg).startswith(
        "95,325 KV slots of 88 KiB (8.0 GiB per GPU, 1 drafter layer in the full-attention "
        "groups) in 6 KV cache groups of 11 layers"
    )


def test_a_fleets_replica_table_keeps_every_header_whole_off_a_terminal(monkeypatch):
    # off a terminal the console is 120 columns wide; the replica table's ten columns need
    # more, and rich then wrapped "prefix hit rate" over two lines
    monkeypatch.delenv("COLUMNS", raising=False)
    result = runner.invoke(
        app,
        [
            "run",
            "--set",
            "fleet.replicas=3",
            "--set",
            "fleet.prefill_replicas=1",
            "--set",
            "workload.num_requests=30",
            "--no-progress",
        ],
    )
    assert result.exit_code == 0, result.output
    header = next(line for line in result.output.splitlines() if "┃ replica ┃" in line)
    for name in ("TTFT p99", "TPOT p99", "KV usage", "preemptions", "prefix hit rate"):
        assert name in header


def test_a_sweep_table_keeps_to_a_columns_the_user_set_with_its_headers_whole(monkeypatch):
    # piped with COLUMNS=80 the table was printed as wide as it needed (COLUMNS ignored), and
    # at 80 columns rich cut the long dotted headers to "offload.k…"
    import io

    import pandas as pd
    from rich.console import Console

    from kvsim.cli import common
    from kvsim.view.summary import sweep_table

    table = pd.DataFrame(
        {
            "offload.kv_offloading_size": [0.0, 64.0],
            "offload.link_bandwidth_bytes_per_s": [25.6e9, 25.6e9],
            "token_states_pct": [94.2, 94.1],
            "time_to_first_token_seconds_p99": [43.4, 41.4],
            "request_time_per_output_token_seconds_p99": [0.15, 0.15],
            "num_preemptions": [47, 48],
        }
    )
    swept = ["offload.kv_offloading_size", "offload.link_bandwidth_bytes_per_s"]
    metrics = [c for c in table.columns if c not in swept]

    def printed(env_columns: str | None) -> list[str]:
        out = io.StringIO()
        if env_columns is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", env_columns)
        # (the console's width as kvsim's start sets it: COLUMNS when a number, else 120)
        width = int(env_columns) if (env_columns or "").isdigit() else 120
        monkeypatch.setattr(common, "console", Console(file=out, width=width, soft_wrap=True))
        common.print_whole(sweep_table(table, swept, metrics, "offload"))
        return out.getvalue().splitlines()

    narrow = printed("80")
    assert max(len(line) for line in narrow) <= 80
    assert "…" not in "".join(narrow)
    # each header whole, folded over lines: its column's header cells rejoined
    head = narrow[narrow.index(next(r for r in narrow if r.startswith("┏"))) + 1 :]
    head = head[: head.index(next(r for r in head if r.startswith("┡")))]
    columns = ["".join(c) for c in zip(*(r.split("┃")[1:-1] for r in head), strict=True)]
    rejoined = ["".join(cell.split()) for cell in columns]
    assert rejoined[0] == "offload.kv_offloading_size(GiB)"
    assert rejoined[-1] == "num_preemptions(count)"
    wide = printed(None)  # no COLUMNS off a terminal: as wide as the table needs
    assert max(len(line) for line in wide) > 120
    assert any("offload.link_bandwidth_bytes_per_s" in line for line in wide)
    assert printed("") == wide  # (not a number: rich ignores it, and so does kvsim)


@pytest.mark.parametrize(
    "override", ['{ gpu = "a100-40gb" }', '{ cache = { allocator = "first_fit" } }']
)
def test_a_fleet_whose_replicas_differ_prints_and_saves_its_results(tmp_path, override):
    # replicas on two GPUs (or layouts) record no one layout source: the summary's cost note
    # raised KeyError 'layout_source' after the simulation, and nothing was written
    config = tmp_path / "het.toml"
    config.write_text(
        'model = "llama-3.1-8b"\ngpu = "h100-80gb"\n[cache]\nkv_cache_gib = 4.0\n'
        "[scheduler]\nmax_model_len = 4096\n"
        '[workload]\npreset = "sharegpt_like"\nnum_requests = 40\n'
        f"[fleet]\nreplicas = 2\nreplica_overrides = [{override}]\n"
    )
    out = tmp_path / "out"
    result = runner.invoke(app, ["run", str(config), "--out", str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "┃ replica ┃" in result.output
    assert "step cost:" not in result.output  # (no one factor to name)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_requests"] == 40
    assert (out / "metrics.prom").stat().st_size > 0


def test_an_out_folder_this_user_cannot_write_is_refused_before_the_run(tmp_path, monkeypatch):
    # a read-only parent was found only after the simulation ("[Errno 13] Permission denied",
    # the run lost); root may write anywhere, so the folder's permission is what os.access says
    import os

    import kvsim.cli.common as common

    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(
        common.os, "access", lambda path, mode: Path(path) != locked and real_access(path, mode)
    )
    result = runner.invoke(app, ["run", "--out", str(locked / "x"), "--no-progress"])
    assert result.exit_code == 2
    assert "--out" in result.output
    assert "permission denied" in result.output
    assert str(locked) in result.output
    assert "requests" not in result.output  # (refused before the run's header)


def test_map_frames_past_its_maximum_is_refused_before_the_run():
    # 100,000 frames of a 5-request run took 3.7 GB and 40 s; 100,000,000 never ended
    result = runner.invoke(app, ["run", "--map-frames", "10001", "--no-progress"])
    assert result.exit_code == 2
    assert "--map-frames" in result.output
    assert "10000" in result.output


def test_a_reproduce_table_folds_its_cells_rather_than_cutting_them_at_80_columns():
    # at COLUMNS=80 Figure 2's table cut "reservation" to "reserv…" and "Orca (Oracle)" too
    import io

    import pandas as pd
    from rich.console import Console

    from kvsim.cli.reproduce import frame_table

    frame = pd.DataFrame(
        {
            "system": ["Orca (Oracle)", "vLLM"],
            **{
                name: [20.5, 96.4]
                for name in (
                    "token_states",
                    "reservation",
                    "internal_frag.",
                    "external_frag._&_other",
                    "free",
                    "mean_running",
                    "in_band_of_the_paper",
                )
            },
        }
    )
    out = io.StringIO()
    Console(file=out, width=80).print(frame_table(frame, "fig2"))
    text = out.getvalue()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_run_header_ends_with_the_line_vllm_logs_at_startup():
    # 4 GiB / 128 KiB = 32,768 slots = 2,048 blocks; an 8,000-token request needs 500: 4.096x,
    # 4.096 x 8,000 = 32,768 tokens (tests/test_capacity_arithmetic.py works the rule)
    args = ["run", "--no-progress", "--set", "model=llama-3.1-8b", "--set", "gpu=h100-80gb"]
    args += ["--set", "cache.kv_cache_gib=4", "--set", "scheduler.max_model_len=8000"]
    args += ["--set", "workload.num_requests=1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert (
        "vLLM's startup log: GPU KV cache size: 32,768 tokens, Maximum concurrency for 8,000 "
        "tokens per request: 4.10x"
    ) in " ".join(result.output.split())


def test_a_run_past_saturation_says_so_and_a_stable_one_does_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # OPT-13B on an A100-40GB, 512-token prompts and 64 output tokens: 60 req/s is far past
    # what it serves (p50 TTFT in minutes), 1 req/s well under it (docs: kvsim plan finds where)
    fixed = ["--set", "workload.lengths=fixed", "--set", "workload.fixed_prompt_tokens=512"]
    fixed += ["--set", "workload.fixed_output_tokens=64", "--no-progress"]
    many = ["--set", "workload.rate_per_s=60", "--set", "workload.num_requests=3000"]
    with caplog.at_level("WARNING", logger="kvsim"):
        result = runner.invoke(app, ["run", *fixed, *many])
    assert result.exit_code == 0, result.output
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "past saturation: over the second half of the arrival window" in said
    pattern = r"\(([\d.]+) to ([\d.]+) s\) ([\d,]+) requests arrived and ([\d,]+) finished"
    found = re.search(pattern, said)
    assert found, said
    middle, last, arrived, finished = (float(g.replace(",", "")) for g in found.groups())
    # Poisson arrivals at 60 req/s for 3,000 requests: the window ends near 50 s, its middle
    # near 25 s, and about half the requests (sd ~39) arrive after it; far past saturation,
    # fewer finish meanwhile than arrive
    assert abs(last - 50) < 5
    assert abs(middle - 25) < 3
    assert abs(arrived - 1500) < 200
    assert finished < arrived
    assert "lower workload.rate_per_s" in said
    caplog.clear()
    few = ["--set", "workload.rate_per_s=1", "--set", "workload.num_requests=300"]
    with caplog.at_level("WARNING", logger="kvsim"):
        result = runner.invoke(app, ["run", *fixed, *few])
    assert result.exit_code == 0, result.output
    assert "saturation" not in " ".join(r.getMessage() for r in caplog.records)


def test_a_sweep_names_its_points_past_saturation(tmp_path: Path, caplog) -> None:
    # the saturation test's two rates as a sweep: only the 60 req/s point is named
    experiment = tmp_path / "rates.toml"
    experiment.write_text(
        'name = "rates"\n[base.workload]\nlengths = "fixed"\nfixed_prompt_tokens = 512\n'
        "fixed_output_tokens = 64\nnum_requests = 3000\n[grid]\n"
        '"workload.rate_per_s" = [1.0, 60.0]\n'
    )
    with caplog.at_level("WARNING", logger="kvsim"):
        result = runner.invoke(
            app, ["sweep", str(experiment), "--out", str(tmp_path / "out"), "--no-progress"]
        )
    assert result.exit_code == 0, result.output
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "past saturation" in said
    assert "1 of 2 points: workload.rate_per_s = 60.0" in said


def test_a_fleet_of_two_gpus_says_so_and_claims_no_one_pool(tmp_path: Path) -> None:
    # replica 0 on an RTX 4090 in fp8, replica 1 the config's H100: the title named the H100
    # alone, and the summary gave replica 0's pool (68,940 slots of 64 KiB) as the fleet's
    config = tmp_path / "fleet.toml"
    config.write_text(
        'model = "llama-3.1-8b"\ngpu = "h100-80gb"\n[workload]\nnum_requests = 20\n'
        '[fleet]\nreplicas = 2\nreplica_overrides = [{gpu = "rtx-4090", cache = '
        '{kv_cache_dtype = "fp8"}, scheduler = {max_model_len = 4096}}]\n'
    )
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", str(config), "--out", str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "llama-3.1-8b on 1 rtx-4090 and 1 h100-80gb," in result.output.splitlines()[0]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["capacity_tokens"] is None
    assert summary["bytes_per_token"] is None  # 64 KiB in fp8 against 128 KiB
    assert summary["kv_cache_dtype"] is None
    assert summary["max_model_len"] == 131_072  # the longest a replica takes (the H100's)
    assert summary["enable_prefix_caching"] is True  # shared by both
    report = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "r.html")])
    assert report.exit_code == 2
    assert "replicas hold different KV pools" in report.output
    # both replicas moved to the RTX 4090: the title named the config's H100 still
    both = '{gpu = "rtx-4090", scheduler = {max_model_len = 4096}}'
    config.write_text(
        'model = "llama-3.1-8b"\ngpu = "h100-80gb"\n[workload]\nnum_requests = 20\n'
        f"[fleet]\nreplicas = 2\nreplica_overrides = [{both}, {both}]\n"
    )
    result = runner.invoke(app, ["run", str(config), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "llama-3.1-8b on rtx-4090, paged" in result.output.splitlines()[0]


def test_a_fleet_of_two_models_names_each(tmp_path: Path) -> None:
    # replica 0 overridden to Llama-2-7B: the title said "llama-3.1-8b on h100-80gb" and neither
    # the replica table nor replicas.parquet named a model
    config = tmp_path / "fleet.toml"
    config.write_text(
        'model = "llama-3.1-8b"\ngpu = "h100-80gb"\n[workload]\nnum_requests = 20\n'
        '[fleet]\nreplicas = 2\nreplica_overrides = [{model = "llama-2-7b"}]\n'
    )
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", str(config), "--out", str(out), "--no-progress"])
    assert result.exit_code == 0, result.output
    first = result.output.splitlines()[0]
    assert ": 1 llama-2-7b on h100-80gb and 1 llama-3.1-8b on h100-80gb, paged" in first
    replicas = pd.read_parquet(out / "replicas.parquet")
    assert replicas["model"].tolist() == ["llama-2-7b", "llama-3.1-8b"]
    assert re.search(r"│ 0 +│ both │ llama-2-7b +│ h100-80gb x1", result.output)


def test_the_run_title_counts_samples_where_requests_fanned_out() -> None:
    # 30 requests of which 10 (n = 1, 2, 3 or 4 each) were too long: 73 samples, 48 run and
    # 25 rejected, as the tables count them; a request of one sample each says requests alone
    from kvsim.cli.run import run_title
    from kvsim.config import config_from_dict

    cfg = config_from_dict({})
    title = " ".join(run_title(cfg, 30, 25, 73).split())
    assert "30 requests as 73 samples (48 run, 25 rejected)" in title
    assert "30 requests (20 run, 10 rejected)" in " ".join(run_title(cfg, 30, 10, 30).split())
    assert "samples" not in run_title(cfg, 400, 0, 400)


def test_a_runs_header_counts_the_samples_its_requests_became() -> None:
    # 20 requests of n = 2 under vllm-v1: 40 samples, all run (the tables' rows)
    args = ["run", "--set", "workload.num_requests=20", "--set", "workload.n=2", "--no-progress"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "20 requests as 40 samples" in " ".join(result.output.split())


def test_a_closed_pipe_ends_the_command_quietly(monkeypatch, capsys) -> None:
    # kvsim data list | head -3 printed "error: [Errno 32] Broken pipe" and exited 2
    import typer

    from kvsim.cli import common

    def listing() -> None:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(common.os, "dup2", lambda *_: None)  # (not this process's stdout)
    with pytest.raises(typer.Exit) as ended:
        common.guard(listing)
    assert ended.value.exit_code == 141  # as a shell reports a command ended by SIGPIPE
    assert "error" not in capsys.readouterr().err
