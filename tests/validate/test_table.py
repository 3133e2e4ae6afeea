"""The error table: peers' numbers matched to the same run, medians, and the Markdown written
between its markers (the text around it kept)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kvsim.validate.markdown import BEGIN, END, write_between_markers
from kvsim.validate.peers import h100_peer_errors, llmservingsim_summary
from kvsim.validate.table import ErrorTable, build_table, medians

from .synthetic import TRAIN, VALIDATE, write_h100, write_rtx4090

_HEADER = (
    "simulator,experiment_folder,model,workload,stage_index,metric_name,predicted,actual,"
    "mape,mpe,absolute_error,exp_id,hardware,dp,cpu_offload,gpu_mem_util,precision,tp,"
    "max_num_batched_tokens\n"
)


def _row(sim: str, folder: str, stage: int, metric: str, predicted: float, actual: float) -> str:
    mpe = 100 * (predicted - actual) / actual
    return (
        f"{sim},{folder},org/Tiny,codegen,{stage},{metric},{predicted},{actual},{abs(mpe)},{mpe},"
        f"{abs(predicted - actual)},2,H100,,True,0.9,FP16,1,256\n"
    )


def test_peers_are_matched_by_the_measured_mean(tmp_path: Path) -> None:
    # two experiments with the same model, TP and workload: only the one whose measured mean
    # E2E (ms in the file) is the run's 0.5 s is taken
    path = tmp_path / "peer_errors.csv"
    path.write_text(
        _HEADER
        + _row("blis-roofline", "2-tiny-codegen", -1, "e2e_mean", 600.0, 500.0)
        + _row("blis-roofline", "2-tiny-codegen", -1, "ttft_p99", 45.0, 50.0)
        + _row("blis-roofline", "9-tiny-codegen", -1, "e2e_mean", 900.0, 700.0)
    )
    peers = h100_peer_errors(path, "Tiny", 1, "codegen", 0.5)
    assert set(peers["experiment_folder"]) == {"2-tiny-codegen"}
    e2e = peers[(peers["metric"] == "e2e_s") & (peers["statistic"] == "mean")].iloc[0]
    assert e2e["measured"] == pytest.approx(0.5)
    assert e2e["predicted"] == pytest.approx(0.6)
    assert e2e["error_pct"] == pytest.approx(20.0)
    assert h100_peer_errors(path, "Tiny", 2, "codegen", 0.5).empty  # another TP


def test_a_malformed_peer_row_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "peer_errors.csv"
    path.write_text(
        _HEADER
        + _row("blis", "2-tiny-codegen", -1, "e2e_mean", 1.0, 1.0).replace(",1,256", ",one,256")
    )
    with pytest.raises(
        ValueError, match=r"peer_errors.csv line 2: tp must be an integer, got 'one'"
    ):
        h100_peer_errors(path, "Tiny", 1, "codegen", 0.001)


def test_llmservingsim_summary_in_seconds(tmp_path: Path) -> None:
    path = tmp_path / "summary.txt"
    path.write_text(
        "Metric vLLM Sim Diff%\nTTFT Mean   65456.6   65820.2   +0.6%\nTPOT P95  48.1 48.2 +0.2%\n"
    )
    frame = llmservingsim_summary(path)
    assert list(frame["metric"]) == ["ttft_s"]  # P95 is not a statistic of the table
    assert frame.iloc[0]["measured"] == pytest.approx(65.4566)
    assert frame.iloc[0]["error_pct"] == pytest.approx(0.6)


@pytest.fixture
def synthetic_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ErrorTable:
    """The error table of the synthetic validate, RTX 4090 and train runs."""
    write_h100(tmp_path)
    write_rtx4090(tmp_path)
    monkeypatch.setenv("KVSIM_REAL_VLLM", str(tmp_path))
    return build_table([VALIDATE, "rtx4090-llama-3.1-8b", TRAIN], root=tmp_path)


def test_the_table_sets_kvsim_beside_the_peers(synthetic_table: ErrorTable) -> None:
    table = synthetic_table
    head = table.headline
    assert set(head["experiment"]) == {VALIDATE, TRAIN, "rtx4090-llama-3.1-8b"}
    rtx = head[head["experiment"] == "rtx4090-llama-3.1-8b"].set_index(["metric", "statistic"])
    # the synthetic summary: TTFT mean +1.0 %, latency p99 -1.0 % (llmservingsim_summary.txt)
    assert rtx.loc[("ttft_s", "mean"), "llmservingsim"] == pytest.approx(1.0)
    assert rtx.loc[("e2e_s", "p99"), "llmservingsim"] == pytest.approx(-1.0)
    assert np.isnan(rtx.loc[("e2e_s", "mean"), "blis-roofline"])
    assert table.kv is not None
    found = medians(head, ("validate", "held-out"))
    expected = head[head["split"].isin(("validate", "held-out"))]
    e2e = expected[(expected["metric"] == "e2e_s") & (expected["statistic"] == "mean")]["kvsim"]
    assert found[("e2e_s", "mean")] == pytest.approx(float(e2e.abs().median()))


def test_markdown_goes_between_the_markers(tmp_path: Path) -> None:
    doc = tmp_path / "validate.md"
    doc.write_text("# Title\n\ntext\n")
    write_between_markers(doc, "table one")
    write_between_markers(doc, "table two")
    text = doc.read_text()
    assert text.startswith("# Title\n\ntext\n")
    assert text.count(BEGIN) == 1
    assert text.count(END) == 1
    assert "table two" in text
    assert "table one" not in text


def test_the_readme_table_has_a_row_per_held_out_run(synthetic_table: ErrorTable) -> None:
    from kvsim.validate.markdown import readme_markdown

    table = synthetic_table
    lines = readme_markdown(table, "make validate").splitlines()
    rows = [line for line in lines if line.startswith("|")]
    body = rows[2:]  # after the header and the rule
    assert len(body) == 2  # the validate run and the RTX 4090 run; the train run is not there
    assert not any(TRAIN.split("-", 2)[-1] in row for row in body)
    # each row names its split: the validate runs chose the fit that ships, held-out ones not
    rtx = next(row for row in body if row.startswith("| rtx4090-llama-3.1-8b | held-out |"))
    assert sum(" | validate | " in row for row in body) == 1
    # LLMServingSim's TTFT mean on it: +1.0 % (the synthetic llmservingsim_summary.txt)
    assert rtx.rstrip().endswith("/ +1.0 |")
