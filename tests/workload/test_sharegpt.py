"""ShareGPT JSON conversations counted with a tiny word-level tokenizer built here with the
``tokenizers`` library (no hub): every whitespace-separated word is one token and the template
adds one ``<s>`` to every encoded text, so each count below is words + 1 (or words)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from tokenizers.processors import TemplateProcessing
from typer.testing import CliRunner

from kvsim.cli import app
from kvsim.config import config_from_dict
from kvsim.engine import simulate
from kvsim.engine.intake import requests_for

WORDS = [
    *("hello", "world", "how", "are", "you", "fine", "thanks", "and", "what", "about"),
    *("the", "weather", "today", "sunny"),
]
CONVERSATIONS = [
    {
        "id": "a",
        "conversations": [
            {"from": "human", "value": "hello how are you"},  # 4 words
            {"from": "gpt", "value": "fine thanks and you"},  # 4 words
            {"from": "human", "value": "what about the weather"},  # 4 words
            {"from": "gpt", "value": "sunny today"},  # 2 words
        ],
    },
    {"id": "b", "conversations": [{"from": "human", "value": "hello"}]},  # too short: skipped
    {
        "id": "c",
        "conversations": [
            {"from": "system", "value": "the weather"},  # 2 words
            {"from": "human", "value": "how are you today"},  # 4 words
            {"from": "gpt", "value": "fine"},  # 1 word
        ],
    },
]


@pytest.fixture
def tokenizer_json(tmp_path: Path) -> Path:
    vocab = {"[UNK]": 0, "<s>": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    tokenizer = Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = Whitespace()
    tokenizer.post_processor = TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    path = tmp_path / "tok" / "tokenizer.json"
    path.parent.mkdir()
    tokenizer.save(str(path))
    return path


def _sharegpt(tmp_path: Path, entries: list | None = None) -> str:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(entries if entries is not None else CONVERSATIONS, indent=2))
    return str(path)


def _requests(workload: dict) -> list:
    return requests_for(config_from_dict({"workload": workload}))


def test_first_turn_as_vllm_counts_it(tmp_path: Path, tokenizer_json: Path) -> None:
    workload = {"trace": _sharegpt(tmp_path), "tokenizer": str(tokenizer_json.parent)}
    reqs = _requests({**workload, "sample": "replay", "rate_per_s": 1.0})
    # message 0 and message 1 of each conversation of >= 2 messages, each words + <s>:
    # a: "hello how are you" 4 + 1, "fine thanks and you" 4 + 1; c: "the weather" 2 + 1 and
    # "how are you today" 4 + 1 (the first two messages, whatever their roles, as vLLM does)
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(5, 5), (3, 5)]


def test_multiturn_history_grows(
    tmp_path: Path, tokenizer_json: Path, caplog: pytest.LogCaptureFixture
) -> None:
    workload = {
        "trace": _sharegpt(tmp_path),
        "tokenizer": str(tokenizer_json),
        "trace_format": "sharegpt_multiturn",
        "sample": "replay",
        "rate_per_s": 0.01,
        "turn_gap_s": 5.0,
    }
    with caplog.at_level(logging.WARNING, logger="kvsim.workload"):
        reqs = _requests(workload)
    assert any("skipped 1 of 3 conversations" in r.getMessage() for r in caplog.records)
    rows = sorted((r.session_id, r.prompt_tokens, r.output_tokens) for r in reqs)
    # a, turn 1: <s> + 4 = 5 prompt, 4 output; turn 2: <s> + 4 + 4 + 4 = 13 prompt, 2 output
    # c: <s> + system 2 + human 4 = 7 prompt, 1 output
    assert rows == [(0, 5, 4), (0, 13, 2), (1, 7, 1)]
    turn1, turn2 = sorted((r for r in reqs if r.session_id == 0), key=lambda r: r.arrival_time_s)
    assert turn2.arrival_time_s - turn1.arrival_time_s == 5.0
    # turn 2 starts with turn 1's prompt and output (5 + 4 tokens), then 4 new tokens
    assert turn2.token_segments == (
        (("prompt", turn1.req_id), 5),
        (("gen", turn1.req_id), 4),
        (("turn", turn2.req_id), 4),
    )


def test_multiturn_runs_and_hits_its_history(tmp_path: Path, tokenizer_json: Path) -> None:
    # one conversation of 16-token messages (words repeat): turn 1 prompt <s> + 16 = 17,
    # output 16; turn 2 prompt 17 + 16 + 16 = 49
    sixteen = " ".join(["hello"] * 16)
    entries = [
        {
            "conversations": [
                {"from": "human", "value": sixteen},
                {"from": "gpt", "value": sixteen},
                {"from": "human", "value": sixteen},
                {"from": "gpt", "value": sixteen},
            ]
        }
    ]
    workload = {
        "trace": _sharegpt(tmp_path, entries),
        "tokenizer": str(tokenizer_json),
        "trace_format": "sharegpt_multiturn",
        "sample": "replay",
        "turn_gap_s": 60.0,
    }
    results = simulate(config_from_dict({"workload": workload, "cache": {"block_size_tokens": 16}}))
    df = results.requests.sort_values("arrival_time_s")
    assert df["prompt_tokens"].tolist() == [17, 49]
    # turn 1 computed 17 + 16 - 1 = 32 tokens: 2 full blocks cached; turn 2 may hit
    # floor(48 / 16) = 3 blocks but only the first 2 exist: 32 tokens
    assert df["num_cached_tokens"].tolist() == [0, 32]


def test_cli_reads_sharegpt(tmp_path: Path, tokenizer_json: Path) -> None:
    args = ["run", "--no-progress", "--set", f"workload.trace={_sharegpt(tmp_path)}"]
    args += ["--set", f"workload.tokenizer={tokenizer_json}", "--set", "workload.sample=replay"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["prompt_tokens_total"] == 5 + 3


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            [CONVERSATIONS[0], {"id": "x", "conversations": "hello"}],
            # json.dumps(indent=2): "[" on line 1, conversation a spans lines 2-22
            r"sharegpt\.json line 23: conversation 1: conversations must be a list of "
            r"messages, got 'hello'",
        ),
        (
            [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": 5}]}],
            r"sharegpt\.json line 2: conversation 0: conversations\[1\]\.value must be a "
            r"string, got 5",
        ),
    ],
)
def test_malformed_conversation(
    tmp_path: Path, tokenizer_json: Path, entries: list, message: str
) -> None:
    workload = {"trace": _sharegpt(tmp_path, entries), "tokenizer": str(tokenizer_json)}
    with pytest.raises(ValueError, match=message):
        _requests(workload)


def test_invalid_json_and_missing_tokenizer(tmp_path: Path, tokenizer_json: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('[\n  {"conversations": [}\n]\n')
    with pytest.raises(ValueError, match=r"broken\.json line 2: invalid JSON"):
        _requests({"trace": str(path), "tokenizer": str(tokenizer_json)})
    with pytest.raises(ValueError, match=r"set workload\.tokenizer to a local Hugging Face"):
        _requests({"trace": _sharegpt(tmp_path)})


def test_cli_bad_conversation_is_one_line(tmp_path: Path, tokenizer_json: Path) -> None:
    bad = [{"conversations": [{"from": "human"}, {"from": "gpt", "value": "x"}]}]
    args = ["run", "--no-progress", "--set", f"workload.trace={_sharegpt(tmp_path, bad)}"]
    result = CliRunner().invoke(app, [*args, "--set", f"workload.tokenizer={tokenizer_json}"])
    assert result.exit_code == 2
    assert (
        "sharegpt.json line 2: conversation 0: conversations[0].value must be a string, got None"
        in result.output
    )


def test_tokenizer_is_for_text_traces_only(tmp_path: Path, tokenizer_json: Path) -> None:
    path = tmp_path / "counts.csv"
    path.write_text("prompt_tokens,output_tokens\n10,5\n")
    with pytest.raises(ValueError, match=r"workload\.tokenizer applies to ShareGPT conversations"):
        _requests({"trace": str(path), "tokenizer": str(tokenizer_json), "sample": "replay"})
