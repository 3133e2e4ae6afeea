"""Suspicious but legal traces: the run goes ahead as documented, with one warning that names the
file and counts what changed (rows replayed out of file order, fewer rows than requested, rows
drawn again and again); a choice the user spelled out stays quiet."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvsim.base import say_once
from kvsim.workload import WorkloadSpec, generate_requests
from kvsim.workload.request import Request
from tests.conftest import forget_warnings

TIMED = "arrival_time_s,prompt_tokens,output_tokens\n"
OUT_OF_ORDER = TIMED + "0,10,5\n5,12,6\n2,14,7\n"  # line 4 (2 s) comes after line 3 (5 s)
TIMED_THREE = TIMED + "0,10,5\n1,12,6\n2,14,7\n"
THREE_ROWS = "prompt_tokens,output_tokens\n10,5\n12,6\n14,7\n"


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def _run(caplog: pytest.LogCaptureFixture, **fields: object) -> tuple[list[Request], list[str]]:
    """The requests of a workload and the warnings logged while drawing them."""
    with caplog.at_level(logging.WARNING, logger="kvsim.workload"):
        reqs = generate_requests(
            WorkloadSpec.model_validate(fields), np.random.default_rng(0), max_model_len=4096
        )
    return reqs, [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_out_of_order_arrivals_are_sorted_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _write(tmp_path, "ooo.csv", OUT_OF_ORDER)
    reqs, warnings = _run(caplog, trace=path, arrival="trace")
    # sorting stays: the 2 s row runs second
    assert [(r.arrival_time_s, r.prompt_tokens) for r in reqs] == [(0.0, 10), (2.0, 14), (5.0, 12)]
    assert warnings == [
        f"{path}: 1 of 3 rows arrive before a row above them (first at line 4); replaying them "
        "sorted by arrival time"
    ]


@pytest.mark.parametrize(
    "text",
    [TIMED + "0,10,5\n2,12,6\n2,14,7\n", TIMED_THREE],
    ids=["ties", "sorted"],
)
def test_sorted_arrivals_are_quiet(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str
) -> None:
    _, warnings = _run(caplog, trace=_write(tmp_path, "ok.csv", text), arrival="trace")
    assert warnings == []


def test_out_of_order_line_skips_blank_jsonl_lines(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    row = '{{"timestamp": {}, "input_length": 10, "output_length": 5}}\n'
    # lines 1, 3, 4 hold rows (line 2 is blank): the 2,000 ms row is on line 4
    text = row.format(0) + "\n" + row.format(5000) + row.format(2000)
    _, warnings = _run(caplog, trace=_write(tmp_path, "mc.jsonl", text), arrival="trace")
    assert len(warnings) == 1
    assert "1 of 3 rows arrive before a row above them (first at line 4)" in warnings[0]


def test_out_of_order_parquet_names_the_row(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "ooo.parquet"
    frame = {"arrival_time_s": [0.0, 5.0, 2.0, 1.0], "prompt_tokens": [10] * 4}
    pd.DataFrame({**frame, "output_tokens": [5] * 4}).to_parquet(path)
    _, warnings = _run(caplog, trace=str(path), arrival="trace")
    assert warnings == [
        f"{path}: 2 of 4 rows arrive before a row above them (first at row 3); replaying them "
        "sorted by arrival time"
    ]


@pytest.mark.parametrize(
    ("text", "fields", "num_run", "rows"),
    [
        (TIMED_THREE, {"arrival": "trace", "num_requests": 10}, 3, "3 rows"),
        (
            TIMED_THREE,
            {"arrival": "trace", "num_requests": 10, "duration_s": 1.5},
            2,
            "2 rows (of 3 in the file, after the filters and the window)",
        ),
        (THREE_ROWS, {"sample": "replay", "num_requests": 10}, 3, "3 rows"),
    ],
    ids=["replayed_trace", "window_counts_the_file", "replay_under_synthetic_arrivals"],
)
def test_num_requests_beyond_the_rows_a_replay_has_is_warned(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    text: str,
    fields: dict[str, object],
    num_run: int,
    rows: str,
) -> None:
    path = _write(tmp_path, "three.csv", text)
    reqs, warnings = _run(caplog, trace=path, **fields)
    assert len(reqs) == num_run
    assert warnings == [
        f"{path}: workload.num_requests = 10, but the trace has only {rows} to replay; running "
        f"{num_run} requests"
    ]


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        (TIMED_THREE, {"arrival": "trace"}),  # num_requests unset: the whole trace, as documented
        (TIMED_THREE, {"arrival": "trace", "num_requests": 3}),
        (TIMED_THREE, {"arrival": "trace", "num_requests": 2}),
        (THREE_ROWS, {"sample": "replay"}),
        (THREE_ROWS, {"sample": "replay", "num_requests": 3}),
    ],
    ids=["all", "exactly", "fewer", "replay_all", "replay_exactly"],
)
def test_replays_within_the_trace_are_quiet(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str, fields: dict[str, object]
) -> None:
    _, warnings = _run(caplog, trace=_write(tmp_path, "three.csv", text), **fields)
    assert warnings == []


def test_default_resampling_beyond_the_trace_is_warned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _write(tmp_path, "three.csv", THREE_ROWS)
    reqs, warnings = _run(caplog, trace=path)  # Poisson arrivals, 1,000 requests by default
    assert len(reqs) == 1000
    assert {r.prompt_tokens for r in reqs} == {10, 12, 14}
    assert warnings == [
        f"{path}: more requests are drawn than its 3 rows: prompt and output lengths are "
        "resampled with replacement, so rows repeat; set workload.sample = 'resample' to "
        "confirm, or 'replay' to run each row once"
    ]


def test_default_resampling_counts_the_rows_left_by_the_filters(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _write(tmp_path, "zero.csv", "prompt_tokens,output_tokens\n10,5\n12,0\n14,7\n")
    _, warnings = _run(caplog, trace=path, num_requests=4)
    assert warnings[-1].startswith(
        f"{path}: more requests are drawn than its 2 rows (of 3 in the file, after the filters): "
    )


@pytest.mark.parametrize(
    "fields",
    [{"sample": "resample", "num_requests": 50}, {"num_requests": 3}],
    ids=["explicit_resample", "no_more_than_rows"],
)
def test_resampling_the_user_asked_for_is_quiet(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fields: dict[str, object]
) -> None:
    _, warnings = _run(caplog, trace=_write(tmp_path, "three.csv", THREE_ROWS), **fields)
    assert warnings == []


@pytest.mark.parametrize(
    "fields",
    [
        {"trace": "THREE_ROWS"},  # resampled: more requests than rows at either rate
        {"trace": "TIMED_THREE", "sample": "replay"},  # arrival times left unused
        {"trace": "azure_conv", "fallback_synthetic": True},  # missing: the shipped table
    ],
    ids=["resampled", "timed_rows_as_lengths", "missing_trace_fallback"],
)
def test_a_warning_reads_the_same_at_every_rate(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    fields: dict[str, object],
) -> None:
    # a plan or a sweep draws one workload at many rates, and a duration_s workload draws more
    # requests at a higher one: a warning naming the rate or the count drawn was a new text at
    # each point, so it was said once per point (fig12 --quick without its trace: 30 times)
    monkeypatch.setenv("KVSIM_DATA", str(tmp_path))  # holds no azure_conv file
    texts = {"THREE_ROWS": THREE_ROWS, "TIMED_THREE": TIMED_THREE}
    if fields["trace"] in texts:
        fields = {**fields, "trace": _write(tmp_path, "t.csv", texts[str(fields["trace"])])}
    said = []
    for rate_per_s in (1.0, 4.0):
        monkeypatch.setattr(say_once, "SAID", set())
        forget_warnings(caplog)
        said.append(_run(caplog, **fields, rate_per_s=rate_per_s, duration_s=20.0)[1])
    assert said[0], "the workload warns"
    assert said[0] == said[1]


def test_truncate_counts_the_rows_it_cuts(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _write(tmp_path, "ov.csv", TIMED + "0,5000,10\n1,4090,100\n2,100,5000\n3,10,5\n")
    reqs, warnings = _run(caplog, trace=path, arrival="trace", overflow="truncate")
    # max_model_len 4096: prompt 5000 -> 4095, output 10 -> 4096 - 4095 = 1; 4090 + 100 ->
    # output 6; 100 + 5000 -> output 3996; 10 + 5 fits and is left alone
    lengths = [(r.prompt_tokens, r.output_tokens) for r in reqs]
    assert lengths == [(4095, 1), (4090, 6), (100, 3996), (10, 5)]
    assert warnings == [
        f"{path}: overflow='truncate' cut 3 of 4 requests to max_model_len = 4096 tokens (1 "
        "prompt to 4095 tokens, 3 outputs to fit)"
    ]


def _mooncake(*extras: str) -> str:
    """One 600-token Mooncake row per entry of ``extras`` (its keys after the lengths)."""
    return "".join(
        f'{{"timestamp": {i}, "input_length": 600, "output_length": 3{extra}}}\n'
        for i, extra in enumerate(extras)
    )


def test_unknown_jsonl_keys_are_warned_with_counts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = _mooncake(', "model": "a"', "", ', "model": "b", "region": 1')
    path = _write(tmp_path, "mc.jsonl", text)
    reqs, warnings = _run(caplog, trace=path, arrival="trace")
    assert len(reqs) == 3  # read as before, the keys ignored
    assert warnings == [
        f"{path}: ignored 2 key(s) the mooncake trace format does not have: 'model' (on 2 of 3 "
        "rows), 'region' (on 1 of 3 rows) (known: ['hash_ids', 'input_length', "
        "'output_length', 'timestamp'])"
    ]


def test_bailian_type_and_turn_are_its_own_keys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text = (
        '{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0, "input_length": 5, '
        '"output_length": 3, "type": "text", "turn": 1}\n'
    )
    _, warnings = _run(caplog, trace=_write(tmp_path, "qwen.jsonl", text), arrival="trace")
    assert warnings == []


def test_an_empty_hash_ids_list_counts_as_a_mismatch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # 600 tokens are cdiv(600, 512) = 2 blocks: [1, 2] matches; [] (0 ids) and [3] (1 id) do
    # not; a row without hash_ids names no blocks and is not counted
    text = _mooncake(', "hash_ids": [1, 2]', ', "hash_ids": []', ', "hash_ids": [3]', "")
    path = _write(tmp_path, "mc.jsonl", text)
    _, warnings = _run(caplog, trace=path, arrival="trace")
    assert warnings == [
        f"{path}: 2 of 4 rows have a number of hash_ids other than cdiv(prompt tokens, 512); "
        "their prompts are cut or padded to their length"
    ]


def test_an_empty_hash_ids_cell_counts_and_a_blank_one_not(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # as in JSON Lines: 32 tokens are 2 blocks of 16; "[]" lists none of them, a blank cell
    # names no blocks
    text = "prompt_tokens,output_tokens,hash_ids\n32,5,1 2\n32,5,[]\n32,5,\n"
    path = _write(tmp_path, "own.csv", text)
    _, warnings = _run(caplog, trace=path, sample="replay", hash_block_size_tokens=16)
    assert warnings == [
        f"{path}: 1 of 3 rows have a number of hash_ids other than cdiv(prompt tokens, 16); "
        "their prompts are cut or padded to their length"
    ]


def test_a_prefix_group_of_mixed_lengths_is_warned_about_and_shares_the_shorter(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Group a's rows (lines 2 and 3) give 50 and 60 prefix tokens, group b's one row 10: legal,
    the two a rows sharing their first 50 tokens, but said once, with the lines; a group of
    one length is quiet."""
    text = (
        "prompt_tokens,output_tokens,prefix_group,prefix_tokens\n"
        "100,5,a,50\n100,5,a,60\n100,5,b,10\n100,5,,\n"
    )
    path = _write(tmp_path, "pg.csv", text)
    reqs, warnings = _run(caplog, trace=path, sample="replay")
    assert warnings == [
        f"{path}: 1 prefix group with rows of different prefix_tokens (group 'a': 50, 60; line 2 "
        "and line 3); two rows of a group share the shorter of their prefixes"
    ]
    first, second = (tuple(r.token_segments or ()) for r in reqs[:2])
    assert first[0][0] == second[0][0]  # one group stream: token t of it is the same token
    assert (first[0][1], second[0][1]) == (50, 60)
    forget_warnings(caplog)
    same = _write(tmp_path, "same.csv", text.replace("a,60", "a,50"))
    assert _run(caplog, trace=same, sample="replay")[1] == []


def test_a_header_holding_two_formats_lengths_is_read_as_one_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # kvsim's prompt_tokens/output_tokens beside Azure's three columns: Azure's shares more, so
    # the run used 7/7 and dropped 100/5 without a word
    text = "prompt_tokens,output_tokens,ContextTokens,GeneratedTokens,TIMESTAMP\n"
    text += "100,5,7,7,2023-11-16 18:15:46\n"
    path = _write(tmp_path, "both.csv", text)
    reqs, warnings = _run(caplog, trace=path)
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(7, 7)]
    said = [w for w in warnings if "holds the lengths of the azure trace format and of kvsim" in w]
    assert said, warnings
    assert "workload.trace_format" in said[0]
    # one format's columns alone: quiet
    forget_warnings(caplog)
    _, warnings = _run(caplog, trace=_write(tmp_path, "one.csv", THREE_ROWS))
    assert not [w for w in warnings if "holds the lengths" in w]


def test_overflow_drop_removes_rows_whose_length_passes_int64(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # prompt + output wrapped past 2**63 - 1 to a negative sum, under any max_model_len: the
    # rows went on to the engine, to be rejected there instead of dropped
    big = 2**63 - 1
    text = f"{TIMED}0,100,5\n1,{big},1\n2,100,{big}\n3,{2**62},{2**62}\n"
    reqs, _ = _run(caplog, trace=_write(tmp_path, "long.csv", text), overflow="drop")
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(100, 5)]


def test_max_tokens_caps_a_traces_outputs_with_a_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = _write(tmp_path, "t.csv", TIMED_THREE)  # outputs 5, 6, 7
    with caplog.at_level(logging.INFO, logger="kvsim.workload"):
        reqs = generate_requests(
            WorkloadSpec(trace=path, arrival="trace", max_tokens=6),
            np.random.default_rng(0),
            max_model_len=4096,
        )
    # a cap of 6 cuts only the 7-token output: 1 of the 3 rows
    assert [r.output_tokens for r in reqs] == [5, 6, 6]
    notes = [r.getMessage() for r in caplog.records if "max_tokens" in r.getMessage()]
    assert notes == [f"{path}: workload.max_tokens = 6 caps the output of 1 of its 3 rows kept"]


def test_a_cap_no_row_reaches_is_quiet(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _write(tmp_path, "t.csv", TIMED_THREE)
    with caplog.at_level(logging.INFO, logger="kvsim.workload"):
        generate_requests(
            WorkloadSpec(trace=path, arrival="trace", max_tokens=7),
            np.random.default_rng(0),
            max_model_len=4096,
        )
    assert not [r for r in caplog.records if "max_tokens" in r.getMessage()]


def test_num_requests_that_duration_s_cuts_short_is_warned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 1 request/s for 10 s: about 10 arrive (P(>= 40) is below 1e-11), far from the 1,000 asked
    fields = {"lengths": "fixed", "rate_per_s": 1.0, "duration_s": 10.0}
    reqs, warnings = _run(caplog, **fields, num_requests=1000)
    assert 0 < len(reqs) < 40
    assert warnings == [
        "workload.num_requests = 1000, but workload.duration_s = 10 s ends the arrivals first: "
        "the requests arriving within it run; leave one of the two out to say which limit counts"
    ]


def test_num_requests_reached_within_duration_s_is_quiet(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # 5 requests at 1/s arrive within 1,000 s but with probability below 1e-400
    fields = {"lengths": "fixed", "rate_per_s": 1.0, "duration_s": 1000.0}
    reqs, warnings = _run(caplog, **fields, num_requests=5)
    assert len(reqs) == 5
    assert warnings == []
