"""The printed summary: sections by what ran, rounding for people, two runs compared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kvsim.cli import app
from kvsim.summary_view import compare_table, format_metric, sections


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("token_states_pct", 96.349, "96.3"),
        ("kv_cache_usage_perc", 0.43219, "0.432"),
        ("time_to_first_token_seconds_p99", 0.0421, "42.1 ms"),
        ("e2e_request_latency_seconds_p50", 12.345, "12.3 s"),
        ("throughput_output_tokens_per_s", 1234.5, "1,234"),
        ("throughput_requests_per_s", 0.8583, "0.858"),
        ("num_preemptions", 12345, "12,345"),
        ("cow_copy_bytes", 3 * 2**30, "3.00 GiB"),
        ("prefix_cache_hit_rate", float("nan"), "-"),
        ("preemption_mode", "swap", "swap"),
    ],
)
def test_format_metric(key: str, value: object, shown: str) -> None:
    assert format_metric(key, value) == shown


BASE = {
    "token_states_pct": 50.0,
    "num_preemptions": 0,
    "time_to_first_token_seconds_p50": 0.1,
    "enable_prefix_caching": False,
    "preemption_mode": "default",
}


def _names(summary: dict[str, object]) -> list[str]:
    return [name for name, _ in sections(summary)]


def test_sections_follow_what_ran() -> None:
    assert _names(BASE) == ["KV memory", "scheduler", "latency"]
    prefix = {**BASE, "enable_prefix_caching": True, "prefix_cache_hit_rate": 0.25}
    assert "prefix cache" in _names(prefix)
    shared = {**BASE, "kv_saved_by_sharing_pct": 12.0, "num_cow_copies": 3}
    assert "sharing" in _names(shared)
    unshared = {**BASE, "kv_saved_by_sharing_pct": 0.0}
    assert "sharing" not in _names(unshared)
    swap = {**BASE, "preemption_mode": "swap", "num_swap_outs": 0}
    assert "swap" in _names(swap)


def test_compare_shows_b_minus_a() -> None:
    a = {**BASE, "num_preemptions": 10, "time_to_first_token_seconds_p50": 0.200}
    b = {**BASE, "num_preemptions": 15, "time_to_first_token_seconds_p50": 0.150}
    console = Console(width=200, record=True)
    console.print(compare_table(a, b, "A", "B"))
    text = console.export_text()
    preempt = next(line for line in text.splitlines() if "num_preemptions" in line)
    assert "+5" in preempt
    assert "+50.0 %" in preempt  # (15 - 10) / 10
    ttft = next(line for line in text.splitlines() if "time_to_first_token" in line)
    assert "-50 ms" in ttft
    assert "-25.0 %" in ttft  # (0.150 - 0.200) / 0.200


def test_cli_run_then_compare(tmp_path: Path) -> None:
    runner = CliRunner()
    common = ["--set", "workload.num_requests=40"]
    ra = runner.invoke(app, ["run", *common, "--out", str(tmp_path / "a")])
    rb = runner.invoke(
        app,
        ["run", *common, "--set", "cache.block_size_tokens=32", "--out", str(tmp_path / "b")],
    )
    assert ra.exit_code == 0, ra.output
    assert rb.exit_code == 0, rb.output
    assert "vllm-v1 (preemption: recompute)" in " ".join(ra.output.split())
    assert "blocks" in ra.output
    result = runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "b")])
    assert result.exit_code == 0, result.output
    a = json.loads((tmp_path / "a" / "summary.json").read_text())
    b = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert a["num_gpu_blocks"] == 2 * b["num_gpu_blocks"] or a["num_gpu_blocks"] - 2 * b[
        "num_gpu_blocks"
    ] in (0, 1)  # the same bytes in blocks twice as large
    assert "B - A" in result.output


def test_cli_compare_missing_run_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["compare", str(tmp_path), str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "no summary.json" in result.output


def test_no_percentage_change_from_a_base_that_shows_as_zero():
    from kvsim.summary_view import _difference

    # 0.0004 % shows as "0.0": a change of +293229.1 % of it tells nobody anything
    assert _difference("kv_external_fragmentation_pct", 0.0004, 1.2) == ("+1.2", "")
    assert _difference("kv_external_fragmentation_pct", 10.0, 12.0) == ("+2.0", "+20.0 %")
