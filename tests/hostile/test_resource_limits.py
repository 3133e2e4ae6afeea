"""Inputs that used to hang, exhaust memory, crash with Python's own message or leave files behind:
a model of a trillion layers, ten million requests at once, groups of a hundred million
sequences, JSON nested a hundred thousand levels deep, a loop of symbolic links, integers of
200,000 digits, NaN timestamps, a summary holding NaN, a group wider than vLLM v0's
max_num_seqs, a Dask address that is no address. Each is refused up front with one line naming
the file, line, field and value, and what was expected."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

RUN = ["run", "--no-progress", "--set", "workload.num_requests=3"]
REPLAY = ["--set", "workload.sample=replay"]
DIGITS = "9" * 200_000
DEEP = "[" * 100_000 + "]" * 100_000
MOON = '{"timestamp": 0, "input_length": 6, "output_length": 3}'
LLAMA = {  # Llama-3.1-8B's config.json, less what kvsim does not read
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "vocab_size": 128256,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 8192,
}


def _hf(hostile, name: str, **fields: object) -> Path:
    return hostile.write(f"{name}/config.json", json.dumps({**LLAMA, **fields}, indent=1))


def test_a_model_of_a_trillion_layers_is_refused_before_counting_them(hostile) -> None:
    # counting the parameters walked the layers one by one: minutes, then a budget error
    path = _hf(hostile, "deep", num_hidden_layers=10**12)
    hostile.run(
        [*RUN, "--set", f"model.hf_config={path}"],
        "config.json line 7",
        "num_hidden_layers must be at most 100,000",
        "1,000,000,000,000",
    )


def test_kv_heads_that_do_not_divide_the_query_heads_name_the_files_field(hostile) -> None:
    # it said "num_attention_heads (32) must be a multiple of num_kv_heads (7)": no file, and
    # not the field the file spells
    path = _hf(hostile, "gqa", num_key_value_heads=7)
    hostile.run(
        [*RUN, "--set", f"model.hf_config={path}"],
        "config.json line 6",
        "num_key_value_heads = 7 must divide num_attention_heads = 32",
    )


def test_a_derived_budget_too_small_names_gpu_memory_utilization(hostile) -> None:
    # OPT-13B's 23.9 GiB of weights in 0.3 x 40 GiB = 12 GiB: the message opened with the model
    hostile.run(
        [*RUN, "--set", "cache.gpu_memory_utilization=0.3"],
        "error: cache.gpu_memory_utilization = 0.3 (opt-13b on a100-40gb",
        "weights alone are short by 11.9 GiB",
    )


def test_ten_million_requests_at_once_are_refused_up_front(hostile) -> None:
    # 5.8 GiB and minutes of drawing before the first step, nothing shown
    hostile.run(
        ["run", "--set", "workload.rate_per_s=1e9", "--set", "workload.num_requests=10000000"],
        "workload.num_requests: at most 1,000,000 requests per run",
        "got 10,000,000",
    )


@pytest.mark.parametrize("column", ["n", "beam_width"])
def test_a_trace_row_of_a_hundred_million_sequences_is_refused(hostile, column: str) -> None:
    # MemoryError (or minutes fanning out 10^8 requests)
    path = hostile.write(
        "wide.csv", f"prompt_tokens,output_tokens,{column}\n10,5,1\n10,5,100000000\n"
    )
    engine = ["--set", "scheduler.engine=vllm-v0"] if column == "beam_width" else []
    hostile.run(
        [*RUN, "--set", f"workload.trace={path}", *REPLAY, *engine],
        "wide.csv line 3",
        f"{column} must be at most 4,096 (sequences of one request), got '100000000'",
    )


def test_more_sequences_than_a_run_holds_are_refused(hostile) -> None:
    # 1,000 requests of n = 4,096: 4,096,000 sequences (requests to vLLM v1)
    hostile.run(
        ["run", "--set", "workload.num_requests=1000", "--set", "workload.n=4096"],
        "workload.n: 1,000 requests of 4,096 sequences are 4,096,000",
        "1,000,000 one run holds",
    )
    # a trace's rows decide theirs: 300 rows of n = 4,096 (1,228,800 sequences)
    rows = "".join("10,5,4096\n" for _ in range(300))
    path = hostile.write("wide.csv", "prompt_tokens,output_tokens,n\n" + rows)
    hostile.run(
        ["run", "--set", f"workload.trace={path}", *REPLAY],
        "1,228,800 sequences in 300 requests (n or beam_width up to 4,096",
    )


def test_json_lines_nested_a_hundred_thousand_levels_deep(hostile) -> None:
    # RecursionError, reported as an internal error
    path = hostile.write("deep.jsonl", f'{MOON}\n{{"timestamp": 1, "hash_ids": {DEEP}}}\n')
    hostile.run(
        [*RUN, "--set", f"workload.trace={path}"],
        "deep.jsonl line 2: JSON nested more than 500 levels deep",
    )


def test_sharegpt_nested_a_hundred_thousand_levels_deep(hostile) -> None:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    tokenizer = hostile.cwd / "tok.json"
    Tokenizer(WordLevel({"[UNK]": 0}, unk_token="[UNK]")).save(str(tokenizer))
    # the depth passes 500 on the file's third line
    path = hostile.write("deep.json", '[\n{"conversations":\n' + DEEP + "}]\n")
    args = [*RUN, "--set", f"workload.trace={path}", "--set", f"workload.tokenizer={tokenizer}"]
    hostile.run(
        [*args, *REPLAY, "--set", "workload.trace_format=sharegpt"],
        "deep.json line 3: JSON nested more than 500 levels deep",
    )


def test_a_loop_of_symbolic_links_as_the_trace(hostile) -> None:
    # RuntimeError: Symlink loop, reported as an internal error
    os.symlink("b.csv", hostile.cwd / "a.csv")
    os.symlink("a.csv", hostile.cwd / "b.csv")
    hostile.run(
        [*RUN, "--set", "workload.trace=a.csv"],
        "workload.trace 'a.csv': a loop of symbolic links (a.csv -> b.csv -> a.csv)",
    )


def test_a_loop_of_symbolic_links_as_the_models_config(hostile) -> None:
    # "[Errno 40] Too many levels of symbolic links: 'config.json'": no field, no context
    os.symlink("config.json", hostile.cwd / "config.json")
    hostile.run(
        [*RUN, "--set", "model.hf_config=config.json"],
        "hf_config config.json: cannot read (Too many levels of symbolic links)",
    )


INTEGER_CASES = {
    # where: (file name, content, --set pairs, fragments)
    "csv": (
        "t.csv",
        f"prompt_tokens,output_tokens\n10,5\n{DIGITS},5\n",
        REPLAY,
        ["t.csv line 3", "prompt_tokens must be an integer <=", "(200,000 characters)"],
    ),
    "json_lines": (
        "t.jsonl",
        f'{MOON}\n{{"timestamp": 1, "input_length": {DIGITS}, "output_length": 3}}\n',
        [],
        ["t.jsonl line 2", "input_length must be at most", "an integer of 200,000 digits"],
    ),
}


@pytest.mark.parametrize("case", sorted(INTEGER_CASES))
def test_an_integer_of_200000_digits_in_a_trace(hostile, case: str) -> None:
    # "Exceeds the limit (4300 digits) for integer string conversion", no file or field
    name, content, sets, expected = INTEGER_CASES[case]
    path = hostile.write(name, content)
    hostile.run([*RUN, "--set", f"workload.trace={path}", *sets], *expected)


def test_an_integer_of_200000_digits_in_a_config(hostile) -> None:
    config = hostile.write("c.toml", f"seed = 1\n[workload]\nnum_requests = {DIGITS}\n")
    hostile.run(
        ["run", "--no-progress", config],
        "c.toml line 3: num_requests = an integer of 200,000 digits",
    )
    hostile.run(
        ["run", "--set", f"workload.num_requests={DIGITS}"],
        "--set workload.num_requests: an integer of 200,000 digits",
    )
    path = hostile.write(
        "big/config.json", json.dumps(LLAMA, indent=1).replace("32,", DIGITS + ",")
    )
    hostile.run(
        [*RUN, "--set", f"model.hf_config={path}"],
        "config.json line 5: num_attention_heads must be an integer from 1 to 100,000",
        "got an integer of 200,000 digits",
    )


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_non_finite_timestamp_names_the_field(hostile, value: str) -> None:
    # it said "invalid JSON (NaN is not a JSON number ...)"
    row = f'{{"timestamp": {value}, "input_length": 6, "output_length": 3}}'
    path = hostile.write("t.jsonl", f"{MOON}\n{row}\n")
    hostile.run(
        [*RUN, "--set", f"workload.trace={path}"],
        f"t.jsonl line 2: timestamp must be a non-negative number (ms), got {value}",
    )


def test_report_on_a_summary_holding_nan(hostile) -> None:
    # "cannot convert float NaN to integer"; a NaN literal is no value kvsim writes (null)
    folder = hostile.out / "r"
    hostile.run(["run", *RUN[1:], "--out", folder], code=0)
    summary = json.loads((folder / "summary.json").read_text())
    summary["capacity_tokens"] = float("nan")
    (folder / "summary.json").write_text(json.dumps(summary))  # (writes NaN)
    hostile.run(
        ["report", folder, "--out", hostile.out / "r.html"],
        "r/summary.json: capacity_tokens is nan, expected a number, true, false or null",
    )
    assert not (hostile.out / "r.html").exists()


def test_a_v0_group_wider_than_max_num_seqs_names_max_num_seqs(hostile) -> None:
    # 257 sequences of 10 + 5 tokens need 144 slots of the pool's 13,184, but v0 counts each
    # against max_num_seqs = 256: "raise the KV budget" named the wrong cause
    fixed = ["workload.lengths=fixed", "workload.fixed_prompt_tokens=10"]
    fixed += ["workload.fixed_output_tokens=5", "scheduler.engine=vllm-v0", "workload.n=257"]
    args = [*RUN]
    for pair in fixed:
        args += ["--set", pair]
    hostile.run(
        args,
        "workload.n = 257",
        "scheduler.max_num_seqs = 256 (vLLM v0's default), so this group never starts "
        "whatever the KV budget; raise scheduler.max_num_seqs",
    )
    hostile.run([*args, "--set", "scheduler.max_num_seqs=257"], code=0)


def test_reproduce_with_a_bad_scheduler_writes_nothing(hostile) -> None:
    # experiment.json and summary.parquet were left in results/fig2/ after the refusal
    hostile.run(
        ["reproduce", "fig2", "--scheduler", "nonsense", "--no-progress"],
        "--scheduler: 'nonsense' is not a Dask scheduler address such as tcp://HOST:PORT",
    )
    assert not (hostile.cwd / "results").exists()
