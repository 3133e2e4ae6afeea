"""A command given another kind of kvsim TOML file (a sweep's experiment to ``kvsim run``, a
config to ``kvsim sweep``) names what the file is and the command that runs it, in one error
line, rather than refusing each of its keys as an unknown field."""

from __future__ import annotations

import os

import pytest

from kvsim.config.file_kinds import file_kinds

CONFIG = "[cache]\nkv_cache_gib = 2.0\n[workload]\nnum_requests = 2\n"
EXPERIMENT = (
    'name = "e"\n[base.cache]\nkv_cache_gib = 2.0\n[grid]\n"cache.block_size_tokens" = [8, 16]\n'
)
PLAN = (
    '[base.cache]\nkv_cache_gib = 2.0\n[question]\nfield = "cache.kv_cache_gib"\n'
    "targets = { time_to_first_token_seconds_p90 = 1.0 }\n"
)
WORKLOAD = 'name = "w"\narrival = "poisson"\nrate_per_s = 1.0\nlengths = "fixed"\n'

PLAN_ARGS = ["--smallest", "kv", "--target", "time_to_first_token_seconds_p90<=1"]

# command line -> (file given, what the error says it is, the command it names)
CASES = {
    "run_experiment": (["run", "f.toml"], EXPERIMENT, "is an experiment", "kvsim sweep f.toml"),
    "run_plan": (["run", "f.toml"], PLAN, "is a plan", "kvsim plan f.toml"),
    "run_workload": (
        ["run", "f.toml"],
        WORKLOAD,
        "is a workload preset",
        "kvsim run --set workload=f.toml",
    ),
    "sweep_config": (["sweep", "f.toml"], CONFIG, "is a config", "kvsim run f.toml"),
    # a config as a workload: its [workload] was taken and its model and GPU silently dropped
    "workload_config": (
        ["run", "--set", "workload=f.toml"],
        'model = "llama-2-7b"\n' + CONFIG,
        "holds [workload] beside ['cache', 'model']: a config, not a workload preset",
        "kvsim run f.toml",
    ),
    "sweep_plan": (["sweep", "f.toml"], PLAN, "is a plan", "kvsim plan f.toml"),
    "plan_experiment": (
        ["plan", "f.toml", *PLAN_ARGS],
        EXPERIMENT,
        "is an experiment",
        "kvsim sweep f.toml",
    ),
    "plan_workload": (
        ["plan", "f.toml", *PLAN_ARGS],
        WORKLOAD,
        "is a workload preset",
        "kvsim run --set workload=f.toml",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_file_of_another_kind_names_its_command(hostile, case: str) -> None:
    args, text, what, command = CASES[case]
    hostile.write("f.toml", text)
    outcome = hostile.run(args, "f.toml", what, command)
    assert "Extra inputs" not in outcome.output
    assert "unknown keys" not in outcome.output


def test_a_plan_naming_an_experiments_point_runs_without_a_question(hostile) -> None:
    """``experiment =`` and ``label =`` make a plan (``kvsim.study.plan.load_plan``) even
    without ``[question]``, which the command line then gives: it was read as a config and
    refused."""
    hostile.write("p.toml", 'experiment = "kv-budget"\nlabel = "paged"\n')
    outcome = hostile.invoke(["plan", "p.toml", *PLAN_ARGS, "--lo", "1", "--hi", "1.01"])
    assert outcome.exit_code == 0, outcome.output
    assert (hostile.cwd / "results" / "plan" / "p" / "answer.json").is_file()


@pytest.mark.parametrize(
    ("table", "kinds"),
    [
        ({}, ["config", "workload"]),  # every field kvsim's default
        ({"seed": 3, "cache": {}}, ["config"]),
        ({"name": "e", "base": {}}, ["plan", "experiment"]),  # a plan's question can be given
        ({"base": {}, "grid": {}}, ["experiment"]),
        ({"base": {}, "question": {}}, ["plan"]),
        ({"name": "w", "arrival": "poisson"}, ["workload"]),
        ({"cahce": {}}, []),  # a misspelt section: the config's own error names it
        ({"model": {}, "grid": {}}, []),  # a config's section beside an experiment's axes
    ],
)
def test_file_kinds(table: dict, kinds: list[str]) -> None:
    assert file_kinds(table) == kinds


def test_a_config_section_beside_an_experiments_axes_is_sent_nowhere(hostile) -> None:
    # [model] beside [grid] is no kind: kvsim run said "run it with kvsim sweep", where it
    # failed on [model]; each command now names the key it refuses, the sweep where it belongs
    hostile.write("m.toml", '[model]\npreset = "llama-3.1-8b"\n' + EXPERIMENT.split("\n", 1)[1])
    outcome = hostile.run(["run", "m.toml"], "m.toml", "grid: Extra inputs are not permitted")
    assert "kvsim sweep" not in outcome.output
    hostile.run(["sweep", "m.toml"], "unknown keys ['model']", "go under [base]: [base.model]")
    # a value, not a section: seed = 1 goes under [base] (it said [base.seed], a table)
    hostile.write("s.toml", "seed = 1\n" + EXPERIMENT.split("\n", 1)[1])
    hostile.run(["sweep", "s.toml"], "unknown keys ['seed']", "go under [base]: [base] seed = ...")


def test_a_plan_of_a_base_config_and_no_question_is_run_by_kvsim_plan(hostile) -> None:
    # name and [base] make a plan (its question from the command line) or a one-point sweep:
    # kvsim plan called it an experiment and sent it to kvsim sweep
    hostile.write("p.toml", 'name = "mine"\n[base.workload]\nnum_requests = 5\n')
    outcome = hostile.invoke(["plan", "p.toml", *PLAN_ARGS, "--lo", "2", "--hi", "2.02"])
    assert outcome.exit_code == 0, outcome.output
    hostile.run(
        ["run", "p.toml"], "is a plan", "or an experiment", "kvsim plan p.toml or kvsim sweep"
    )


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes (POSIX only)")
def test_a_pipe_is_read_as_a_config_and_never_read_where_a_folder_is_expected(hostile) -> None:
    # kvsim run <(cat c.toml) reads a pipe with a writer: it runs. report, plot and compare of
    # a pipe named fifo.toml read it to say what kind of file it is, and with no writer hung
    # until killed; a folder is expected there, and a pipe is none
    import signal
    import threading

    def blocked(signum: int, frame: object) -> None:
        raise TimeoutError("reading fifo.toml blocked")  # (fails the test, not CI's hour)

    fifo = hostile.cwd / "fifo.toml"
    os.mkfifo(fifo)
    before = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(20)
    try:
        for args in (["report"], ["plot"], ["compare", "fifo.toml"]):
            hostile.run([*args, "fifo.toml"], "is not a folder (nor a regular file)")
        writer = threading.Thread(target=fifo.write_text, args=("[workload]\nnum_requests = 2\n",))
        writer.start()
        outcome = hostile.invoke(["run", "--no-progress", "fifo.toml"])
        writer.join()
        assert outcome.exit_code == 0, outcome.output
        assert ", 2 requests" in outcome.output.splitlines()[0]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


def test_cheapest_refuses_the_one_knob_flags_it_does_not_read(hostile) -> None:
    # --lo and the like bound one knob's search: --cheapest ignored them without a word
    args = ["plan", "--cheapest", "--target", "time_to_first_token_seconds_p99<=1"]
    hostile.run([*args, "--lo", "1", "--hi", "4"], "--lo, --hi shape a one-knob plan", "--replicas")
    hostile.run([*args, "--resolution", "0.1", "--window", "60"], "--resolution, --window shape")
