"""A command given the wrong kind of results folder, a file, or a folder that is not there says
which it is and what reads it, in one error line (``kvsim.results.folders``); ``kvsim run``
given a folder or a trace file says what they are for."""

from __future__ import annotations

import pytest

RUN = ("run/summary.json", '{"num_requests": 1, "config_key": "0123abcd"}')  # (a run's has its key)
SWEEP = ("sweep/summary.csv", "config_key\nx\n")  # (the CSV twin counts: no pyarrow needed)
PLAN = ("plan/answer.json", "{}")
EXPERIMENT = 'name = "e"\n[grid]\n"cache.block_size_tokens" = [8, 16]\n'

# command line -> (files made, fragments of the error line)
CASES = {
    "report_a_sweep": (
        ["report", "sweep"],
        [SWEEP],
        # (named by the file it holds: here the CSV twin)
        ["is a sweep folder (summary.csv), not a run folder", "kvsim plot draws it"],
    ),
    "report_a_missing_folder": (["report", "nope"], [], ["RUN_DIR 'nope': no such folder"]),
    "report_an_experiment_file": (
        ["report", "e.toml"],
        [("e.toml", EXPERIMENT)],
        ["is a file, expected a run folder: an experiment", "kvsim sweep e.toml"],
    ),
    "compare_a_config_file": (  # (it was read as JSON: "invalid JSON")
        ["compare", "run", "e.toml"],
        [RUN, ("e.toml", EXPERIMENT)],
        ["e.toml: is a file, expected a run folder: an experiment", "kvsim sweep e.toml"],
    ),
    "compare_a_missing_folder": (["compare", "run", "nope"], [RUN], ["nope: no such folder"]),
    "compare_a_plan": (
        ["compare", "run", "plan"],
        [RUN, PLAN],
        ["plan: is a plan folder (answer.json), not a run folder"],
    ),
    "plot_a_run": (
        ["plot", "run"],
        [RUN],
        ["run: is a run folder (summary.json), not a sweep folder", "kvsim report"],
    ),
    "plot_an_empty_folder": (
        ["plot", "empty"],
        [("empty/notes.txt", "x")],
        ["empty: holds no summary.parquet (a sweep folder: kvsim sweep writes one)"],
    ),
    "plan_a_results_folder": (
        ["plan", "run"],
        [RUN],
        ["run: is a run folder (kvsim report and kvsim compare read it), expected a config"],
    ),
    "run_a_results_folder": (
        ["run", "run"],
        [RUN],
        ["run: is a run folder (kvsim report and kvsim compare read it), expected a config"],
    ),
    # a results file: the trace advice fired for it, and following it failed
    "run_a_results_file": (
        ["run", "run/summary.json"],
        [RUN],
        ["run/summary.json: is part of the run folder run (kvsim report and kvsim compare"],
    ),
    "run_a_parquet_file": (  # (it said "not UTF-8 text ... save the file as UTF-8")
        ["run", "t.parquet"],
        [("t.parquet", "PAR1")],
        ["t.parquet: is a Parquet file", "--set workload.trace=t.parquet"],
    ),
    "run_a_trace_file": (
        ["run", "t.csv"],
        [("t.csv", "prompt_tokens,output_tokens\n10,5\n")],
        ["t.csv: invalid TOML", "a trace file is a workload: kvsim run --set workload.trace=t.csv"],
    ),
    # a config written as JSON: it was called a trace
    "run_a_json_config": (
        ["run", "c.json"],
        [("c.json", '{"model": "llama-3.1-8b", "cache": {"kv_cache_gib": 4}}')],
        ["c.json is a JSON object of config fields (model, cache): kvsim reads a config as TOML"],
    ),
    "run_a_json_trace": (
        ["run", "t.json"],
        [("t.json", '{"timestamp": 0, "input_length": 10, "output_length": 2}\n')],
        ["a trace file is a workload: kvsim run --set workload.trace=t.json"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_wrong_folder_or_file_says_what_it_is(hostile, case: str) -> None:
    args, files, fragments = CASES[case]
    for name, text in files:
        hostile.write(name, text)
    hostile.run(args, *fragments)
