"""The printed summary: sections by what ran, rounding for people, two runs compared."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console
from typer.testing import CliRunner

from kvsim.cli import app
from kvsim.view.summary import (
    compare_table,
    cost_note,
    format_metric,
    replica_table,
    sections,
    sweep_table,
)


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("token_states_pct", 96.349, "96.3"),
        ("kv_cache_usage_perc", 0.43219, "0.432"),
        ("time_to_first_token_seconds_p99", 0.0421, "42.1 ms"),
        ("e2e_request_latency_seconds_p50", 12.345, "12.3 s"),
        ("time_to_first_token_seconds_p50", 2112.4, "2,112 s"),  # (not 2.11e+03 s)
        ("throughput_output_tokens_per_s", 1234.5, "1,234"),
        ("throughput_requests_per_s", 0.8583, "0.858"),
        ("num_preemptions", 12345, "12,345"),
        ("cow_copy_bytes", 3 * 2**30, "3.00 GiB"),
        # below a GiB in MiB or KiB: vAttention's 64 KiB pages read "0.00 GiB"
        ("cache.page_size_bytes", 64 * 2**10, "64 KiB"),
        ("cache.page_size_bytes", 2 * 2**20, "2 MiB"),
        ("kv_offload_bytes_cpu_to_gpu", 1.5 * 2**20, "1.5 MiB"),
        ("x_bytes", 512, "512 B"),  # (whole bytes below a KiB: not "0.5 KiB")
        ("x_bytes", 2**30 - 1, "1.00 GiB"),  # (not "1024 MiB")
        ("x_bytes", 2**20 - 11, "1 MiB"),  # (1,023.99 KiB: not "1024 KiB")
        ("prefix_cache_hit_rate", float("nan"), "-"),
        ("preemption_mode", "swap", "swap"),
        # a swept setting that is a list of tables (float() of a list raised), as given and as
        # Parquet gives it back (an array of dicts)
        ("fleet.replica_overrides", [{"gpu": "a100-80gb"}], '[{"gpu": "a100-80gb"}]'),
        ("fleet.replica_overrides", np.array([{"gpu": "h200"}]), '[{"gpu": "h200"}]'),
        ("fleet.replica_overrides", [], "[]"),
        ("cache.enable_prefix_caching", np.bool_(True), "True"),  # as Parquet gives it back
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


def test_latency_section_shows_ttft_as_vllm_bench_serve_does() -> None:
    # ``vllm bench serve`` prints "Mean TTFT", "Median TTFT" and "P99 TTFT" (its default
    # ``--metric-percentiles 99`` beside mean and median); the p90 that SLOs quote is added
    ttft = {f"time_to_first_token_seconds_{s}": 0.1 for s in ("mean", "p50", "p90", "p99")}
    latency = dict(sections({**BASE, **ttft}))["latency"]
    shown = [k for k, _ in latency if k.startswith("time_to_first_token")]
    assert shown == list(ttft)


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


def test_slo_rows_show_only_with_targets() -> None:
    # without [slo] targets the attainment and goodput are NaN: three rows of "-" said nothing
    money = {**BASE, "usd_per_hour": 1.99, "cost_usd": 0.01}
    untargeted = {"slo_attainment": math.nan, "goodput_requests_per_s": math.nan}
    shown = dict(sections({**money, **untargeted, "goodput_requests_per_usd": None}))
    assert [key for key, _ in shown["money"]] == ["usd_per_hour", "cost_usd"]
    targeted = {"slo_attainment": 1.0, "goodput_requests_per_s": 0.2}
    shown = dict(sections({**money, **targeted, "goodput_requests_per_usd": 354.0}))
    assert [key for key, _ in shown["money"]][2:] == [
        "slo_attainment",
        "goodput_requests_per_s",
        "goodput_requests_per_usd",
    ]


def _compare_text(a: dict, b: dict) -> str:
    """``compare_table`` of ``a`` and ``b`` as plain text, 200 columns wide."""
    console = Console(width=200, record=True)
    console.print(compare_table(a, b, "A", "B"))
    return console.export_text()


def test_compare_shows_b_minus_a() -> None:
    a = {**BASE, "num_preemptions": 10, "time_to_first_token_seconds_p50": 0.200}
    b = {**BASE, "num_preemptions": 15, "time_to_first_token_seconds_p50": 0.150}
    text = _compare_text(a, b)
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
    # the one field the runs were given apart, as given (nothing said of what differs before)
    assert "configs differ in: cache.block_size_tokens (16 -> 32)" in result.output
    assert "replicas' means" not in result.output  # (one engine each: no note)
    assert "served different requests" not in result.output  # (one workload: the same draws)
    same = runner.invoke(app, ["compare", str(tmp_path / "a"), str(tmp_path / "a" / ".")])
    assert same.exit_code == 2
    assert "are the same run" in same.output


def test_compare_of_a_run_and_a_fleet_says_what_its_rows_measure(tmp_path: Path) -> None:
    # a fleet's gauges are its replicas' means and its counters sums: a row read per replica
    # on one side and per fleet on the other looked like an effect of the change
    runner = CliRunner()
    common = ["run", "--no-progress", "--set", "workload.num_requests=20"]
    for name, extra in (("one", []), ("two", ["--set", "fleet.replicas=2"])):
        done = runner.invoke(app, [*common, *extra, "--out", str(tmp_path / name)])
        assert done.exit_code == 0, done.output
    result = runner.invoke(app, ["compare", str(tmp_path / "one"), str(tmp_path / "two")])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert f"note: {tmp_path / 'one'} 1 replica and {tmp_path / 'two'} 2 replicas:" in text
    assert "are its replicas' means" in text


def test_compare_says_when_one_workload_table_drew_two_workloads(tmp_path: Path) -> None:
    # sharegpt_like lengths are drawn below max_model_len: at 512 no request passes 512 tokens,
    # at 2,048 many of 200 do (78 of one such draw pass 512 tokens in all), so the totals differ
    runner = CliRunner()
    common = ["run", "--no-progress", "--set", "workload.num_requests=200"]
    for name, length in (("short", 512), ("long", 2048)):
        args = [
            *common,
            "--set",
            f"scheduler.max_model_len={length}",
            "--out",
            str(tmp_path / name),
        ]
        done = runner.invoke(app, args)
        assert done.exit_code == 0, done.output
    result = runner.invoke(app, ["compare", str(tmp_path / "short"), str(tmp_path / "long")])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "note: the runs' workloads are configured alike but served different requests" in text
    assert "below each run's max_model_len (512 -> 2,048)" in text


def test_cli_compare_missing_run_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["compare", str(tmp_path), str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert f"{tmp_path}: holds no summary.json (a run folder: kvsim run --out DIR" in result.output


@pytest.mark.parametrize("text", ["{}", '{"accuracy": 0.9}'])
def test_cli_compare_refuses_a_summary_that_is_no_runs(tmp_path: Path, text: str) -> None:
    # it printed a table of dashes and exited 0
    (tmp_path / "summary.json").write_text(text)
    result = CliRunner().invoke(app, ["compare", str(tmp_path), str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "summary.json: not a kvsim run's summary (no config_key)" in " ".join(
        result.output.split()
    )


def test_no_percentage_change_from_a_base_that_shows_as_zero():
    from kvsim.view.summary import _difference

    # 0.0004 % shows as "0.0": a change of +293229.1 % of it tells nobody anything
    assert _difference("kv_external_fragmentation_pct", 0.0004, 1.2) == ("+1.2", "")
    assert _difference("kv_external_fragmentation_pct", 10.0, 12.0) == ("+2.0", "+20.0 %")


def test_equal_values_and_rounding_noise_show_no_difference():
    from kvsim.view.summary import _difference

    # 0.1 + 1e-17 rounds to the float after 0.1 (1.39e-17 above it) and 3.2 + 4e-16 to the
    # one after 3.2 (4.4e-16): apart in the last bit only, as sums taken in another order are,
    # neither is a change of the run; printed in full they were "+1.39e-14 ms" and
    # "+0.000000000000000444"
    assert _difference("time_to_first_token_seconds_p99", 0.1, 0.1 + 1e-17) == ("0", "")
    assert _difference("mean_running_requests", 3.2, 3.2 + 4e-16) == ("0", "")
    assert _difference("num_preemptions", 3, 3) == ("0", "")  # not "+0.0 %"
    # a real change, however small against its base, still shows: 1 ms on 100 s is 1e-5
    assert _difference("time_to_first_token_seconds_p99", 100.0, 100.001) == ("+1 ms", "+0.0 %")
    # whole numbers compare exactly: one more of a billion is a change; an infinity is no
    # rounding of a finite value
    assert _difference("num_cache_evictions", 10**9, 10**9 + 1) == ("+1", "+0.0 %")
    assert _difference("duration_s", math.inf, 1.0)[0] != "0"


# BURST (tests/planning/test_plan_runs.py): ten 100 + 28-token requests at once on Llama-3.1-8B,
# 16-token blocks, vLLM v1 with prefix caching. Each writes KV for 127 tokens: 8 blocks, all ten
# at once in the final steps. On 80 blocks (79 besides the null block) the ten need their 8th
# block in the same step, when each holds 100 prompt + 13 output tokens (112 computed, the
# 113th to be written at position 112); 79 - 70 = 9 are free, so the last running request is
# preempted and frees its 7 full blocks. The others never need another block, so nothing takes
# those 7 before it comes back: re-admitted with 113 tokens it queries 113 and finds
# (113 - 1) // 16 = 7 blocks = 112 tokens (vLLM's preempted pair, not prefix_cache_hits).
BURST_80 = [
    "--set", "model=llama-3.1-8b", "--set", "gpu=h100-80gb",
    "--set", "scheduler.max_model_len=128", "--set", "workload.lengths=fixed",
    "--set", "workload.fixed_prompt_tokens=100", "--set", "workload.fixed_output_tokens=28",
    "--set", "workload.rate_per_s=1e6", "--set", "workload.num_requests=10",
    "--set", f"cache.kv_cache_bytes={80 * 16 * 131_072}",
]  # fmt: skip


def _row(text: str, label: str) -> str:
    return next(line for line in text.splitlines() if label in line)


def test_printed_prefix_section_shows_readmission_hits_after_preemption(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["run", "--no-progress", *BURST_80, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["prefix_cache_preempted_queries"], summary["prefix_cache_preempted_hits"]) == (
        113,
        112,
    )
    assert _row(result.output, "prefix_cache_preempted_hits").split()[-2] == "112"
    assert _row(result.output, "prefix_cache_preempted_queries").split()[-2] == "113"
    # bytes not recomputed: 112 tokens x 131,072 B = 14,680,064 B = 14 MiB
    assert "14 MiB" in _row(result.output, "KV not recomputed")
    # a sum over the run, which outgrows the pool: the label says so (a trial read 197 GiB on
    # an 8 GiB pool as an amount held)
    assert "(hits + preempted hits, run total, one GPU's share)" in _row(
        result.output, "KV not recomputed"
    )
    assert "num_cache_evictions" not in result.output  # none: zero rows say nothing


def test_zero_readmission_and_eviction_rows_stay_hidden() -> None:
    quiet = {
        **BASE,
        "enable_prefix_caching": True,
        "prefix_cache_hits": 0,
        "prefix_cache_preempted_hits": 0,
        "prefix_cache_preempted_queries": 0,
        "prefix_cache_saved_bytes": 0,
        "num_cache_evictions": 0,
    }
    rows = dict(sections(quiet))["prefix cache"]
    assert [k for k, _ in rows] == ["prefix_cache_hits"]
    busy = {**quiet, "prefix_cache_preempted_hits": 64, "num_cache_evictions": 3}
    keys = [k for k, _ in dict(sections(busy))["prefix cache"]]
    assert keys == ["prefix_cache_hits", "prefix_cache_preempted_hits", "num_cache_evictions"]


def _run(tmp_path: Path, *sets: str) -> tuple[str, dict[str, object]]:
    """``kvsim run`` of five requests with ``--set``s: its output (whitespace collapsed, as rich
    wraps the title) and summary."""
    args = ["run", "--no-progress", "--set", "workload.num_requests=5", "--out", str(tmp_path)]
    for item in sets:
        args += ["--set", item]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split()), json.loads((tmp_path / "summary.json").read_text())


@pytest.mark.parametrize(
    ("sets", "mode"),
    [
        ([], "recompute"),  # vLLM v1 has no other mode
        (["scheduler.engine=vllm-v0"], "recompute, swap for multi-sequence groups"),
        (["scheduler.engine=vllm-v0", "scheduler.preemption_mode=swap"], "swap"),
        # v0's rule swaps groups to the CPU pool, which only a paged pool has: slabs recompute
        (["scheduler.engine=vllm-v0", "cache.allocator=first_fit"], "recompute"),
    ],
)
def test_summary_states_the_preemption_mode_the_header_prints(
    sets: list[str], mode: str, tmp_path: Path
) -> None:
    text, summary = _run(tmp_path, *sets)
    assert summary["preemption_mode"] == mode
    assert f"(preemption: {mode})" in text


@pytest.mark.parametrize(
    ("allocator", "caches"),
    [("paged", True), ("radix", True), ("first_fit", False), ("best_fit", False), ("buddy", False)],
)
def test_prefix_caching_is_reported_for_pools_that_cache(
    allocator: str, caches: bool, tmp_path: Path
) -> None:
    # vLLM v1's default turns prefix caching on; slabs cannot cache (setting it is refused),
    # SGLang's radix tree always caches
    text, summary = _run(tmp_path, f"cache.allocator={allocator}")
    assert summary["enable_prefix_caching"] is caches
    assert ("prefix cache " in text) is caches  # the section's title
    prom = (tmp_path / "metrics.prom").read_text()
    queries = re.search(r"^vllm:prefix_cache_queries_total\{.*\} (\S+)$", prom, re.MULTILINE)
    assert queries is not None
    expected = summary["prompt_tokens_total"] if caches else 0  # vLLM counts none uncached
    assert float(queries.group(1)) == expected


def test_feature_sections_show_only_when_the_feature_ran() -> None:
    # the keys each feature's run adds to its summary (kvsim.core.scheduler.spec,
    # kvsim.core.scheduler.offload, the hybrid pool and kvsim.engine.group_recorder)
    spec = {"num_speculative_tokens": 3, "num_lookahead_tokens": 3, "spec_decode_num_drafts": 10}
    offload = {"cpu_tier_blocks": 8192, "external_prefix_cache_hit_rate": 0.25}
    groups = {"kv_cache_groups": 2, "kv_cache_group_kinds": "full,sliding"}
    assert _names({**BASE, **spec}) == ["KV memory", "scheduler", "speculative decoding", "latency"]
    assert _names({**BASE, **offload}) == ["KV memory", "scheduler", "CPU offload tier", "latency"]
    assert _names({**BASE, **groups}) == ["KV memory", "KV cache groups", "scheduler", "latency"]
    # a [speculative] table with no drafts (k = 0) proposes nothing: no section
    off = {**BASE, **spec, "num_speculative_tokens": 0}
    assert "speculative decoding" not in _names(off)
    # a load dropped is shown only when one was: zero says nothing
    rows = dict(sections({**BASE, **offload, "kv_offload_loads_dropped": 0}))["CPU offload tier"]
    assert [k for k, _ in rows] == ["cpu_tier_blocks", "external_prefix_cache_hit_rate"]


def test_group_rows_one_set_per_kind() -> None:
    # Qwen3-Next-like groups: full, then three state groups (every group of a kind holds the
    # same slots, so the first stands for the rest); a sliding kind alone has tokens outside
    # its window, and kinds need not be contiguous (sliding at 1 and 3)
    from kvsim.view.summary import GROUP_ROWS, group_rows

    every = group_rows({"kv_cache_group_kinds": "full,state,state,state"})
    assert every[: len(GROUP_ROWS)] == GROUP_ROWS  # the groups themselves first
    rows = every[len(GROUP_ROWS) :]
    assert [k for k, _ in rows] == [
        "group0_full_held_pct",
        "group0_full_token_states_pct",
        "group0_full_internal_pct",
        "group1_state_held_pct",
        "group1_state_token_states_pct",
        "group1_state_internal_pct",
    ]
    assert rows[3][1] == "groups 1-3 (state) each: held (% of KV)"
    split = group_rows({"kv_cache_group_kinds": "full,sliding,full,sliding"})[len(GROUP_ROWS) :]
    assert split[3] == ("group1_sliding_held_pct", "groups 1,3 (sliding) each: held (% of KV)")
    assert "group1_sliding_outside_window_pct" in [k for k, _ in split]


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        ("kv_offload_bytes_cpu_to_gpu", 3 * 2**30, "3.00 GiB"),
        ("kv_cache_group_kinds", "full,sliding,sliding,sliding", "1 full + 3 sliding"),
        ("spec_decode_mean_acceptance_length", 2.5314, "2.53"),
    ],
)
def test_format_feature_metrics(key: str, value: object, shown: str) -> None:
    assert format_metric(key, value) == shown


def test_goodput_without_an_slo_is_not_every_request() -> None:
    import numpy as np

    from kvsim.results.money import money_summary

    # 4 requests, TTFT 0.5, 1.5, 3.0 and 0.2 s; 10 s at $3.60 an hour cost 3.6 x 10 / 3600 = $0.01
    requests = {
        "output_tokens": np.array([10, 10, 10, 10]),
        "time_to_first_token_seconds": np.array([0.5, 1.5, 3.0, 0.2]),
    }
    judged = money_summary(requests, 10.0, 3.6, {"time_to_first_token_seconds": 1.0})
    # TTFT <= 1 s: 0.5 and 0.2, 2 of 4 -> 0.5; 2 / 10 s = 0.2 a second; 2 / $0.01 = 200 per USD
    assert judged["slo_attainment"] == 0.5
    assert judged["goodput_requests_per_s"] == pytest.approx(0.2)
    assert judged["goodput_requests_per_usd"] == pytest.approx(200.0)
    # no target: nothing to meet, so no goodput (it used to say 1.0, every request)
    unjudged = money_summary(requests, 10.0, 3.6, {})
    for key in ("slo_attainment", "goodput_requests_per_s", "goodput_requests_per_usd"):
        assert np.isnan(unjudged[key])
    assert unjudged["cost_usd"] == pytest.approx(0.01)  # the price still holds


def test_run_without_slo_leaves_its_rows_out_and_writes_null(tmp_path: Path) -> None:
    text, summary = _run(tmp_path)
    assert summary["slo_attainment"] is None
    assert summary["goodput_requests_per_usd"] is None
    assert "slo.* target" not in text
    assert "goodput" not in text
    text, summary = _run(tmp_path / "slo", "slo.time_to_first_token_seconds=1000")
    assert summary["slo_attainment"] == 1.0  # five requests, each well under 1,000 s
    assert "requests meeting every slo.* target (share) │ 1.000 │" in text


def test_compare_shows_the_pool_where_the_runs_differ() -> None:
    # 32,768 -> 14,563 slots: -18,205, (14,563 - 32,768) / 32,768 = -55.6 %
    a = {**BASE, "capacity_tokens": 32_768, "bytes_per_token": 131_072}
    b = {**BASE, "capacity_tokens": 14_563, "bytes_per_token": 131_072}
    text = _compare_text(a, b)
    assert "KV pool" in text
    slots = next(line for line in text.splitlines() if "capacity_tokens" in line)
    assert "-18,205" in slots
    assert "-55.6 %" in slots
    assert "bytes_per_token" not in text  # the same in both
    assert "KV pool" not in _compare_text(a, a)


def test_a_contiguous_run_notes_no_paged_factor() -> None:
    # a slab run reads no block table: its footer names the layout, not a paged factor
    note = cost_note({"layout_factor": 1.0, "layout_source": "contiguous layout (factor 1)"})
    assert note == "step cost: contiguous layout (factor 1)"
    paged = cost_note({"layout_factor": 1.1, "layout_source": "analytic default"})
    assert paged == "step cost: paged layout factor 1.1, analytic default"


def test_compare_writes_differing_text_settings_below_the_table() -> None:
    # a slab run beside a paged one: the layout sources differ, as text, under the table
    a = {"layout_source": "contiguous layout (factor 1 by definition)", "engine": "vllm-v1"}
    b = {"layout_source": "analytic default (not measured)", "engine": "vllm-v1"}
    table = compare_table(a, b, "A", "B")
    assert table.caption == (
        "layout_source: A contiguous layout (factor 1 by definition); "
        "B analytic default (not measured)"
    )


def test_sweep_table_headers_give_units() -> None:
    """A sweep's console table names each swept field as --set takes it, with its unit, and
    each metric with its unit where the values do not carry one (seconds do: "24.7 s")."""
    table = pd.DataFrame(
        {
            "offload.kv_offloading_size": [0, 256],
            "workload.seed": [0, 1],  # no unit known: the name alone
            "time_to_first_token_seconds_mean": [24.7, 9.9],
            "external_prefix_cache_hit_rate": [0.0, 0.1],
            "token_states_pct": [50.0, 60.1],
        }
    )
    out = sweep_table(
        table,
        ["offload.kv_offloading_size", "workload.seed"],
        ["time_to_first_token_seconds_mean", "external_prefix_cache_hit_rate", "token_states_pct"],
        "offload",
    )
    assert [str(c.header) for c in out.columns] == [
        "offload.kv_offloading_size (GiB)",
        "workload.seed",
        "time_to_first_token_seconds_mean",  # the key as summary.json and vLLM name it
        "external_prefix_cache_hit_rate (0-1)",
        "token_states_pct (% of KV)",
    ]
    assert list(out.columns[2].cells) == ["24.7 s", "9.9 s"]  # (3 significant figures, %g)


def test_sweep_table_says_what_kvsims_own_shares_divide_by() -> None:
    # a new user read token_utilization_perc 88.9 beside internal_fragmentation_pct_of_used 1.0
    # and asked where the other 10 % went: the first divides by the KV allocated to requests,
    # the second by all KV in use; the caption says so (vLLM's own names need none)
    table = pd.DataFrame(
        {
            "cache.block_size_tokens": [16],
            "token_utilization_perc": [88.9],
            "internal_fragmentation_pct_of_used": [1.0],
            "time_to_first_token_seconds_mean": [1.0],
        }
    )
    metrics = [c for c in table.columns if c != "cache.block_size_tokens"]
    out = sweep_table(table, ["cache.block_size_tokens"], metrics, "block size")
    assert out.caption == (
        "token_utilization_perc: token states / allocated KV (%); "
        "internal_fragmentation_pct_of_used: internal fragmentation (% of used KV)"
    )
    assert sweep_table(table, [], ["time_to_first_token_seconds_mean"], "t").caption is None
    # a label that only repeats its name says nothing ("prefix_cache_hit_rate (hits / ...)")
    hits = pd.DataFrame({"prefix_cache_hit_rate": [0.5]})
    assert sweep_table(hits, [], ["prefix_cache_hit_rate"], "t").caption is None


def test_sweep_table_shows_bandwidths_in_gb_per_s() -> None:
    # a new user's trial read 6,400,000,000 in the disk sweep's table: a field given in bytes/s
    # is shown in decimal GB/s, as drive datasheets give it, its header saying so
    table = pd.DataFrame(
        {
            "offload.disk_offloading_size": [0, 256],
            "offload.disk_read_bandwidth_bytes_per_s": [6.4e9, 12.8e9],
            "offload.link_bandwidth_bytes_per_s": [5.12e10, 3.2e9],
            "time_to_first_token_seconds_mean": [24.7, 9.9],
        }
    )
    fields = [c for c in table.columns if c.startswith("offload.")]
    out = sweep_table(table, fields, ["time_to_first_token_seconds_mean"], "disk")
    assert [str(c.header) for c in out.columns][:3] == [
        "offload.disk_offloading_size (GiB)",
        "offload.disk_read_bandwidth_bytes_per_s (in GB/s)",
        "offload.link_bandwidth_bytes_per_s (in GB/s)",
    ]
    assert list(out.columns[1].cells) == ["6.4", "12.8"]
    assert list(out.columns[2].cells) == ["51.2", "3.2"]


def test_replica_table_shows_the_offload_tier_where_replicas_have_one() -> None:
    """A fleet with a CPU tier prints each replica's tier hit rate and bytes loaded (0.25 and
    2 GiB = 2,147,483,648 bytes); one without prints no such column."""
    row = {
        "replica": 0,
        "role": "both",
        "gpu": "h100-80gb",
        "tensor_parallel_size": 1,
        "num_requests": 10,
    }

    def text(frame: pd.DataFrame) -> str:
        console = Console(width=250, record=True)
        console.print(replica_table(frame))
        return console.export_text()

    plain = text(pd.DataFrame([row]))
    assert "tier hit rate" not in plain
    tiered = text(
        pd.DataFrame(
            [{**row, "external_prefix_cache_hit_rate": 0.25, "kv_offload_bytes_cpu_to_gpu": 2**31}]
        )
    )
    assert "tier hit rate" in tiered
    assert "0.250" in tiered
    assert "2.00 GiB" in tiered


@pytest.mark.parametrize(
    ("key", "value", "shown"),
    [
        # a compare of two runs of the same config a hair apart printed "-$6.853e-06"
        ("usd_per_million_output_tokens", -6.853e-06, "-$0.000006853"),
        ("cost_usd", 0.4868, "$0.4868"),
        ("goodput_per_s", 1.95e-05, "0.0000195"),
        ("mean_batch_tokens", 1.95e-05, "0.0000195"),
        ("mean_batch_tokens", 12.345, "12.3"),
        ("mean_batch_tokens", float("-inf"), "-inf"),  # (raised OverflowError)
        ("time_to_first_token_seconds_mean", float("inf"), "inf"),
    ],
)
def test_small_numbers_are_written_out_not_in_exponent_notation(key, value, shown) -> None:
    assert format_metric(key, value) == shown


@pytest.mark.parametrize(
    "overrides",
    [
        {"model": "gemma-3-27b", "gpu": "h100-80gb"},  # a hybrid pool's group kinds
        {"fleet.replicas": 2, "fleet.prefill_replicas": 1},  # a fleet's router
        {"offload.kv_offloading_size": 8, "speculative.num_speculative_tokens": 3}
        | {"speculative.acceptance_rate": 0.7},
    ],
    ids=["hybrid", "fleet", "offload-spec"],
)
def test_every_text_value_a_summary_writes_reads_back(overrides, tmp_path: Path) -> None:
    """``read_summary`` refuses text where kvsim writes none (a damaged file's "abc"): every
    text value a run of each kind writes is one of ``TEXT_KEYS``, and its saved file reads back
    as written."""
    from kvsim.config import config_from_dict
    from kvsim.fleet import simulate
    from kvsim.results import read_summary
    from kvsim.results.tables import TEXT_KEYS

    base = {"model": "llama-3.1-8b", "gpu": "h100-80gb", "workload.num_requests": 10}
    base["scheduler.max_model_len"] = 8192
    results = simulate(config_from_dict({}, {**base, **overrides}))
    text = {k for k, v in results.summary.items() if isinstance(v, str)}
    assert {"engine", "config_key"} <= text <= TEXT_KEYS
    results.save(tmp_path / "run")
    assert set(read_summary(tmp_path / "run" / "summary.json")) == set(results.summary)


def test_the_memory_metrics_are_those_memory_shares_gives() -> None:
    # is_memory_metric names what a run without memory rows lacks: every key memory_shares
    # returns for two rows of a 10-slot pool, and no key it does not (the latency and the
    # offload counters come from the requests and the tier)
    from kvsim.results.columns import CATEGORIES
    from kvsim.results.metrics import is_memory_metric, memory_shares

    rows = {c: [1.0, 2.0] for c in CATEGORIES}
    rows.update(
        duration_s=[1.0, 1.0],
        allocated=[5.0, 6.0],
        allocated_max=[5.0, 6.0],
        full_s=[0.0, 0.0],
        num_requests_running=[1.0, 2.0],
        num_requests_waiting=[0.0, 1.0],
    )
    keys = memory_shares(pd.DataFrame(rows), capacity_slots=10)
    assert keys
    assert all(is_memory_metric(k) for k in keys), [k for k in keys if not is_memory_metric(k)]
    assert not is_memory_metric("time_to_first_token_seconds_mean")
    assert not is_memory_metric("kv_offload_loads")


def test_a_sweep_table_marks_the_points_past_saturation() -> None:
    """The point whose run was past saturation gets "yes" in a last column (the warning after
    the table named it, the rows did not); a point of an older run without the verdict (NaN)
    and one under saturation are blank; a sweep with none past it has no such column."""
    import io

    from kvsim.view.summary import sweep_table

    def rows(past: list[object]) -> list[str]:
        table = pd.DataFrame(
            {"cache.block_size_tokens": [16, 32, 64], "num_preemptions": [1, 2, 3]}
        ).assign(past_saturation=past)
        out = io.StringIO()
        Console(file=out, width=120).print(
            sweep_table(table, ["cache.block_size_tokens"], ["num_preemptions"], "t")
        )
        return out.getvalue().splitlines()

    shown = rows([True, np.nan, False])
    assert "past saturation" in shown[2]
    body = [line for line in shown if line.startswith("│")]
    assert [line.rstrip("│ ").endswith("yes") for line in body] == [True, False, False]
    assert not any("past saturation" in line for line in rows([False, np.nan, False]))


def test_compare_names_the_config_fields_each_run_reads(tmp_path: Path) -> None:
    """A: first-fit slabs with the pow2 rule; B: paged (its reservation rule, max by default, is
    not read by a paged pool); C: paged with pow2 written. A against B marks the reservation as
    not read by B; B against C leaves it out (neither reads it): they differ in nothing else."""
    from kvsim.cli.compare import config_differences
    from kvsim.config import config_from_dict

    tables = {
        "a": {"cache": {"allocator": "first_fit", "reservation": "pow2"}},
        "b": {"cache": {"allocator": "paged"}},
        "c": {"cache": {"allocator": "paged", "reservation": "pow2"}},
    }
    for name, table in tables.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(config_from_dict(table).canonical_json())
    ab = config_differences(tmp_path / "a", tmp_path / "b")
    assert "cache.allocator (first_fit -> paged)" in ab
    assert "cache.reservation (pow2 -> max; B does not read it)" in ab
    assert config_differences(tmp_path / "b", tmp_path / "c") == ""
    # a config.json missing or not a config is said, not taken for no difference
    (tmp_path / "c" / "config.json").write_text('{"model": 5}')
    with pytest.raises(ValueError, match=r"c/config.json is not a readable config \(model"):
        config_differences(tmp_path / "b", tmp_path / "c")
    (tmp_path / "c" / "config.json").unlink()
    with pytest.raises(ValueError, match=r"c/config\.json is missing"):
        config_differences(tmp_path / "b", tmp_path / "c")
