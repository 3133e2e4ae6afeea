"""Malformed trace files, missing data and bad spec values give clear errors."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pydantic
import pytest

from kvsim.workload import DataNotFoundError, WorkloadSpec, data_dir, generate_requests

AZURE_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
GOOD_AZURE_ROW = "2023-11-16 18:15:46.6805900,374,44\n"


def _gen(spec: WorkloadSpec, max_model_len: int = 4096) -> list:
    return generate_requests(spec, np.random.default_rng(0), max_model_len=max_model_len)


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        (
            "2023-11-16 18:15:47.0000000,abc,5\n",
            r"bad\.csv line 3: ContextTokens must be a non-negative integer, got 'abc'",
        ),
        (
            "2023-11-16 18:15:47.0000000,12,-3\n",
            r"bad\.csv line 3: GeneratedTokens must be a non-negative integer, got '-3'",
        ),
        (
            "2023-11-16 18:15:47.0000000,12,2.5\n",
            r"bad\.csv line 3: GeneratedTokens must be a non-negative integer, got '2\.5'",
        ),
        (
            "yesterday,12,5\n",
            r"bad\.csv line 3: TIMESTAMP must be a timestamp like .*, got 'yesterday'",
        ),
        # a short row is named as one, not as a blank GeneratedTokens (pandas' fill)
        (
            "2023-11-16 18:15:47.0000000,12\n",
            r"bad\.csv line 3: 2 fields, expected 3 \(TIMESTAMP, ContextTokens, GeneratedTokens\)",
        ),
        (
            "2023-11-16 18:15:47.0000000,12,\n",
            r"bad\.csv line 3: GeneratedTokens must be a non-negative integer, got ''",
        ),
    ],
)
def test_malformed_csv_line(tmp_path: Path, row: str, message: str) -> None:
    # Line 1 is the header, line 2 a good row, line 3 the bad one.
    path = _write(tmp_path, "bad.csv", AZURE_HEADER + GOOD_AZURE_ROW + row + GOOD_AZURE_ROW)
    with pytest.raises(ValueError, match=message):
        _gen(WorkloadSpec(trace=path, arrival="trace"))


def test_blank_line_inside_csv_is_reported(tmp_path: Path) -> None:
    path = _write(tmp_path, "gap.csv", "input_len,output_len\n5,6\n\n7,8\n")
    blank = r"gap\.csv line 3: 0 fields \(a blank line\), expected 2 \(input_len, output_len\)"
    with pytest.raises(ValueError, match=blank):
        _gen(WorkloadSpec(trace=path, sample="replay"))


def test_trailing_blank_lines_are_fine(tmp_path: Path) -> None:
    path = _write(tmp_path, "tail.csv", "input_len,output_len\n5,6\n7,8\n\n\n")
    reqs = _gen(WorkloadSpec(trace=path, sample="replay"))
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(5, 6), (7, 8)]


def test_missing_column_is_named(tmp_path: Path) -> None:
    path = _write(tmp_path, "cols.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:15:46.68,5\n")
    with pytest.raises(ValueError, match=r"cols\.csv: missing column\(s\) \['GeneratedTokens'\]"):
        _gen(WorkloadSpec(trace=path, arrival="trace"))


def test_unknown_header(tmp_path: Path) -> None:
    path = _write(tmp_path, "odd.csv", "a,b\n1,2\n")
    with pytest.raises(ValueError, match=r"odd\.csv: unrecognised CSV header \['a', 'b'\]"):
        _gen(WorkloadSpec(trace=path))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json\n", r"bad\.jsonl line 2: invalid JSON"),
        (
            '{"timestamp": 5, "input_length": "x", "output_length": 3}\n',
            r"bad\.jsonl line 2: input_length must be a non-negative integer, got 'x'",
        ),
        (
            '{"timestamp": -1, "input_length": 4, "output_length": 3}\n',
            r"bad\.jsonl line 2: timestamp must be a non-negative number \(ms\), got -1",
        ),
        (
            '{"timestamp": 5, "input_length": 4}\n',
            r"bad\.jsonl line 2: missing field 'output_length'",
        ),
        (
            '{"timestamp": 5, "input_length": 4, "output_length": 3, "hash_ids": [1, "a"]}\n',
            r"bad\.jsonl line 2: hash_ids must be a list of integers",
        ),
    ],
)
def test_malformed_jsonl_line(tmp_path: Path, line: str, message: str) -> None:
    good = '{"timestamp": 0, "input_length": 600, "output_length": 3, "hash_ids": [7, 8]}\n'
    path = _write(tmp_path, "bad.jsonl", good + line)
    with pytest.raises(ValueError, match=message):
        _gen(WorkloadSpec(trace=path, arrival="trace"))


def test_user_jsonl_file(tmp_path: Path) -> None:
    text = (
        '{"timestamp": 1500, "input_length": 600, "output_length": 3, "hash_ids": [7, 8]}\n'
        '{"timestamp": 0, "input_length": 10, "output_length": 4, "hash_ids": [9]}\n'
    )
    reqs = _gen(WorkloadSpec(trace=_write(tmp_path, "u.jsonl", text), arrival="trace"))
    # Sorted by arrival: the 0 ms row first, then 1.5 s.
    assert [(r.arrival_time_s, r.prompt_tokens, r.prefix_hash_ids) for r in reqs] == [
        (0.0, 10, (9,)),
        (1.5, 600, (7, 8)),
    ]


def test_lengths_only_user_file_has_no_arrivals(tmp_path: Path) -> None:
    path = _write(tmp_path, "lens.csv", "input_len,output_len\n5,6\n")
    with pytest.raises(ValueError, match=r"lens\.csv has no arrival times"):
        _gen(WorkloadSpec(trace=path, arrival="trace"))


def test_lengths_only_named_trace_has_no_arrivals() -> None:
    with pytest.raises(
        pydantic.ValidationError,
        match=r"sharegpt_opt_firstturn_lengths\.csv\) has no arrival times",
    ):
        WorkloadSpec(trace="sharegpt_opt", arrival="trace")


def test_missing_data_dir_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVSIM_DATA", str(tmp_path))  # exists but empty
    with pytest.raises(DataNotFoundError) as info:
        _gen(WorkloadSpec(trace="azure_conv", arrival="trace"))
    message = str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    assert "azure_llm_2023_conv.csv" in message
    assert str(tmp_path) in message
    assert "KVSIM_DATA" in message
    assert "Azure/AzurePublicDataset" in message


def test_kvsim_data_not_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    missing = tmp_path / "nope"
    monkeypatch.setenv("KVSIM_DATA", str(missing))
    with pytest.raises(DataNotFoundError, match=r"KVSIM_DATA=.*nope \(not a directory\)"):
        data_dir()
    with pytest.raises(DataNotFoundError, match=r"kvcache-ai/Mooncake"):
        _gen(WorkloadSpec(trace="mooncake_conversation", arrival="trace"))


def test_kvsim_data_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "azure_llm_2023_code.csv").write_text(AZURE_HEADER + GOOD_AZURE_ROW)
    monkeypatch.setenv("KVSIM_DATA", str(tmp_path))
    assert data_dir() == tmp_path
    reqs = _gen(WorkloadSpec(trace="azure_code", arrival="trace"))
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(374, 44)]


def test_fallback_synthetic_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("KVSIM_DATA", str(tmp_path))
    spec = WorkloadSpec(
        trace="azure_conv",
        arrival="trace",
        fallback_synthetic=True,
        rate_per_s=2.0,
        num_requests=50,
    )
    with caplog.at_level(logging.WARNING, logger="kvsim.workload"):
        reqs = _gen(spec)
    assert len(reqs) == 50
    assert any("azure_llm_2023_conv.csv" in r.getMessage() for r in caplog.records)
    assert any("sharegpt_like" in r.getMessage() for r in caplog.records)
    same = _gen(WorkloadSpec(rate_per_s=2.0, num_requests=50))
    assert [(r.arrival_time_s, r.prompt_tokens) for r in reqs] == [
        (r.arrival_time_s, r.prompt_tokens) for r in same
    ]


def test_unknown_trace_name() -> None:
    with pytest.raises(DataNotFoundError, match=r"neither a known trace name"):
        _gen(WorkloadSpec(trace="no_such_trace_name"))


def test_a_misspelt_trace_name_gets_the_closest_names_a_path_none() -> None:
    with pytest.raises(
        DataNotFoundError,
        match=r"\(looked for .*azure_cov\); did you mean "
        r"'azure_conv'\? Named traces",
    ):
        _gen(WorkloadSpec(trace="azure_cov"))
    with pytest.raises(DataNotFoundError) as err:  # (a file of the user's: no guess)
        _gen(WorkloadSpec(trace="data/azure_cov.csv"))
    assert "did you mean" not in str(err.value)


def test_header_only_csv_names_the_file(tmp_path):
    from kvsim.workload import load_trace

    path = tmp_path / "empty_rows.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    with pytest.raises(ValueError, match=r"empty_rows\.csv: the trace holds no requests"):
        load_trace(path)


def test_a_directory_as_trace_is_named_so(tmp_path: Path) -> None:
    folder = tmp_path / "trace.csv"
    folder.mkdir()
    with pytest.raises(DataNotFoundError) as info:
        _gen(WorkloadSpec(trace=str(folder), sample="replay"))
    message = str(info.value)
    assert message.startswith(f"Trace {str(folder)!r} is a directory ({folder}), expected a ")
    assert "trace file (CSV, Parquet, JSON Lines or ShareGPT JSON) or a known trace name" in message


def test_a_directory_in_place_of_a_named_trace_is_named_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "azure_llm_2023_conv.csv").mkdir()
    monkeypatch.setenv("KVSIM_DATA", str(tmp_path))
    with pytest.raises(DataNotFoundError) as info:
        _gen(WorkloadSpec(trace="azure_conv", arrival="trace"))
    assert str(info.value).startswith(
        f"{tmp_path / 'azure_llm_2023_conv.csv'} is a directory, expected the trace file "
        "'azure_llm_2023_conv.csv' there."
    )


def test_a_local_file_named_like_a_catalogued_trace_is_warned_or_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    data, here = tmp_path / "data", tmp_path / "here"
    data.mkdir()
    here.mkdir()
    monkeypatch.setenv("KVSIM_DATA", str(data))
    monkeypatch.chdir(here)
    name = "azure_llm_2023_code.csv"
    (here / name).write_text(AZURE_HEADER + GOOD_AZURE_ROW.replace("374,44", "100,7"))
    # the data folder lacks it: the error says the local file is not read, and how to read it
    with pytest.raises(DataNotFoundError, match=rf"The file '{name}' in the current folder is "):
        _gen(WorkloadSpec(trace=name, arrival="trace"))
    (data / name).write_text(AZURE_HEADER + GOOD_AZURE_ROW)
    with caplog.at_level(logging.WARNING, logger="kvsim.workload"):
        reqs = _gen(WorkloadSpec(trace=name, arrival="trace"))
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(374, 44)]  # the data folder's
    said = [r.getMessage() for r in caplog.records if r.name == "kvsim.workload.catalog"]
    assert said == [
        f"workload.trace = '{name}' names the catalogued trace, read from {data / name}, not the "
        f"file of that name in the current folder; write './{name}' to read that file"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kvsim.workload"):
        reqs = _gen(WorkloadSpec(trace=f"./{name}", arrival="trace"))
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(100, 7)]
    assert caplog.records == []
