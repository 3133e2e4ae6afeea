"""Output paths that would destroy or mix with what the user has: ``kvsim report --out`` a run's
``summary.json`` or a ``.png``, ``kvsim run --out`` a folder of the user's own files (a model's
``config.json``) or ``''`` (the current folder), and a run into an earlier run's folder, which
must keep nothing of the earlier run (its memory-map frames, a fleet's replicas)."""

from __future__ import annotations

import logging
import os

import pytest

from kvsim.results import Results
from tests.conftest import forget_warnings

TINY = ["--no-progress", "--set", "workload.num_requests=2", "--set", "workload.lengths=fixed"]
USER_CONFIG = '{"model_type": "llama", "num_hidden_layers": 2}'  # (a model's, not a run's)


def _run(hostile, out: str, *extra: str) -> None:
    """``kvsim run`` of two requests into ``out``."""
    hostile.run(["run", *TINY, "--out", out, *extra], code=0, allowed=[hostile.cwd])


@pytest.mark.parametrize("out", ["run/summary.json", "x.png", "report"])
def test_report_out_must_be_an_html_file(hostile, out) -> None:
    _run(hostile, "run")
    summary = (hostile.cwd / "run" / "summary.json").read_bytes()
    hostile.run(["report", "run", "--out", out], "--out", f"'{out}'", "ending in .html")
    assert (hostile.cwd / "run" / "summary.json").read_bytes() == summary  # not HTML now
    assert not (hostile.cwd / out).exists() or out == "run/summary.json"
    # the suffix in any case (the rule is case-insensitive)
    hostile.run(["report", "run", "--out", "R.HTML"], code=0, allowed=[hostile.cwd])
    assert (hostile.cwd / "R.HTML").read_text().startswith("<!DOCTYPE html>")
    hostile.run(["report", "run", "--out", "r.htm"], code=0, allowed=[hostile.cwd])


def test_run_refuses_a_folder_of_the_users_files(hostile) -> None:
    """A folder holding a model's ``config.json`` (``--set model.hf_config=D/config.json --out
    D``), whose name is one a run writes, but no run's ``summary.json``."""
    hostile.write("hf/config.json", USER_CONFIG)
    for name in ("tokenizer.json", "a.safetensors", "b.safetensors"):
        hostile.write(f"hf/{name}", "x")
    # the first three names in sorted order, then a count of the rest (4 files: "and 1 more")
    hostile.run(
        ["run", *TINY, "--out", "hf"],
        "--out: 'hf'",
        "(a.safetensors, b.safetensors, config.json and 1 more)",
        "choose an empty or new folder",
    )
    assert (hostile.cwd / "hf" / "config.json").read_text() == USER_CONFIG
    assert sorted(p.name for p in (hostile.cwd / "hf").iterdir()) == [
        "a.safetensors",
        "b.safetensors",
        "config.json",
        "tokenizer.json",
    ]


def test_run_refuses_a_summary_json_that_is_no_runs(hostile) -> None:
    """A ``summary.json`` without the ``config_key`` every run's summary holds is the user's."""
    hostile.write("mine/summary.json", '{"accuracy": 0.9}')
    hostile.write("mine/config.json", USER_CONFIG)
    hostile.run(["run", *TINY, "--out", "mine"], "'mine'", "config.json, summary.json")
    assert (hostile.cwd / "mine" / "summary.json").read_text() == '{"accuracy": 0.9}'


@pytest.mark.parametrize(
    "command",
    [
        ["run", *TINY],
        ["sweep", "fig2", "--quick"],
        ["reproduce", "fig2", "--quick"],
        ["plan", "--smallest", "kv", "--target", "time_to_first_token_seconds_p99<=2"],
        ["plot", "results/x"],
    ],
    ids=["run", "sweep", "reproduce", "plan", "plot"],
)
def test_an_empty_out_is_refused(hostile, command) -> None:
    # ('' is the current folder as a path: the files would land beside the user's; sweep,
    # reproduce and plan wrote their folders there)
    hostile.run([*command, "--out", ""], "--out", "expected a folder name, got ''")
    assert list(hostile.cwd.iterdir()) == []


def test_rerun_into_a_run_folder_keeps_nothing_of_the_earlier_run(hostile, caplog) -> None:
    _run(hostile, "out", "--map-frames", "5")
    assert (hostile.out / "mapframes.parquet").is_file()
    hostile.write("out/notes.txt", "mine")  # (a file of the user's: left alone)
    with caplog.at_level(logging.WARNING, logger="kvsim.cli"):
        _run(hostile, "out", "--map-frames", "0")
    assert [r for r in caplog.records if "replaced the earlier run in out" in r.getMessage()]
    # without frames the run writes no mapframes/frames: the earlier run's must not remain
    assert not (hostile.out / "mapframes.parquet").exists()
    assert not (hostile.out / "frames.parquet").exists()
    assert (hostile.out / "notes.txt").read_text() == "mine"


def test_single_replica_run_after_a_fleet_loads_no_replicas(hostile) -> None:
    _run(hostile, "out", "--set", "fleet.replicas=3")
    assert len(Results.load(hostile.out).replicas) == 3
    _run(hostile, "out")
    # one engine writes no replicas.parquet, so the fleet's three rows must be gone
    assert not (hostile.out / "replicas.parquet").exists()
    assert Results.load(hostile.out).replicas is None


def test_an_out_that_links_to_nothing_says_so(hostile) -> None:
    # mkdir said "[Errno 17] File exists" of the link
    (hostile.cwd / "gone").symlink_to(hostile.cwd / "nowhere")
    hostile.run(["run", *TINY, "--out", "gone"], "'gone' is a link to", "which does not exist")
    hostile.run(["sweep", "fig2", "--quick", "--out", "gone"], "which does not exist")
    # a folder above --out that links to nothing: the run simulated, then lost its results
    hostile.run(["run", *TINY, "--out", "gone/sub"], "'gone' is a link to")


def test_a_save_cut_short_or_hidden_files_do_not_block_a_run(hostile) -> None:
    # a save writes the tables before summary.json: one cut short left a folder the next run
    # refused as the user's ("holds files of its own (memory.parquet, requests.parquet)")
    _run(hostile, "out")
    (hostile.out / "summary.json").unlink()
    (hostile.out / "config.json").unlink()
    _run(hostile, "out")
    assert (hostile.out / "summary.json").is_file()
    # a new folder holding only what a desktop or a repository leaves
    hostile.write("fresh/.DS_Store", "x")
    hostile.write("fresh/.gitkeep", "")
    _run(hostile, "fresh")
    assert (hostile.cwd / "fresh" / ".gitkeep").is_file()  # (left alone)


def test_a_run_lists_every_file_it_writes_and_a_rerun_removes_only_those(hostile) -> None:
    # the list, written first, is what a rerun removes: names alone once deleted a user's
    # requests.csv (a table's CSV twin) beside a run that wrote Parquet
    import json

    from kvsim.results.tables import RUN_MANIFEST

    _run(hostile, "frames", "--map-frames", "5")
    _run(hostile, "fleet", "--set", "fleet.replicas=2")
    for folder in ("frames", "fleet"):
        written = {p.name for p in (hostile.cwd / folder).iterdir()} - {RUN_MANIFEST}
        listed = json.loads((hostile.cwd / folder / RUN_MANIFEST).read_text())
        assert sorted(listed) == sorted(written)
    assert "replicas.parquet" in written
    hostile.write("fleet/requests.csv", "mine")
    _run(hostile, "fleet")
    assert (hostile.cwd / "fleet" / "requests.csv").read_text() == "mine"
    assert not (hostile.cwd / "fleet" / "replicas.parquet").exists()  # (the earlier run's)


def test_a_users_files_named_like_a_runs_are_never_taken_for_one(hostile) -> None:
    # a trace saved as requests.csv beside a config.json: taken for a save cut short, both
    # were replaced (the trace the run read included)
    trace = "arrival_time_s,prompt_tokens,output_tokens\n0,10,5\n0.5,20,6\n"
    hostile.write("mine/requests.csv", trace)
    hostile.write("mine/config.json", USER_CONFIG)
    args = ["run", "--no-progress", "--set", "workload.trace=mine/requests.csv", "--out", "mine"]
    hostile.run(args, "'mine' holds files of its own (config.json, requests.csv)")
    assert (hostile.cwd / "mine" / "requests.csv").read_text() == trace


def test_a_folder_or_pipe_by_a_run_files_name_is_refused_before_the_run(hostile) -> None:
    # found after the simulation, the save failed ("Is a directory") or blocked on the pipe
    _run(hostile, "d")
    (hostile.cwd / "d" / "frames.parquet").unlink()
    (hostile.cwd / "d" / "frames.parquet").mkdir()
    hostile.run(["run", *TINY, "--out", "d"], "frames.parquet' is a folder or a pipe")
    (hostile.cwd / "p").mkdir()
    os.mkfifo(hostile.cwd / "p" / "summary.json")
    hostile.run(["run", *TINY, "--out", "p"], "summary.json' is a folder or a pipe")


def test_a_quoted_tilde_a_link_loop_and_a_linked_report_are_refused(hostile) -> None:
    # '~/res' wrote into ./~/res beside a check of $HOME/res; a loop was "a link to 'L', which
    # does not exist"; report --out a link wrote HTML through it (over a run's summary.json)
    hostile.run(["run", *TINY, "--out", "~/res"], "'~/res' begins with ~")
    assert not (hostile.cwd / "~").exists()
    (hostile.cwd / "L").symlink_to("L")
    hostile.run(["run", *TINY, "--out", "L"], "'L' is a link in a loop of links")
    _run(hostile, "run")
    (hostile.cwd / "r.html").symlink_to(hostile.cwd / "run" / "summary.json")
    hostile.run(["report", "run", "--out", "r.html"], "'r.html' is a link, a pipe or a device")
    assert (hostile.cwd / "run" / "summary.json").read_text().startswith("{")


def test_a_sweep_points_folder_is_not_a_run_to_replace(hostile) -> None:
    # a run into it replaced the point, which the sweep's rerun then called damaged
    hostile.run(["sweep", "fig2", "--quick", "--out", "s", "--no-progress"], code=0,
                allowed=[hostile.cwd])  # fmt: skip
    point = next((hostile.cwd / "s" / "quick" / "fig2" / "points").iterdir())
    summary = (point / "summary.json").read_text()
    hostile.run(["run", *TINY, "--out", str(point)], "is a point of a sweep or a plan")
    assert (point / "summary.json").read_text() == summary


def _interrupt_at(monkeypatch, target: object, name: str, when: int, signal_it: bool) -> None:
    """Make the ``when``-th call of ``target.name`` that moves or writes a file of the new run
    interrupted: raise ``KeyboardInterrupt`` (Ctrl-C while a table is written) or send this
    process SIGINT and go on (Ctrl-C during the renames of the staged files into place)."""
    import signal

    original = getattr(target, name)
    calls = []

    def wrapped(*args, **kwargs):
        if signal_it and ".kvsim-saving" not in str(args[0]):
            return original(*args, **kwargs)  # (another rename: not the swap's)
        calls.append(1)
        if len(calls) == when:
            if not signal_it:
                raise KeyboardInterrupt
            os.kill(os.getpid(), signal.SIGINT)
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, wrapped)


def test_ctrl_c_while_the_new_run_is_written_keeps_the_earlier_run_whole(
    hostile, monkeypatch
) -> None:
    """Ctrl-C while the second run's tables are written (its third table write): the earlier
    run's files are all there, unchanged, and no half-written file or folder is left."""
    import kvsim.results.tables as tables

    _run(hostile, "out", "--map-frames", "5")
    before = {p.name: p.read_bytes() for p in hostile.out.iterdir()}
    _interrupt_at(monkeypatch, tables, "write_table", 3, signal_it=False)
    hostile.run(["run", *TINY, "--out", "out", "--set", "seed=3"], code=130)
    assert {p.name: p.read_bytes() for p in hostile.out.iterdir()} == before


def test_ctrl_c_while_the_runs_are_swapped_ends_with_the_new_run_whole(
    hostile, monkeypatch
) -> None:
    """Ctrl-C at the swap's first rename: held off until every new file is in, then exit 130;
    the folder holds the new run alone (the earlier run's frames gone) and it loads."""
    import kvsim.results.replace as replace

    _run(hostile, "out", "--map-frames", "5")
    _interrupt_at(monkeypatch, replace.os, "replace", 1, signal_it=True)
    hostile.run(["run", *TINY, "--out", "out", "--set", "seed=3", "--map-frames", "0"], code=130)
    assert not (hostile.out / "mapframes.parquet").exists()
    assert Results.load(hostile.out).config.seed == 3
    assert not [p for p in hostile.out.iterdir() if p.name.startswith(".kvsim-saving")]


def test_report_out_replaces_an_earlier_report_but_not_the_users_html(hostile) -> None:
    _run(hostile, "run")
    hostile.write("notes.html", "<html>my notes</html>")
    hostile.run(["report", "run", "--out", "notes.html"], "--out", "'notes.html'", "did not write")
    assert (hostile.cwd / "notes.html").read_text() == "<html>my notes</html>"
    hostile.run(["report", "run", "--out", "r.html"], code=0, allowed=[hostile.cwd])
    (hostile.cwd / "r.html").write_text((hostile.cwd / "r.html").read_text() + "<!-- old -->")
    hostile.run(["report", "run", "--out", "r.html"], code=0, allowed=[hostile.cwd])
    assert not (hostile.cwd / "r.html").read_text().endswith("<!-- old -->")  # replaced


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        (["--set", "fleet.replicas=2"], "for a fleet"),
        (["--set", "cache.allocator=radix"], "for the 'radix' allocator"),
    ],
    ids=["fleet", "radix"],
)
def test_map_frames_asked_for_where_no_map_is_drawn_says_why(hostile, caplog, extra, why) -> None:
    with caplog.at_level(logging.WARNING, logger="kvsim.cli"):
        _run(hostile, "out", "--map-frames", "50", *extra)
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("--map-frames")]
    assert len(said) == 1
    assert said[0].startswith(f"--map-frames 50: no memory map is drawn {why}")
    assert not (hostile.out / "mapframes.parquet").exists()


def test_a_rename_that_fails_during_the_swap_keeps_the_new_runs_files(hostile, monkeypatch) -> None:
    """The swap's second rename fails (a file that cannot be replaced): exit 2 naming the hidden
    folder, which still holds the new run's files not yet moved in (they were deleted)."""
    import kvsim.results.replace as replace

    _run(hostile, "out")
    original, calls = os.replace, []

    def failing(src, dst):
        if ".kvsim-saving" in str(src):
            calls.append(src)
            if len(calls) == 2:
                raise PermissionError(1, "Operation not permitted", str(dst))
        return original(src, dst)

    monkeypatch.setattr(replace.os, "replace", failing)
    outcome = hostile.run(["run", *TINY, "--out", "out", "--set", "seed=3"], ".kvsim-saving-")
    (staging,) = [p for p in hostile.out.iterdir() if p.name.startswith(".kvsim-saving-")]
    assert f"are in out/{staging.name}" in outcome.error
    assert (staging / "summary.json").is_file()  # (sorted after the list and config.json)


def test_sigterm_during_the_swap_is_held_until_the_new_run_is_whole(hostile, monkeypatch) -> None:
    import signal

    import kvsim.results.replace as replace

    def stop(signum, _frame):  # (the test's stand-in for the default action: end the process)
        raise SystemExit(143)

    _run(hostile, "out", "--map-frames", "5")
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        original, calls = os.replace, []

        def terminated(src, dst):
            if ".kvsim-saving" in str(src):
                calls.append(src)
                if len(calls) == 1:
                    os.kill(os.getpid(), signal.SIGTERM)
            return original(src, dst)

        monkeypatch.setattr(replace.os, "replace", terminated)
        args = ["run", *TINY, "--out", "out", "--set", "seed=3", "--map-frames", "0"]
        outcome = hostile.invoke(args)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert outcome.exit_code == 143
    assert Results.load(hostile.out).config.seed == 3  # the new run, whole
    assert not (hostile.out / "mapframes.parquet").exists()


def test_a_staging_folder_a_killed_save_left_is_named(hostile, caplog) -> None:
    _run(hostile, "out")
    (hostile.out / ".kvsim-saving-deadbeef").mkdir()
    with caplog.at_level(logging.WARNING, logger="kvsim.results"):
        _run(hostile, "out")
    assert any(".kvsim-saving-deadbeef" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("out", "expected"),
    [("small.toml", "expected a folder, got the existing file"), ("/proc/v", "system folder")],
)
def test_validate_out_is_checked_before_the_replays(hostile, out, expected) -> None:
    """``kvsim validate --out`` a file or a system folder: an OS error after the replays,
    naming no option ("[Errno 20] Not a directory: 'small.toml/...'"), as run and plan say it."""
    hostile.write("small.toml", "")
    hostile.run(["validate", "h100", "--out", out], "--out", expected)


def test_a_sweep_whose_out_is_a_run_or_a_sweeps_folder_is_warned(hostile, caplog) -> None:
    """Legal (the sweep writes a folder of its own inside it) but most likely a slip of the
    folder meant: ``--out`` names the folder that holds results folders."""
    _run(hostile, "r")
    sweep = ["sweep", "fig2", "--quick", "--no-progress", "--out"]
    nested = []
    for out in ("s", "r", "s/quick/fig2"):
        forget_warnings(caplog)
        with caplog.at_level(logging.WARNING):
            hostile.run([*sweep, out], code=0, allowed=[hostile.cwd])
        nested.append([r.getMessage() for r in caplog.records if "--out: " in r.getMessage()])
    assert nested[0] == []  # a new folder
    assert nested[1] == [
        "--out: 'r' is a kvsim run's results folder; these results go in a folder of their own "
        "inside it (--out names the folder that holds results folders, such as results/)"
    ]
    assert nested[2] == [
        "--out: 's/quick/fig2' is a sweep's or a plan's results folder; these results go in a "
        "folder of their own inside it (--out names the folder that holds results folders, such "
        "as results/)"
    ]
