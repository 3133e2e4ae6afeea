"""Bad input in each trace format: the CLI exits with status 2 and one line naming the file (its
path as given: ``{path}`` in an expected line), the line (or Parquet row), the field, the value and
what was expected."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from kvsim.cli import app

OWN = "arrival_time_s,prompt_tokens,output_tokens\n"

CASES = {
    # JSON Lines under another name: read as a CSV its header was JSON fragments
    "jsonl_named_ndjson": (
        "trace.ndjson",
        '{"timestamp": 0, "input_length": 100, "output_length": 20, "hash_ids": [0]}\n',
        [],
        "{path}: the file holds JSON objects but its name does not say so; name it trace.jsonl "
        "(JSON Lines: Mooncake, Qwen-Bailian)",
    ),
    "own_output": (
        "bad.csv",
        OWN + "0,10,5\n1,12,many\n",
        ["workload.arrival=trace"],
        "{path} line 3: output_tokens must be a non-negative integer, got 'many'",
    ),
    "own_arrival": (
        "bad.csv",
        OWN + "-1,10,5\n",
        ["workload.arrival=trace"],
        "{path} line 2: arrival_time_s must be a non-negative number (s) at most 1e+09, "
        "or Unix times (s) in every row, got '-1'",
    ),
    # a quoted session id over three lines: the bad row is line 6, not the 4th row's "line 5"
    "own_multiline_field": (
        "bad.csv",
        'prompt_tokens,output_tokens,session_id\n100,5,"multi\nline\nid"\n100,5,x\n100,bad,y\n',
        ["workload.sample=replay"],
        "{path} line 6: output_tokens must be a non-negative integer, got 'bad'",
    ),
    "own_n": (
        "bad.csv",
        "prompt_tokens,output_tokens,n\n10,5,1\n10,5,0\n",
        ["workload.sample=replay"],
        "{path} line 3: n must be an integer >= 1, got '0'",
    ),
    "own_n_and_beam": (
        "bad.csv",
        "prompt_tokens,output_tokens,n,beam_width\n10,5,2,4\n",
        ["workload.sample=replay"],
        "{path} line 2: n = 2 and beam_width = 4: a request is parallel sampling or beam "
        "search, not both",
    ),
    "own_hash_ids": (
        "bad.csv",
        "prompt_tokens,output_tokens,hash_ids\n10,5,1 x\n",
        ["workload.sample=replay"],
        "{path} line 2: hash_ids must be integers separated by spaces (or a JSON list), got '1 x'",
    ),
    "own_hash_block_size": (
        "own.csv",
        "prompt_tokens,output_tokens,hash_ids\n10,5,1\n",
        ["workload.sample=replay"],
        "workload.hash_block_size_tokens: {path} has hash_ids; give the tokens per hash block",
    ),
    "own_prefix_tokens": (
        "bad.csv",
        "prompt_tokens,output_tokens,prefix_group,prefix_tokens\n10,5,sys,12\n",
        ["workload.sample=replay"],
        "{path} line 2: prefix_tokens must be between 1 and the row's prompt_tokens (10) for "
        "prefix_group 'sys', got '12'",
    ),
    "azure_2024": (
        "azure.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-10 00:00:00.009930+00:00,100,10\n"
        "2024-05-10 25:00:00+00:00,100,10\n",
        ["workload.arrival=trace"],
        "{path} line 3: TIMESTAMP must be a timestamp like '2023-11-16 18:15:46.6805900' or "
        "'2024-05-10 00:00:00.009930+00:00' (ISO 8601), got '2024-05-10 25:00:00+00:00'",
    ),
    "vidur": (
        "vidur.csv",
        "arrived_at,num_prefill_tokens,num_decode_tokens\nsoon,374,44\n",
        ["workload.arrival=trace"],
        "{path} line 2: arrived_at must be a non-negative number (s) at most 1e+09, "
        "or Unix times (s) in every row, got 'soon'",
    ),
    "burstgpt": (
        "burst.csv",
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,12.5,18,30,API log\n",
        ["workload.arrival=trace"],
        "{path} line 2: Request tokens must be a non-negative integer, got '12.5'",
    ),
    "mooncake": (
        "mc.jsonl",
        '{"timestamp": -5, "input_length": 10, "output_length": 3}\n',
        ["workload.arrival=trace"],
        "{path} line 1: timestamp must be a non-negative number (ms), got -5",
    ),
    "mooncake_duplicate_key": (  # json.loads keeps the last value (5) silently
        "mc.jsonl",
        '{"timestamp": 0, "input_length": 10, "output_length": 3}\n'
        '{"timestamp": 1, "input_length": 10, "output_length": 3, "timestamp": 5}\n',
        ["workload.arrival=trace"],
        "{path} line 2: key 'timestamp' appears more than once in one object; expected each "
        "key once",
    ),
    "bailian_parent": (
        "qwen.jsonl",
        '{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0, "input_length": 5, '
        '"output_length": 3}\n'
        '{"chat_id": 2, "parent_chat_id": "x", "timestamp": 1, "input_length": 5, '
        '"output_length": 3}\n',
        ["workload.arrival=trace"],
        "{path} line 2: parent_chat_id must be -1 or a chat_id, got 'x'",
    ),
    # four requests of one chat_id were read as four turns of one conversation, 30 s apart
    "bailian_chat_id_twice": (
        "qwen.jsonl",
        '{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0, "input_length": 5, '
        '"output_length": 3}\n'
        '{"chat_id": 1, "parent_chat_id": -1, "timestamp": 1, "input_length": 5, '
        '"output_length": 3}\n',
        ["workload.arrival=trace"],
        "{path} line 2: chat_id 1 again (first on line 1)",
    ),
    "bailian_own_parent": (
        "qwen.jsonl",
        '{"chat_id": 7, "parent_chat_id": 7, "timestamp": 0, "input_length": 5, '
        '"output_length": 3}\n',
        ["workload.arrival=trace"],
        "{path} line 1: parent_chat_id 7 is the row's own chat_id",
    ),
    # 1's parent is 2, 2's is 1: a cycle, and a child before its parent
    "bailian_parent_after_child": (
        "qwen.jsonl",
        '{"chat_id": 1, "parent_chat_id": 2, "timestamp": 0, "input_length": 5, '
        '"output_length": 3}\n'
        '{"chat_id": 2, "parent_chat_id": 1, "timestamp": 1, "input_length": 5, '
        '"output_length": 3}\n',
        ["workload.arrival=trace"],
        "{path} line 2: chat_id 2 is the parent of line 1, an earlier row",
    ),
    "bailian_timestamp": (
        "qwen.jsonl",
        '{"chat_id": 1, "parent_chat_id": -1, "timestamp": "noon", "input_length": 5, '
        '"output_length": 3}\n',
        ["workload.arrival=trace"],
        "{path} line 1: timestamp must be a non-negative number (s), got 'noon'",
    ),
    "own_short_row": (
        "bad.csv",
        "input_tokens,output_tokens\n10,5\n12,3\n7\n",
        ["workload.sample=replay"],
        "{path} line 4: 1 field, expected 2 (input_tokens, output_tokens)",
    ),
    "own_long_rows": (  # every row one field longer: pandas took the first as an index and
        # read the prompt as 20 and the output as 7, with no error
        "bad.csv",
        "prompt_tokens,output_tokens\n100,20,7\n200,30,8\n",
        ["workload.sample=replay"],
        "{path} line 2: 3 fields, expected 2 (prompt_tokens, output_tokens)",
    ),
    "own_trailing_commas": (  # read as an index of the prompts, shifted: "got ''"
        "bad.csv",
        "prompt_tokens,output_tokens\n100,20,\n200,30,\n",
        ["workload.sample=replay"],
        "{path} line 2: 3 fields, expected 2 (prompt_tokens, output_tokens); a comma at the "
        "end of each line?",
    ),
    "own_short_row_optional_cell": (  # malformed even where the missing cell may be blank
        "bad.csv",
        "prompt_tokens,output_tokens,session_id\n10,5,a\n12,3\n",
        ["workload.sample=replay"],
        "{path} line 3: 2 fields, expected 3 (prompt_tokens, output_tokens, session_id)",
    ),
    "own_duplicate_column": (  # pandas reads the first copy, the other as prompt_tokens.1
        "bad.csv",
        "prompt_tokens,output_tokens,prompt_tokens\n10,5,20\n",
        ["workload.sample=replay"],
        "{path} line 1: the header names column 'prompt_tokens' twice (columns 1 and 3); "
        "expected each column once",
    ),
    "own_blank_cell": (  # the right number of fields, one of them empty
        "bad.csv",
        "input_tokens,output_tokens\n10,5\n12,\n",
        ["workload.sample=replay"],
        "{path} line 3: output_tokens must be a non-negative integer, got ''",
    ),
    "tokenizer_on_counts": (
        "own.csv",
        OWN + "0,10,5\n",
        ["workload.arrival=trace", "workload.tokenizer=/nowhere/tokenizer.json"],
        "workload.tokenizer: expected a Hugging Face tokenizer.json (or its folder), got "
        "'/nowhere/tokenizer.json'",
    ),
    "beam_under_v1": (
        "beam.csv",
        "arrival_time_s,prompt_tokens,output_tokens,beam_width\n0,10,5,1\n1,10,5,3\n",
        ["workload.arrival=trace"],
        "1 request(s) with beam_width > 1 (first: request 1, beam_width 3); beam search runs "
        "outside vLLM v1's engine",
    ),
}


def _invoke(path: Path, sets: list[str]) -> str:
    args = ["run", "--no-progress", "--set", f"workload.trace={path}"]
    for pair in sets:
        args += ["--set", pair]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    return errors[0]


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line(tmp_path: Path, case: str) -> None:
    name, text, sets, expected = CASES[case]
    path = tmp_path / name
    path.write_text(text)
    assert expected.replace("{path}", str(path)) in _invoke(path, sets)


def test_relative_path_is_named_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative trace path is shown as typed, not cut to its base name nor resolved."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "bad.csv").write_text(OWN + "0,10,5\n1,12,many\n")
    monkeypatch.chdir(tmp_path)
    line = _invoke(Path("data/bad.csv"), ["workload.arrival=trace"])
    assert line.startswith("error: data/bad.csv line 3: output_tokens"), line


def test_bad_parquet_cell_names_the_row(tmp_path: Path) -> None:
    path = tmp_path / "bad.parquet"
    pd.DataFrame({"prompt_tokens": [10, -3], "output_tokens": [5, 5]}).to_parquet(path)
    line = _invoke(path, ["workload.sample=replay"])
    assert f"{path} row 2: prompt_tokens must be a non-negative integer, got -3" in line


def test_nested_hash_ids_are_refused_not_flattened(tmp_path: Path) -> None:
    # [[1, 2], [3]] read as the blocks 1, 2, 3 would share prefixes with rows it does not
    parquet = tmp_path / "nested.parquet"
    pd.DataFrame(
        {"prompt_tokens": [48], "output_tokens": [5], "hash_ids": [[[1, 2], [3]]]}
    ).to_parquet(parquet)
    sets = ["workload.sample=replay", "workload.hash_block_size_tokens=16"]
    line = _invoke(parquet, sets)
    assert f"{parquet} row 1: hash_ids must be a flat list of integers, got [[1, 2], [3]]" in line
    text = tmp_path / "nested.csv"
    text.write_text('prompt_tokens,output_tokens,hash_ids\n48,5,"[[1, 2], [3]]"\n')
    line = _invoke(text, sets)
    assert f"{text} line 2: hash_ids must be a flat list of integers, got '[[1, 2], [3]]'" in line


def test_a_parquet_column_named_twice_is_named(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "dup.parquet"
    columns = [pa.array([10]), pa.array([5]), pa.array([7])]
    names = ["prompt_tokens", "output_tokens", "output_tokens"]
    pq.write_table(pa.Table.from_arrays(columns, names=names), path)
    line = _invoke(path, ["workload.sample=replay"])
    assert line == (
        f"error: {path}: the schema names column 'output_tokens' twice (columns 2 and 3); "
        "expected each column once"
    )


def test_unknown_trace_format_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(OWN + "0,10,5\n")
    line = _invoke(path, ["workload.trace_format=splitwise"])
    assert "workload.trace_format" in line
    assert "'splitwise'" in line


def _gzip(text: str) -> bytes:
    import gzip

    return gzip.compress(text.encode(), mtime=0)  # (the same bytes in every process)


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        # cut short: pandas' EOFError was an internal error (exit 1)
        ("cut.csv.gz", _gzip(OWN + "0,10,5\n" * 50)[:30], "a compressed trace that cannot be"),
        ("plain.csv.gz", (OWN + "0,10,5\n").encode(), "BadGzipFile"),
        # read as text: "invalid JSON" / "not UTF-8", with no word of compression
        ("packed.jsonl", _gzip('{"timestamp": 0}\n'), "gzip-compressed but its name does not"),
        ("packed.csv", _gzip(OWN + "0,10,5\n"), "name it packed.csv.gz or decompress it"),
        # read by its suffix as a table: "unrecognised CSV header"
        ("packed.jsonl.gz", _gzip('{"timestamp": 0}\n'), "compressed JSON traces are not read"),
    ],
    # (ids by name: ids holding the bytes differed between xdist workers by the gzip header's
    # time, which stopped the run's collection)
    ids=["cut.csv.gz", "plain.csv.gz", "packed.jsonl", "packed.csv", "packed.jsonl.gz"],
)
def test_a_compressed_trace_that_cannot_be_read_is_named(
    tmp_path: Path, name: str, content: bytes, expected: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    line = _invoke(path, ["workload.sample=replay"])
    assert line.startswith(f"error: {path}: "), line
    assert expected in line


def test_a_parquet_file_named_otherwise_is_named(tmp_path: Path) -> None:
    # read by its .csv name as text: "not UTF-8 ... save the file as UTF-8"
    path = tmp_path / "table.csv"
    pd.DataFrame({"prompt_tokens": [10], "output_tokens": [5]}).to_parquet(path)
    line = _invoke(path, ["workload.sample=replay"])
    assert (
        f"{path}: the file is Parquet but its name does not say so; name it table.parquet" in line
    )
