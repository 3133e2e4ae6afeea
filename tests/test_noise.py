"""What kvsim says, said once and at the right level: the no-data notice of `kvsim reproduce
fig2`, the paper's own length filter (an info line, not a warning), and prefix caching on a
trace with no token identity to match (a warning, where it used to report 0 hits silently)."""

from __future__ import annotations

import logging
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from kvsim.base import say_once
from kvsim.cli import app
from kvsim.config import config_from_dict
from kvsim.engine.intake import requests_for
from kvsim.workload import DataNotFoundError, resolve_trace
from tests.conftest import missing_trace


def test_reproduce_without_data_says_where_its_lengths_come_from_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # it was said three times: before the sweep, as each point's fallback warning, in the notes
    monkeypatch.setenv("KVSIM_DATA", str(tmp_path / "no-data"))
    monkeypatch.setattr(say_once, "SAID", set())
    args = ["reproduce", "fig2", "--quick", "--no-progress", "--out", str(tmp_path / "out")]
    with caplog.at_level(logging.WARNING):
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    said = result.output + caplog.text
    assert said.count("; no trace file in ") == 1
    assert f"KVSIM_DATA={tmp_path / 'no-data'}" in said  # where it looked
    assert "Falling back" not in said
    assert "Could not find trace file" not in said


def test_the_papers_length_filter_is_an_info_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    try:
        path, _ = resolve_trace("sharegpt_opt")
    except DataNotFoundError as exc:
        pytest.skip(missing_trace("sharegpt_opt") or str(exc))
    # the paper's filter, counted here from the file itself: prompt + output <= 2,048 tokens,
    # both >= 4 (77,543 of the 84,226 rows of the shared file)
    rows = pd.read_csv(path)
    prompt, output = rows["input_len"], rows["output_len"]
    kept = int(((prompt + output <= 2048) & (prompt >= 4) & (output >= 4)).sum())
    args = ["reproduce", "fig2", "--quick", "--no-progress", "--out", str(tmp_path)]
    with caplog.at_level(logging.WARNING):
        result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    flat = " ".join(result.output.split())
    assert f"prompt + output <= 2,048 tokens, prompt >= 4 and output >= 4 ({kept:,} of " in flat
    assert f"{len(rows):,} rows)" in flat
    assert "overflow='drop'" not in flat + caplog.text  # no WARNING line any more


# 3 rows of lengths only, and the same with Mooncake-style hash_ids (two rows share block 7)
LENGTHS_ONLY = "prompt_tokens,output_tokens\n600,5\n700,5\n800,5\n"
WITH_HASHES = "prompt_tokens,output_tokens,hash_ids\n600,5,7 8\n700,5,7 9\n800,5,10 11\n"


@pytest.mark.parametrize(
    ("text", "caching", "warned"),
    [
        (LENGTHS_ONLY, True, True),  # the Azure case: nothing to match
        (LENGTHS_ONLY, False, False),  # no cache, nothing to say
        (LENGTHS_ONLY, None, False),  # v1's default caching, not asked for: nothing to say
        (WITH_HASHES, True, False),  # hash_ids give the prompts an identity
    ],
    ids=["lengths_only", "no_cache", "v1_default", "hash_ids"],
)
def test_prefix_caching_on_a_trace_without_token_identity_is_warned(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    text: str,
    caching: bool | None,
    warned: bool,
) -> None:
    monkeypatch.setattr(say_once, "SAID", set())
    trace = tmp_path / "t.csv"
    trace.write_text(text)
    workload = {"trace": str(trace), "sample": "replay", "hash_block_size_tokens": 512}
    if "hash_ids" not in text:
        del workload["hash_block_size_tokens"]
    config = config_from_dict(
        {"cache": {"enable_prefix_caching": caching}, "workload": workload}, warn=False
    )
    with caplog.at_level(logging.WARNING, logger="kvsim"):
        requests_for(config)
        requests_for(config)  # a second run of the same process: said once
    said = [r.getMessage() for r in caplog.records if "token identity" in r.getMessage()]
    assert said == (
        [
            f"workload.trace {trace}: prefix caching is on (cache.enable_prefix_caching) but the "
            "trace gives lengths only, with no token identity to match (no hash_ids, token ids, "
            "sessions or shared prefix), so no request can hit another's cached blocks and the "
            "hits measure the trace, not the cache; set workload.shared_prefix_tokens to model "
            "a shared system prompt, or use a trace with hash_ids (Mooncake)"
        ]
        if warned
        else []
    )


def test_synthetic_lengths_are_not_warned(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # unique prompts are what a synthetic workload means: no warning on every default run
    monkeypatch.setattr(say_once, "SAID", set())
    with caplog.at_level(logging.WARNING, logger="kvsim"):
        requests_for(config_from_dict({"workload": {"num_requests": 5}}))
    assert not [r for r in caplog.records if "token identity" in r.getMessage()]
