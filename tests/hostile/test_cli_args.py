"""Hostile command lines for every ``kvsim`` command (``kvsim --help`` lists them): bad options,
output paths that are system folders, files or under files, results folders with corrupt files, a
Dask scheduler nobody answers at, a full disk. One line, exit 2, nothing written elsewhere."""

from __future__ import annotations

import errno
import json
import socket
from pathlib import Path

import pytest

import kvsim.results
from tests.conftest import forget_warnings

TINY = ["--set", "workload.num_requests=2", "--set", "workload.lengths=fixed"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


EXPERIMENT = """name = "e"
[base.cache]
kv_cache_gib = 2.0
[base.workload]
lengths = "fixed"
fixed_prompt_tokens = 16
fixed_output_tokens = 4
num_requests = 2
"""

# id: (command line, fragments of the error line); files named here are made by _setup
ARGS: dict[str, tuple[list[str], list[str]]] = {
    # usage errors, one line each
    "unknown_command": (["fig12", "--num-requests", "0"], ["No such command", "fig12"]),
    "unknown_command_sharing": (["sharing", "--num-requests", "0"], ["sharing"]),
    "unknown_option": (["run", "--bogus"], ["kvsim run", "--bogus"]),
    "missing_argument": (["sweep"], ["kvsim sweep", "experiment"]),
    "jobs_zero": (["sweep", "exp.toml", "-j", "0"], ["-j", "--jobs"]),
    "jobs_text": (["reproduce", "fig2", "-j", "many"], ["kvsim reproduce", "--jobs", "integer"]),
    "map_frames_negative": (["run", "--map-frames", "-1"], ["--map-frames"]),
    "connect_timeout_zero": (
        ["sweep", "exp.toml", "--connect-timeout", "0"],
        ["--connect-timeout"],
    ),
    # run
    "run_out_root": (["run", *TINY, "--out", "/"], ["--out", "'/'", "system folder"]),
    "run_out_usr": (["run", *TINY, "--out", "/usr"], ["--out", "'/usr'"]),
    "run_out_proc": (["run", *TINY, "--out", "/proc/kvsim"], ["--out", "/proc/kvsim"]),
    "run_out_etc_sub": (["run", *TINY, "--out", "/etc/kvsim/x"], ["--out", "/etc/kvsim/x"]),
    "run_out_file": (["run", *TINY, "--out", "afile"], ["--out", "'afile'", "file"]),
    "run_out_under_file": (["run", *TINY, "--out", "afile/sub"], ["--out", "afile"]),
    "run_two_pairs_one_set": (
        ["run", "--set", "seed=1", "cache.kv_cache_gib=4"],
        ["kvsim run", "'cache.kv_cache_gib=4'", "its own --set"],
    ),
    "plan_two_pairs_one_set": (
        ["plan", "--set", "seed=1", "workload=azure_conv"],
        ["kvsim plan", "'workload=azure_conv'", "its own --set"],
    ),
    # sweep
    "sweep_out_root": (["sweep", "exp.toml", "--out", "/"], ["--out", "'/'"]),
    "sweep_out_file": (["sweep", "exp.toml", "--out", "afile"], ["--out", "'afile'"]),
    "sweep_unknown_experiment": (["sweep", "nosuch"], ["nosuch", "no such experiment"]),
    "sweep_misspelt_experiment": (  # (vLLM's underscore for the shipped block-size)
        ["sweep", "block_size"],
        ["block_size: no such experiment file; did you mean 'block-size'?"],
    ),
    "sweep_experiments_beginning": (  # (as preset names are hinted: kvsim.config.hardware)
        ["sweep", "spec"],
        ["spec: no such experiment file; did you mean 'spec-decode'?"],
    ),
    "sweep_scheduler_garbage": (
        ["sweep", "exp.toml", "--out", "out", "--scheduler", "nonsense", "--no-progress"],
        ["--scheduler", "'nonsense'"],
    ),
    # plot
    "plot_missing_folder": (["plot", "nofolder"], ["nofolder", "no such folder"]),
    "plot_corrupt_parquet": (["plot", "corrupt"], ["corrupt/summary.parquet", "Parquet"]),
    "plot_corrupt_experiment_json": (["plot", "badmeta"], ["badmeta/experiment.json", "JSON"]),
    "plot_out_root": (["plot", "corrupt", "--out", "/"], ["--out", "'/'"]),
    "plot_out_file": (["plot", "corrupt", "--out", "afile"], ["--out", "'afile'"]),
    # compare
    "compare_missing": (["compare", "nofolder", "nofolder2"], ["nofolder", "no such folder"]),
    "compare_corrupt_json": (["compare", "badrun", "badrun"], ["badrun/summary.json"]),
    "compare_json_array": (["compare", "arrayrun", "arrayrun"], ["arrayrun/summary.json"]),
    "compare_not_utf8": (["compare", "latin1run", "latin1run"], ["latin1run/summary.json"]),
    "compare_list_value": (
        ["compare", "listrun", "listrun"],
        ["listrun/summary.json", "num_preemptions is [1, 2]", "expected a number"],
    ),
    "compare_text_metric": (
        ["compare", "textrun", "textrun"],
        ["textrun/summary.json", 'token_states_pct is "abc", expected a number'],
    ),
    "compare_infinite_metric": (  # (kvsim writes null; inf was shown as "inf | +inf | +inf %")
        ["compare", "infrun", "infrun"],
        ["infrun/summary.json", "free_pct is inf, expected a number"],
    ),
    # values out of the range kvsim writes: drawn as "free (% of KV) 78.7 -> -5" and a page
    "compare_negative_share": (
        ["compare", "negrun", "negrun"],
        ["negrun/summary.json", "free_pct is -5, expected a percentage from 0 to 100"],
    ),
    "compare_negative_count": (
        ["compare", "countrun", "countrun"],
        ["countrun/summary.json", "num_preemptions is -1, expected a count >= 0"],
    ),
    # report
    "report_missing_folder": (["report", "nofolder", "--out", "r.html"], ["nofolder"]),
    "report_out_root": (["report", "badrun", "--out", "/"], ["--out", "'/'"]),
    "report_out_folder": (["report", "badrun", "--out", "somedir"], ["--out", "somedir"]),
    "report_out_dev": (["report", "badrun", "--out", "/dev/r.html"], ["--out", "/dev/r.html"]),
    "report_out_etc": (["report", "badrun", "--out", "/etc/r.html"], ["--out", "/etc/r.html"]),
    "report_out_under_file": (["report", "badrun", "--out", "afile/r.html"], ["--out", "afile"]),
    "report_corrupt_run": (["report", "badrun", "--out", "r.html"], ["badrun"]),
    # reproduce
    "reproduce_unknown": (["reproduce", "fig99"], ["reproduce", "fig99"]),
    "reproduce_out_root": (["reproduce", "fig2", "--out", "/"], ["--out", "'/'"]),
    "reproduce_out_file": (["reproduce", "fig2", "--out", "afile"], ["--out", "'afile'"]),
    # presets, calibrate, data
    "presets_unknown_kind": (["presets", "nope"], ["presets", "'nope'"]),
    "calibrate_batch_text": (["calibrate", "--batch-sizes", "x"], ["--batch-sizes", "'x'"]),
    "calibrate_batch_zero": (["calibrate", "--batch-sizes", "0,8"], ["--batch-sizes", "'0,8'"]),
    "calibrate_head_dim": (["calibrate", "--head-dim", "100"], ["head_dim", "100"]),
    "calibrate_out_folder": (["calibrate", "--out", "somedir"], ["--out", "somedir"]),
    "calibrate_repeats_zero": (["calibrate", "--repeats", "0"], ["--repeats"]),
    # the kernel table's options beside a mode: read by nothing, without a word
    "calibrate_batch_with_from_runs": (
        ["calibrate", "--from-runs", "--batch-sizes", "1,2"],
        ["--batch-sizes applies to the kernel table only", "not --from-runs"],
    ),
    "data_fetch_dest_root": (["data", "fetch", "--dest", "/"], ["--dest", "'/'"]),
    "data_fetch_dest_file": (["data", "fetch", "--dest", "afile"], ["--dest", "'afile'"]),
    "data_fetch_unknown_trace": (
        ["data", "fetch", "--dest", "out", "--only", "nosuch"],
        ["nosuch"],
    ),
    "data_fetch_timeout_zero": (["data", "fetch", "--timeout", "0"], ["--timeout"]),
    # (past a time the clock can hold: it crashed with an OverflowError)
    "data_fetch_timeout_inf": (
        ["data", "fetch", "--timeout", "inf"],
        ["--timeout", "less than or equal to 3600"],
    ),
    "data_list_dest_file": (["data", "list", "--dest", "afile"], ["--dest", "'afile'"]),
}


def _setup(h) -> None:
    """The files the command lines above name."""
    h.write("afile", "just a file\n")
    (h.cwd / "somedir").mkdir()
    h.write("exp.toml", EXPERIMENT)
    h.write("corrupt/summary.parquet", b"PAR1 garbage")
    h.write("badmeta/summary.parquet", b"PAR1 garbage")
    h.write("badmeta/experiment.json", "{not json")
    h.write("badrun/summary.json", "{oops")
    h.write("arrayrun/summary.json", "[1, 2]")
    h.write("latin1run/summary.json", b'{"name": "\xe9"}')
    h.write("listrun/summary.json", '{"num_requests": 3, "num_preemptions": [1, 2]}')
    h.write("textrun/summary.json", '{"num_requests": 3, "token_states_pct": "abc"}')
    h.write("infrun/summary.json", '{"config_key": "k", "free_pct": Infinity}')
    h.write("negrun/summary.json", '{"config_key": "k", "free_pct": -5}')
    h.write("countrun/summary.json", '{"config_key": "k", "num_preemptions": -1}')


@pytest.mark.parametrize("case", sorted(ARGS))
def test_bad_arguments(hostile, case: str) -> None:
    _setup(hostile)
    args, expected = ARGS[case]
    hostile.run(args, *expected, allowed=[hostile.cwd / "somedir"])


def test_unreachable_dask_scheduler_times_out_quickly(hostile) -> None:
    hostile.write("exp.toml", EXPERIMENT)
    address = f"tcp://127.0.0.1:{_free_port()}"
    args = ["sweep", "exp.toml", "--out", "out", "--no-progress", "--scheduler", address]
    outcome = hostile.run([*args, "--connect-timeout", "0.5"], address, "0.5 s")
    assert "--connect-timeout" in outcome.error


def test_a_run_whose_summary_holds_a_share_past_100_is_not_reported(hostile) -> None:
    # "token states 250 %" was drawn on a page, exit 0
    import json

    hostile.run(["run", "--no-progress", "--set", "workload.num_requests=3", "--out", "r"],
                code=0, allowed=[hostile.cwd])  # fmt: skip
    path = hostile.cwd / "r" / "summary.json"
    summary = json.loads(path.read_text())
    summary["token_states_pct"] = 250
    path.write_text(json.dumps(summary))
    hostile.run(
        ["report", "r", "--out", "r.html"],
        "summary.json: token_states_pct is 250, expected a percentage from 0 to 100",
    )
    assert not (hostile.cwd / "r.html").exists()


def _disk_full(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, "No space left on device", "out/results.parquet")


def test_disk_full_during_run(hostile, monkeypatch) -> None:
    monkeypatch.setattr(kvsim.results.Results, "save", _disk_full)
    hostile.run(["run", "--no-progress", *TINY, "--out", "out"], "No space left", "out/")


def test_disk_full_during_sweep(hostile, monkeypatch) -> None:
    monkeypatch.setattr(kvsim.results.Results, "save", _disk_full)
    hostile.write("exp.toml", EXPERIMENT)
    hostile.run(["sweep", "exp.toml", "--out", "out", "--no-progress"], "No space left")


def test_debug_shows_the_traceback(hostile) -> None:
    outcome = hostile.invoke(["--debug", "run", "--set", "seed=1", "--set", "seed.x=2"])
    assert outcome.exit_code != 0
    assert "not a table" in outcome.output + repr(outcome)


def test_sweep_with_nothing_swept_keeps_its_row(hostile) -> None:
    """An experiment without axes has one point; summary.parquet must hold it (it held none)."""
    import pandas as pd

    hostile.write("exp.toml", EXPERIMENT)
    outcome = hostile.run(["sweep", "exp.toml", "--out", "out", "--no-progress"], code=0)
    assert "1 points in summary.parquet" in outcome.output
    table = pd.read_parquet(hostile.out / "e" / "summary.parquet")
    assert len(table) == 1
    assert json.loads((hostile.out / "e" / "failures.json").read_text()) == []


def test_snapshot_with_radix_points(hostile) -> None:
    """A snapshot time no longer fails the radix points of a sweep (a tree has no slot map)."""
    text = EXPERIMENT.replace('name = "e"', 'name = "e"\nsnapshot_at_s = 0.01')
    text += '[grid]\n"cache.allocator" = ["paged", "radix"]\n'
    hostile.write("exp.toml", text)
    outcome = hostile.run(["sweep", "exp.toml", "--out", "out", "--no-progress"], code=0)
    assert "2 run, 0 resumed, 0 failed" in outcome.output
    assert Path(hostile.out / "e" / "summary.parquet").is_file()


@pytest.mark.parametrize("command", ["sweep", "plan", "reproduce"])
def test_more_jobs_than_cpus_is_warned_about(
    hostile, command: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every command taking -j says so before it runs anything: 5 processes on a 4-CPU machine
    import os

    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    hostile.write("exp.toml", EXPERIMENT)
    first = {"sweep": ["exp.toml"], "plan": ["--smallest", "kv"], "reproduce": ["nosuch"]}
    hostile.invoke([command, *first[command], "--out", "somedir/out", "-j", "5", "--no-progress"])
    said = [r.getMessage() for r in caplog.records if r.name == "kvsim.cli"]
    assert said == [
        "-j 5: more processes than this machine's 4 CPUs; they share them, and no more start "
        "than there are points to run"
    ]
    forget_warnings(caplog)
    hostile.invoke([command, *first[command], "--out", "somedir/out", "-j", "4", "--no-progress"])
    assert [r for r in caplog.records if r.name == "kvsim.cli"] == []


def test_a_set_key_given_twice_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    from kvsim.cli.common import parse_overrides

    pairs = ["seed=1", "cache.block_size_tokens=16", "seed=2", "cache.block_size_tokens=16"]
    assert parse_overrides(pairs) == {"seed": 2, "cache.block_size_tokens": 16}
    said = [r.getMessage() for r in caplog.records if r.name == "kvsim.cli"]
    assert said == ["--set seed given twice (1, then 2): the last is used"]  # 16 twice: agreed


def test_set_reads_toml_values_json_lacks() -> None:
    import math

    from kvsim.cli.common import parse_overrides

    got = parse_overrides(
        [
            "cache.page_size_bytes=65_536",  # TOML's digit separators
            "speculative.acceptance_rates=[nan,0.4]",  # TOML's nan: the field names it
            "workload={ preset = 'sharegpt_like' }",  # an inline table
            "workload.preset=sharegpt_like",  # a bare name stays text
            "model.hf_config=/tmp/config.json",  # so does a path
            "seed=1979-05-27",  # and a TOML date: no setting takes one
            "x=1\ny = 2",  # a second line is not a second setting
        ]
    )
    assert got["cache.page_size_bytes"] == 65_536
    first, second = got["speculative.acceptance_rates"]
    assert math.isnan(first)
    assert second == 0.4
    assert got["workload"] == {"preset": "sharegpt_like"}
    assert got["workload.preset"] == "sharegpt_like"
    assert got["model.hf_config"] == "/tmp/config.json"
    assert got["seed"] == "1979-05-27"
    assert got["x"] == "1\ny = 2"


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ("[nan," * 1500 + "1" + "]" * 1500, "nested too deeply"),  # JSON refuses nan: TOML reads
        ("{a=" * 1500 + "1" + "}" * 1500, "nested too deeply"),
        ("1_" + "1" * 5000, "number that long"),  # TOML's digit separator: not JSON
    ],
)
def test_set_values_only_toml_reads_get_the_json_paths_guards(raw: str, said: str) -> None:
    """A value JSON refuses is read as TOML: nested past the recursion limit, or an integer
    past Python's 4,300 digits, it is a clear ValueError naming the key (the CLI's exit 2),
    not an internal error."""
    from kvsim.cli.common import parse_overrides

    with pytest.raises(ValueError, match=f"--set seed: .*{said}"):
        parse_overrides([f"seed={raw}"])
