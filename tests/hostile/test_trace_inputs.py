"""Hostile trace files of every format kvsim reads: kvsim's own CSV and Parquet, Azure, Vidur,
BurstGPT, the paper's ShareGPT/Alpaca length lists, Mooncake and Qwen-Bailian JSON Lines, ShareGPT
JSON. Each is refused with one line naming the file, the line (or Parquet row), the field and the
value; nothing is simulated."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

RUN = ["run", "--no-progress", "--set", "workload.num_requests=3"]
INT65 = str(2**65)
OWN = "prompt_tokens,output_tokens\n"
TIMED = "arrival_time_s,prompt_tokens,output_tokens\n"
AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
REPLAY = ["workload.sample=replay"]
ARRIVE = ["workload.arrival=trace"]


def _jsonl(*records: str) -> str:
    return "".join(f"{r}\n" for r in records)


MOON_OK = '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]}'
QWEN_OK = (
    '{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0, "input_length": 5, "output_length": 3}'
)

# id: (file name, content, extra --set pairs, fragments of the error line)
TEXT_CASES: dict[str, tuple[str, str | bytes, list[str], list[str]]] = {
    # kvsim's own CSV
    "own_prompt_beyond_int64": (
        "t.csv",
        OWN + f"10,5\n{INT65},5\n",
        REPLAY,
        ["t.csv line 3", "prompt_tokens", INT65],
    ),
    "own_output_negative": ("t.csv", OWN + "10,-5\n", REPLAY, ["t.csv line 2", "output_tokens"]),
    "own_output_fraction": ("t.csv", OWN + "10,5.5\n", REPLAY, ["t.csv line 2", "'5.5'"]),
    # Unicode digits other than 0-9 (Arabic-Indic 100, full-width 10) are not numbers here
    "own_prompt_arabic_indic": (
        "t.csv",
        OWN + "\u0661\u0660\u0660,5\n",
        REPLAY,
        ["t.csv line 2", "prompt_tokens", "'\u0661\u0660\u0660'"],
    ),
    "own_output_full_width": (
        "t.csv",
        OWN + "10,\uff11\uff10\n",
        REPLAY,
        ["t.csv line 2", "output_tokens", "'\uff11\uff10'"],
    ),
    "own_output_exponent": ("t.csv", OWN + "10,1e3\n", REPLAY, ["t.csv line 2", "'1e3'"]),
    "own_arrival_inf": ("t.csv", TIMED + "0,10,5\ninf,10,5\n", ARRIVE, ["line 3", "'inf'"]),
    "own_arrival_nan": ("t.csv", TIMED + "nan,10,5\n", ARRIVE, ["line 2", "arrival_time_s"]),
    "own_arrival_overflow": ("t.csv", TIMED + "0,10,5\n1e400,10,5\n", ARRIVE, ["line 3", "1e400"]),
    "own_arrival_1e300": (
        "t.csv",
        TIMED + "0,10,5\n1e300,10,5\n",
        ARRIVE,
        ["t.csv line 3", "arrival_time_s", "at most 1e+09", "'1e300'"],
    ),
    # the file's times are the time axis, up to 1e9 s; Unix times in some rows only are neither
    "own_arrival_epoch_mixed": (
        "t.csv",
        TIMED + "5,10,5\n1700000000,10,5\n",
        ARRIVE,
        ["t.csv line 3", "arrival_time_s", "'1700000000'", "Unix times"],
    ),
    # OWN is the header, line 1: the byte is on line 2 (it said "can't decode byte 0xff in
    # position 3", pandas' offset in its buffer, no line)
    "own_not_utf8": (
        "t.csv",
        OWN.encode() + b"10,\xff\n",
        REPLAY,
        ["t.csv line 2: not UTF-8 text (got byte 0xff"],
    ),
    "own_missing_column": ("t.csv", "prompt_tokens,n\n10,1\n", REPLAY, ["t.csv", "output_tokens"]),
    "own_unknown_header": ("t.csv", "a,b\n1,2\n", REPLAY, ["t.csv", "unrecognised CSV header"]),
    "own_empty_file": ("t.csv", "", REPLAY, ["t.csv: empty, expected a CSV header line"]),
    "own_header_only": ("t.csv", OWN, REPLAY, ["t.csv", "no requests"]),
    "own_ragged_row": ("t.csv", OWN + "10,5\n1,2,3,4\n", REPLAY, ["t.csv", "malformed CSV"]),
    "own_short_row": (
        "t.csv",
        OWN + "10,5\n7\n",
        REPLAY,
        ["t.csv line 3", "1 field, expected 2 (prompt_tokens, output_tokens)"],
    ),
    # pandas says "row 2" (0-based) for the quote opened on the file's line 3
    "own_unclosed_quote": (
        "t.csv",
        OWN + '10,5\n"20,5\n30,4\n',
        REPLAY,
        ["t.csv", "malformed CSV", "starting at line 3"],
    ),
    "own_hash_ids_beyond_int64": (
        "t.csv",
        "prompt_tokens,output_tokens,hash_ids\n10,5,1 " + INT65 + "\n",
        [*REPLAY, "workload.hash_block_size_tokens=16"],
        ["t.csv line 2", "hash_ids", "64-bit"],
    ),
    "own_n_beyond_int64": (
        "t.csv",
        f"prompt_tokens,output_tokens,n\n10,5,{INT65}\n",
        REPLAY,
        ["t.csv line 2", "n", INT65],
    ),
    "own_prefix_longer_than_prompt": (
        "t.csv",
        "prompt_tokens,output_tokens,prefix_group,prefix_tokens\n10,5,sys,11\n",
        REPLAY,
        ["t.csv line 2", "prefix_tokens", "'11'"],
    ),
    # the first copy would be read (10) and the warning name 'prompt_tokens.1'; with a UTF-8 BOM
    # the first name must still match the third
    "own_duplicate_length_column": (
        "t.csv",
        b"\xef\xbb\xbfprompt_tokens,output_tokens,prompt_tokens\n10,5,20\n",
        REPLAY,
        ["t.csv line 1", "column 'prompt_tokens' twice (columns 1 and 3)"],
    ),
    "own_all_rows_empty": ("t.csv", OWN + "0,0\n0,0\n", REPLAY, ["no requests left", "t.csv"]),
    "own_nul_bytes": ("t.csv", OWN.encode() + b"1\x000,5\n", REPLAY, ["t.csv line 2"]),
    # Azure 2023/2024
    "azure_bad_timestamp": (
        "az.csv",
        AZURE + "2023-11-16 18:15:46.6805900,10,5\nyesterday,10,5\n",
        ARRIVE,
        ["az.csv line 3", "TIMESTAMP", "yesterday"],
    ),
    "azure_year_99999": (
        "az.csv",
        AZURE + "99999-01-01 00:00:00,10,5\n",
        ARRIVE,
        ["az.csv line 2", "TIMESTAMP"],
    ),
    "azure_tokens_beyond_int64": (
        "az.csv",
        AZURE + f"2023-11-16 18:15:46,{INT65},5\n",
        ARRIVE,
        ["az.csv line 2", "ContextTokens", INT65],
    ),
    "azure_missing_column": (
        "az.csv",
        "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,10\n",
        ["workload.trace_format=azure", *ARRIVE],
        ["az.csv", "GeneratedTokens"],
    ),
    # Vidur
    "vidur_decode_text": (
        "v.csv",
        "num_prefill_tokens,num_decode_tokens\n10,x\n",
        REPLAY,
        ["v.csv line 2", "num_decode_tokens", "'x'"],
    ),
    "vidur_arrival_negative_inf": (
        "v.csv",
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,5\n-inf,10,5\n",
        ARRIVE,
        ["v.csv line 3", "arrived_at"],
    ),
    # BurstGPT
    "burstgpt_timestamp_nan": (
        "b.csv",
        "Timestamp,Request tokens,Response tokens\nnan,10,5\n",
        ARRIVE,
        ["b.csv line 2", "Timestamp"],
    ),
    "burstgpt_response_beyond_int64": (
        "b.csv",
        f"Timestamp,Request tokens,Response tokens\n0,10,{INT65}\n",
        ARRIVE,
        ["b.csv line 2", "Response tokens", INT65],
    ),
    # the paper's length lists
    "sharegpt_opt_float_text": (
        "s.csv",
        "input_len,output_len\n1e3,5\n",
        REPLAY,
        ["s.csv line 2", "input_len", "'1e3'"],
    ),
    "alpaca_empty_cell": (
        "a.csv",
        "input_tokens,output_tokens\n10,\n",
        REPLAY,
        ["a.csv line 2", "output_tokens"],
    ),
    "lengths_only_with_trace_arrivals": (
        "a.csv",
        "input_tokens,output_tokens\n10,5\n",
        ARRIVE,
        ["a.csv", "no arrival times"],
    ),
    # Mooncake JSON Lines (timestamps in ms)
    "mooncake_timestamp_infinity": (
        "m.jsonl",
        _jsonl(MOON_OK, '{"timestamp": Infinity, "input_length": 5, "output_length": 3}'),
        ARRIVE,
        ["m.jsonl line 2", "timestamp", "got Infinity"],
    ),
    "mooncake_timestamp_nan": (
        "m.jsonl",
        _jsonl(MOON_OK, '{"timestamp": NaN, "input_length": 5, "output_length": 3}'),
        ARRIVE,
        ["m.jsonl line 2", "timestamp", "got NaN"],
    ),
    "mooncake_timestamp_overflow": (
        "m.jsonl",
        _jsonl(MOON_OK, '{"timestamp": 1e400, "input_length": 5, "output_length": 3}'),
        ARRIVE,
        ["m.jsonl line 2", "timestamp", "inf"],
    ),
    "mooncake_timestamp_1e15_ms": (
        "m.jsonl",
        _jsonl(MOON_OK, '{"timestamp": 1e15, "input_length": 5, "output_length": 3}'),
        ARRIVE,
        ["m.jsonl line 2", "timestamp", "1000000000000000.0"],
    ),
    "mooncake_input_beyond_int64": (
        "m.jsonl",
        _jsonl(MOON_OK, f'{{"timestamp": 5, "input_length": {INT65}, "output_length": 3}}'),
        ARRIVE,
        ["m.jsonl line 2", "input_length", "64-bit"],
    ),
    "mooncake_input_5000_digits": (
        "m.jsonl",
        _jsonl(MOON_OK, '{"timestamp": 5, "input_length": ' + "9" * 5000 + ', "output_length": 3}'),
        ARRIVE,
        ["m.jsonl line 2", "input_length", "64-bit", "an integer of 5,000 digits"],
    ),
    "mooncake_hash_beyond_int64": (
        "m.jsonl",
        _jsonl(f'{{"timestamp": 5, "input_length": 5, "output_length": 3, "hash_ids": [{INT65}]}}'),
        ARRIVE,
        ["m.jsonl line 1", "hash_ids", "64-bit"],
    ),
    "mooncake_not_utf8": (
        "m.jsonl",
        (MOON_OK + "\n").encode() + b'{"timestamp": 5, "input_length": 5, "x": "\xff"}\n',
        ARRIVE,
        ["m.jsonl line 2", "not UTF-8"],
    ),
    "mooncake_array_line": ("m.jsonl", _jsonl(MOON_OK, "[1, 2, 3]"), ARRIVE, ["line 2", "object"]),
    "mooncake_missing_output": (
        "m.jsonl",
        _jsonl('{"timestamp": 5, "input_length": 5}'),
        ARRIVE,
        ["m.jsonl line 1", "output_length"],
    ),
    "mooncake_timestamp_text": (
        "m.jsonl",
        _jsonl('{"timestamp": "5", "input_length": 5, "output_length": 3}'),
        ARRIVE,
        ["m.jsonl line 1", "timestamp", "'5'"],
    ),
    "mooncake_bool_length": (
        "m.jsonl",
        _jsonl('{"timestamp": 5, "input_length": true, "output_length": 3}'),
        ARRIVE,
        ["m.jsonl line 1", "input_length", "True"],
    ),
    "mooncake_truncated_line": (
        "m.jsonl",
        MOON_OK + '\n{"timestamp": 5, "input_le',
        ARRIVE,
        ["m.jsonl line 2", "invalid JSON"],
    ),
    "mooncake_only_blank_lines": ("m.jsonl", "\n\n  \n", ARRIVE, ["m.jsonl"]),
    # Qwen-Bailian JSON Lines (timestamps in s)
    "bailian_parent_beyond_int64": (
        "q.jsonl",
        _jsonl(
            f'{{"chat_id": 2, "parent_chat_id": {INT65}, "timestamp": 1, "input_length": 5, '
            '"output_length": 3}'
        ),
        ARRIVE,
        ["q.jsonl line 1", "parent_chat_id"],
    ),
    "bailian_chat_id_negative": (
        "q.jsonl",
        _jsonl(QWEN_OK, QWEN_OK.replace('"chat_id": 1', '"chat_id": -3')),
        ARRIVE,
        ["q.jsonl line 2", "chat_id", "-3"],
    ),
    "bailian_timestamp_negative": (
        "q.jsonl",
        _jsonl(QWEN_OK.replace('"timestamp": 0', '"timestamp": -1')),
        ARRIVE,
        ["q.jsonl line 1", "timestamp", "-1"],
    ),
    # forcing the wrong format
    "forced_mooncake_on_csv": (
        "t.csv",
        OWN + "10,5\n",
        ["workload.trace_format=mooncake", *ARRIVE],
        ["t.csv line 1", "invalid JSON"],
    ),
    "forced_azure_on_own_csv": (
        "t.csv",
        OWN + "10,5\n",
        ["workload.trace_format=azure", *ARRIVE],
        ["t.csv", "missing column"],
    ),
    "unknown_format": (
        "t.csv",
        OWN + "10,5\n",
        ["workload.trace_format=splitwise2"],
        ["workload.trace_format", "splitwise2"],
    ),
}


@pytest.mark.parametrize("case", sorted(TEXT_CASES))
def test_bad_trace(hostile, case: str) -> None:
    name, content, sets, expected = TEXT_CASES[case]
    path = hostile.write(name, content)
    args = [*RUN, "--set", f"workload.trace={path}"]
    for pair in sets:
        args += ["--set", pair]
    hostile.run(args, *expected)


def _parquet(hostile, table: pa.Table) -> Path:
    path = hostile.cwd / "t.parquet"
    pq.write_table(table, path)
    return path


def test_parquet_uint64_beyond_int64(hostile) -> None:
    table = pa.table(
        {
            "prompt_tokens": pa.array([10, 2**64 - 1], pa.uint64()),
            "output_tokens": pa.array([5, 5], pa.uint64()),
        }
    )
    args = [*RUN, "--set", f"workload.trace={_parquet(hostile, table)}", "--set", *REPLAY]
    hostile.run(args, "t.parquet row 2", "prompt_tokens", str(2**64 - 1))


def test_parquet_infinite_arrival(hostile) -> None:
    frame = pd.DataFrame(
        {"arrival_time_s": [0.0, np.inf], "prompt_tokens": [10, 10], "output_tokens": [5, 5]}
    )
    path = hostile.cwd / "t.parquet"
    frame.to_parquet(path)
    args = [*RUN, "--set", f"workload.trace={path}", "--set", *ARRIVE]
    hostile.run(args, "t.parquet row 2", "arrival_time_s")


def test_parquet_text_column(hostile) -> None:
    frame = pd.DataFrame({"prompt_tokens": ["10", "ten"], "output_tokens": [5, 5]})
    path = hostile.cwd / "t.parquet"
    frame.to_parquet(path)
    args = [*RUN, "--set", f"workload.trace={path}", "--set", *REPLAY]
    hostile.run(args, "t.parquet row 2", "prompt_tokens", "'ten'")


def test_parquet_corrupt_and_empty(hostile) -> None:
    corrupt = hostile.write("c.parquet", b"PAR1 this is not parquet at all")
    args = [*RUN, "--set", f"workload.trace={corrupt}", "--set", *REPLAY]
    hostile.run(args, "c.parquet", "Parquet")
    empty = hostile.cwd / "e.parquet"
    pd.DataFrame({"prompt_tokens": pd.Series([], dtype="int64"), "output_tokens": []}).to_parquet(
        empty
    )
    args = [*RUN, "--set", f"workload.trace={empty}", "--set", *REPLAY]
    hostile.run(args, "e.parquet", "no requests")


def test_a_trace_that_is_a_device_or_a_toml_file_says_what_it_is(hostile) -> None:
    # /dev/null was "neither a known trace name nor an existing file"; a config read as a CSV
    # "holds no requests"
    args = [*RUN, "--set", "workload.trace=/dev/null", "--set", *REPLAY]
    hostile.run(args, "'/dev/null' is not a regular file (a pipe or a device)")
    config = hostile.write("c.toml", b'model = "llama-3.1-8b"\n')
    args = [*RUN, "--set", f"workload.trace={config}", "--set", *REPLAY]
    hostile.run(args, "c.toml: is a TOML file", "--set workload=FILE")


def test_trace_is_a_folder(hostile) -> None:
    folder = hostile.cwd / "trace.csv"
    folder.mkdir()
    hostile.run(
        [*RUN, "--set", f"workload.trace={folder}", "--set", *REPLAY],
        f"Trace {str(folder)!r} is a directory",
        "expected a trace file",
    )


@pytest.fixture
def tokenizer_json(hostile) -> Path:
    vocab = {"[UNK]": 0, "hello": 1, "world": 2}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    path = hostile.cwd / "tok" / "tokenizer.json"
    path.parent.mkdir()
    tokenizer.save(str(path))
    return path


GOOD_CONV = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}]}
SHAREGPT_CASES: dict[str, tuple[str | bytes, list[str]]] = {
    "not_an_array": ('{"conversations": []}', ["sg.json", "JSON array"]),
    "conversations_not_list": (
        json.dumps([GOOD_CONV, {"conversations": "hello"}], indent=1),
        ["sg.json line", "conversation 1", "conversations must be a list"],
    ),
    "message_without_value": (
        json.dumps([{"conversations": [{"from": "human"}, {"from": "gpt", "value": "x"}]}]),
        ["sg.json line 1", "conversations[0].value"],
    ),
    "message_number": (
        json.dumps([{"conversations": [7, {"from": "gpt", "value": "x"}]}]),
        ["sg.json line 1", "conversations[0]", "7"],
    ),
    "not_utf8": (
        b'[{"conversations": [{"from": "human", "value": "\xff"}]}]',
        ["sg.json", "UTF-8"],
    ),
    "invalid_json": ('[{"conversations": [}]', ["sg.json line 1", "invalid JSON"]),
    "integer_5000_digits": ("[" + "9" * 5000 + "]", ["sg.json", "an integer of 5,000 digits"]),
}


@pytest.mark.parametrize("case", sorted(SHAREGPT_CASES))
def test_bad_sharegpt(hostile, tokenizer_json, case: str) -> None:
    content, expected = SHAREGPT_CASES[case]
    path = hostile.write("sg.json", content)
    args = [
        *RUN,
        "--set",
        f"workload.trace={path}",
        "--set",
        f"workload.tokenizer={tokenizer_json}",
    ]
    hostile.run([*args, "--set", *REPLAY, "--set", "workload.trace_format=sharegpt"], *expected)


def test_sharegpt_with_a_garbage_tokenizer(hostile) -> None:
    path = hostile.write("sg.json", json.dumps([GOOD_CONV]))
    tok = hostile.write("tok/tokenizer.json", '{"not": "a tokenizer"}')
    args = [*RUN, "--set", f"workload.trace={path}", "--set", f"workload.tokenizer={tok}"]
    hostile.run([*args, "--set", *REPLAY], "workload.tokenizer", "tokenizer.json")


LENGTH_TABLES: dict[str, tuple[str | bytes, list[str]]] = {
    "wrong_columns": (
        "a,b\n1,2\n",
        ["workload.length_table", "lt.csv", "not a kvsim length table"],
    ),
    "negative_quantiles": (
        "bin,side,q0,q1\n0,prompt,-5,10\n0,output,1,2\n",
        ["workload.length_table", "prompt quantiles"],
    ),
    "infinite_quantiles": (
        "bin,side,q0,q1\n0,prompt,1,inf\n0,output,1,2\n",
        ["workload.length_table", "finite"],
    ),
    "not_utf8": (b"bin,side,q0,q1\n0,prompt,1,\xff\n", ["lt.csv", "not UTF-8"]),
    # each accepted before, every draw then read from a table not as written
    "decreasing_quantiles": (
        "# made by hand\nbin,side,q0,q1,q2\n0,prompt,30,20,10\n0,output,1,2,3\n",
        ["lt.csv line 3", "prompt quantiles must not decrease", "30,20,10"],
    ),
    "side_in_capitals": (  # the row was dropped, so bin 0 had no prompt row
        "bin,side,q0,q1\n0,Prompt,1000,2000\n0,output,1,2\n",
        ["lt.csv line 2", "side must be 'prompt' or 'output'", "'Prompt'"],
    ),
    "unmatched_bins": (
        "bin,side,q0,q1\n0,prompt,10,20\n1,output,1,2\n",
        ["lt.csv line 2", "bin 0 has no output row"],
    ),
    "duplicate_bin": (
        "bin,side,q0,q1\n0,prompt,10,20\n0,output,1,2\n0,prompt,5,6\n",
        ["lt.csv line 4", "a second prompt row for bin 0"],
    ),
    "columns_out_of_order": (
        "bin,side,q0,q2,q1\n0,prompt,10,30,20\n0,output,1,3,2\n",
        ["lt.csv line 1", "'bin,side,q0,q2,q1'", "in order"],
    ),
    "unknown_column": (
        "bin,side,q0,q1,x\n0,prompt,10,20,5\n0,output,1,2,5\n",
        ["lt.csv line 1", "'bin,side,q0,q1,x'"],
    ),
}


@pytest.mark.parametrize("case", sorted(LENGTH_TABLES))
def test_bad_length_table(hostile, case: str) -> None:
    content, expected = LENGTH_TABLES[case]
    path = hostile.write("lt.csv", content)
    sets = ["workload.lengths=table", f"workload.length_table={path}"]
    hostile.run([*RUN, "--set", sets[0], "--set", sets[1]], *expected)


def test_a_byte_order_mark_is_read_past_in_a_length_table(hostile) -> None:
    """A UTF-8 byte-order mark (Excel's "CSV UTF-8") before a length table's header was "not a
    kvsim length table header, got '\\ufeffbin,...'", where the trace reader reads past it."""
    table = "bin,side,q0,q1,q2\n0,prompt,1,5,10\n0,output,1,2,3\n"
    path = hostile.write("lt.csv", b"\xef\xbb\xbf" + table.encode())
    sets = ["workload.lengths=table", f"workload.length_table={path}"]
    hostile.run([*RUN, "--set", sets[0], "--set", sets[1]], code=0)
