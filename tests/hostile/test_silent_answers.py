"""Inputs that used to give a silent wrong answer or a misleading error: each now gives a clear
one-line error, or a correct result with a warning that counts what was left out."""

from __future__ import annotations

import logging

import pytest

from kvsim.base import say_once
from kvsim.config import config_from_dict
from kvsim.engine import simulate
from kvsim.engine.intake import requests_for
from tests.conftest import forget_warnings

POOL_2GIB = {"cache": {"kv_cache_gib": 2}}
PREEMPTING = {
    "num_requests": 100,
    "rate_per_s": 100,
    "lengths": "uniform",
    "min_total_tokens": 1500,
    "max_total_tokens": 2000,
}


@pytest.mark.parametrize("allocator", ["paged", "radix"])
def test_preempted_requests_do_not_count_as_prefix_hits(allocator: str) -> None:
    """Prompts that share nothing: a preempted request re-finding its own freed blocks is counted
    apart (``prefix_cache_preempted_hits``), never as a prefix-cache hit."""
    cfg = config_from_dict(
        {"cache": {"allocator": allocator, "kv_cache_gib": 2}, "workload": PREEMPTING}
    )
    summary = simulate(cfg).summary
    assert summary["num_preemptions"] > 0  # the case the issue saw: 17 % "hits"
    assert summary["prefix_cache_hits"] == 0
    assert summary["prefix_cache_hit_rate"] == 0.0


def test_livelock_is_a_user_error_in_the_cli(hostile) -> None:
    args = ["run", "--no-progress", "--set", "scheduler.max_preemptions_per_request=1"]
    args += ["--set", "cache.kv_cache_gib=2", "--set", "workload.num_requests=200"]
    args += ["--set", "workload.rate_per_s=100", "--set", "workload.lengths=fixed"]
    args += [
        "--set",
        "workload.fixed_prompt_tokens=500",
        "--set",
        "workload.fixed_output_tokens=1500",
    ]
    hostile.run(args, "preempted", "max_preemptions_per_request = 1", "2,621 slots")


def test_livelock_error_is_a_value_error_for_api_callers() -> None:
    from kvsim.core.scheduler.core import PreemptionLivelockError

    assert issubclass(PreemptionLivelockError, ValueError)


def test_overflow_drop_counts_what_it_removed(tmp_path, caplog) -> None:
    trace = tmp_path / "long.csv"
    trace.write_text("prompt_tokens,output_tokens\n10,5\n3000,5\n20,5\n4000,1\n")
    workload = {"trace": str(trace), "sample": "replay", "overflow": "drop"}
    cfg = config_from_dict({**POOL_2GIB, "workload": workload})
    with caplog.at_level(logging.INFO):
        requests = requests_for(cfg)
    assert len(requests) == 2
    said = [r for r in caplog.records if "removed 2 of 4 rows" in r.getMessage()]
    assert [r.getMessage() for r in said] == [
        f"{trace}: overflow='drop' removed 2 of 4 rows longer than max_model_len = 2048"
    ]
    # a filter the config asked for (overflow = 'drop' is never the default, and the paper's
    # setup uses it): an info line, not a warning
    assert [r.levelname for r in said] == ["INFO"]


def test_the_cli_shows_the_rows_overflow_drop_removed(hostile, caplog, monkeypatch) -> None:
    """The note is INFO (a filter the config asked for), which the CLI's WARNING root level
    would hide: ``kvsim``'s entry point raises ``kvsim.workload`` to INFO so that the count is
    seen, in a run and in a sweep's points (collected in the point, said by the driver)."""
    import sys

    from kvsim.cli import main

    trace = hostile.write("long.csv", "prompt_tokens,output_tokens\n10,5\n3000,5\n20,5\n")
    cfg = hostile.write(
        "drop.toml",
        f"[cache]\nkv_cache_gib = 2\n[scheduler]\nmax_model_len = 2048\n"
        f'[workload]\ntrace = "{trace}"\nsample = "replay"\noverflow = "drop"\n',
    )
    experiment = hostile.write(
        "exp.toml",
        f'name = "drop"\n[base]\ncache = {{ kv_cache_gib = 2 }}\n'
        f'scheduler = {{ max_model_len = 2048 }}\n[base.workload]\ntrace = "{trace}"\n'
        'sample = "replay"\noverflow = "drop"\n[grid]\n"cache.block_size_tokens" = [16, 32]\n',
    )
    note = f"{trace}: overflow='drop' removed 1 of 3 rows longer than max_model_len = 2048"
    workload_logger = logging.getLogger("kvsim.workload")
    level = workload_logger.level
    for args in (["run", "--no-progress", cfg], ["sweep", experiment, "--no-progress"]):
        monkeypatch.setattr(sys, "argv", ["kvsim", *map(str, args), "--out", "out"])
        forget_warnings(caplog)
        try:
            with pytest.raises(SystemExit) as done:
                main()
        finally:
            workload_logger.setLevel(level)
        assert done.value.code == 0, args
        said = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
        assert said.count(note) == 1, (args, said)


def test_rows_longer_than_max_model_len_are_counted(tmp_path) -> None:
    trace = tmp_path / "long.csv"
    trace.write_text("prompt_tokens,output_tokens\n10,5\n3000,5\n20,5\n")
    cfg = config_from_dict({**POOL_2GIB, "workload": {"trace": str(trace), "sample": "replay"}})
    summary = simulate(cfg, requests_for(cfg)).summary
    assert summary["num_rejected_max_model_len"] == 1


def test_watermark_refusal_names_the_watermark(hostile) -> None:
    """vLLM v0 keeps 1 % of the 128 blocks free at admission: a 2,040-token prompt (128 blocks)
    fits the empty 2,048-slot pool but never the pool minus the watermark."""
    args = ["run", "--no-progress", "--set", "scheduler.engine=vllm-v0"]
    args += ["--set", "cache.kv_cache_bytes=1677721600", "--set", "workload.lengths=fixed"]
    args += [
        "--set",
        "workload.fixed_prompt_tokens=2040",
        "--set",
        "workload.fixed_output_tokens=8",
    ]
    hostile.run([*args, "--set", "workload.num_requests=2"], "watermark")


def test_a_window_no_request_outgrows_is_warned_about(caplog) -> None:
    """A sliding window of at least max_model_len never slides (no request outgrows it): legal,
    but its sliding layers then keep every token as full attention does; say so."""
    import logging

    from kvsim import config_from_dict

    def groups_with_window(window: int) -> list[str]:
        forget_warnings(caplog)
        attention = {"num_sliding_layers": 16, "sliding_window_tokens": window}
        config = config_from_dict(
            {
                "model": {"preset": "llama-3.1-8b", "attention": attention},
                "gpu": "h100-80gb",
                "cache": {"kv_cache_gib": 4},
                "scheduler": {"max_model_len": 8192},
            }
        )
        assert config.kv_groups is not None
        return [m for r in caplog.records if "sliding_window_tokens" in (m := r.getMessage())]

    caplog.set_level(logging.WARNING, logger="kvsim.config")
    (message,) = groups_with_window(8192)
    assert "8,192 tokens is at least scheduler.max_model_len (8,192)" in message
    assert groups_with_window(8191) == []  # one token short: the window slides


def test_a_link_slower_than_any_gpu_cpu_link_is_warned_about(caplog) -> None:
    """A CPU tier's link at 1 MB/s is legal but no GPU has one (PCIe 3.0 x16 moves ~12 GB/s a
    direction): its copies outlast the run, so say so; a PCIe 4 link (25.6e9) is not warned."""
    import logging

    from kvsim.config.offload import OffloadConfig

    caplog.set_level(logging.WARNING, logger="kvsim.config")
    for link, warned in ((1e6, True), (25.6e9, False)):
        forget_warnings(caplog)
        OffloadConfig(kv_offloading_size=8, link_bandwidth_bytes_per_s=link)
        found = [r for r in caplog.records if "slower than any GPU-CPU link" in r.getMessage()]
        assert bool(found) == warned, (link, found)


def test_prompt_max_tokens_without_a_client_cap_is_warned_about(caplog) -> None:
    """``prompt_max_tokens`` with ``workload.max_tokens`` unset sizes every slab at
    max_model_len (a request's max_tokens is then max_model_len - prompt): legal, but the same
    slabs as 'max'; say so (a ``--set workload=<preset>`` replacing a scenario's workload table
    drops its max_tokens)."""

    def warned(**workload) -> list[str]:
        forget_warnings(caplog)
        config_from_dict(
            {
                "cache": {"allocator": "first_fit", "reservation": "prompt_max_tokens"},
                "scheduler": {"max_model_len": 4096},
                "workload": {"num_requests": 5, **workload},
            }
        )
        return [m for r in caplog.records if "prompt_max_tokens" in (m := r.getMessage())]

    caplog.set_level(logging.WARNING, logger="kvsim.config")
    (message,) = warned()
    assert "max_model_len (4,096) less its prompt" in message
    assert warned(max_tokens=1024) == []


def test_a_catalog_trace_that_is_not_the_reference_copy_is_warned_about(
    tmp_path, monkeypatch, caplog
) -> None:
    """A file under a catalog trace's name with another SHA-256 than the one ``kvsim data
    fetch`` pins is read (it may be the user's own edit) with a warning that names both hashes;
    the same bytes pinned as the reference read without one."""
    import dataclasses
    import hashlib

    from kvsim.base import say_once
    from kvsim.workload import fetch

    monkeypatch.setattr(say_once, "SAID", set())
    data = tmp_path / "data"
    data.mkdir()
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
    path = data / "azure_llm_2023_conv.csv"
    path.write_text(text)
    monkeypatch.setenv("KVSIM_DATA", str(data))
    workload = {"trace": "azure_conv", "arrival": "trace", "num_requests": 1}
    cfg = config_from_dict({**POOL_2GIB, "workload": workload})
    with caplog.at_level(logging.WARNING):
        requests_for(cfg)
        monkeypatch.setattr(say_once, "SAID", set())  # the catalog file named by its file name
        named = {**workload, "trace": "azure_llm_2023_conv.csv"}
        requests_for(config_from_dict({**POOL_2GIB, "workload": named}))
    actual = hashlib.sha256(text.encode()).hexdigest()
    said = [r.getMessage() for r in caplog.records if "reference copy" in r.getMessage()]
    assert len(said) == 2
    assert said[0].startswith(
        f"{path} is not the reference copy of trace 'azure_conv' (SHA-256 {actual[:12]}..."
    )
    # the same file pinned as the reference: no warning
    pinned = tuple(
        dataclasses.replace(s, sha256=actual) if s.trace == "azure_conv" else s
        for s in fetch.SOURCES
    )
    monkeypatch.setattr(fetch, "SOURCES", pinned)
    monkeypatch.setattr(say_once, "SAID", set())
    forget_warnings(caplog)
    with caplog.at_level(logging.WARNING):
        requests_for(cfg)
    assert not [r for r in caplog.records if "reference copy" in r.getMessage()]


def test_a_cpu_tier_smaller_than_one_chunk_is_warned_about(fresh_warnings, caplog) -> None:
    """Llama-3.1-8B's block of 16 tokens is 16 x 128 KiB = 2 MiB: 0.01 GiB holds 5 blocks, and
    an H100's max_num_batched_tokens of 8,192 is 512 blocks, 512 x 2 MiB = 1 GiB. A store
    needing more room than the tier frees is skipped and offered again whole, so the tier stayed
    empty all run, silently. The text names the least size, not this one, so a sweep or a plan
    over sizes says it once: 0.5 GiB (256 blocks) gives the same text as 0.01. A 2 GiB tier
    (1,024 blocks) is not warned about. At TP 2 each GPU holds half the tier and half of each
    block (4 of the 8 KV heads: 1 MiB), so the least is again 512 x 1 MiB x 2 GPUs = 1 GiB:
    0.75 GiB (384 blocks a GPU) is warned, 1.5 GiB (768) is not."""
    base = {"model": "llama-3.1-8b", "gpu": "h100-80gb"}

    def said_for(size: float, tp: int = 1) -> list[str]:
        forget_warnings(caplog)
        parallel = {"tensor_parallel_size": tp}
        config_from_dict({**base, "parallel": parallel, "offload": {"kv_offloading_size": size}})
        return [r.getMessage() for r in caplog.records if "one step's chunk" in r.getMessage()]

    (tiny,) = said_for(0.01)
    assert "a CPU tier under 1 GiB holds fewer blocks than one step's chunk" in tiny
    assert "(512 blocks of 16 tokens, 2,097,152 bytes each)" in tiny
    assert said_for(0.5) == [tiny]
    assert said_for(2) == []
    (split,) = said_for(0.75, tp=2)
    assert "a CPU tier under 1 GiB" in split
    assert "(512 blocks of 16 tokens, 1,048,576 bytes each on each of 2 GPUs)" in split
    assert said_for(1.5, tp=2) == []


def test_a_sweep_point_keeps_its_notes_in_a_worker_that_never_ran_main(
    tmp_path, monkeypatch
) -> None:
    """A spawned or Dask worker never runs ``kvsim``'s entry point, which raises
    ``kvsim.workload`` to INFO: ``run_point`` raises it while it collects, so the point's
    overflow='drop' count still reaches the driver (``PointOutcome.notes``)."""
    from kvsim.study.point import run_point

    trace = tmp_path / "long.csv"
    trace.write_text("prompt_tokens,output_tokens\n10,5\n3000,5\n20,5\n")
    workload = {"trace": str(trace), "sample": "replay", "overflow": "drop"}
    monkeypatch.setattr(say_once, "SAID", set())
    monkeypatch.setattr(logging.getLogger("kvsim.workload"), "level", logging.NOTSET)
    outcome = run_point(config_from_dict({**POOL_2GIB, "workload": workload}))
    assert outcome.error is None, outcome.error
    assert outcome.notes == (
        (
            "kvsim.workload.selection",
            f"{trace}: overflow='drop' removed 1 of 3 rows longer than max_model_len = 2048",
        ),
    )
    assert logging.getLogger("kvsim.workload").level == logging.NOTSET  # restored
