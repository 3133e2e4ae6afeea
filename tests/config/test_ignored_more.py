"""More settings a config ignores (``kvsim.config.ignored``): a router with one replica to pick,
``hybrid_kv_cache = false`` on an all-full-attention model, an empty ``acceptance_rates`` with
no drafts, swap settings over a 0 GiB swap pool; and two ``--set`` table values: a key given
twice in one inline table is refused, and one field of ``fleet.link`` edits the default link."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from typer.testing import CliRunner

from kvsim.base import say_once
from kvsim.cli import app
from kvsim.cli.common import parse_overrides
from kvsim.config import config_from_dict
from kvsim.engine import simulate
from kvsim.fleet.fleet import transfer_s

SMALL = {"workload.num_requests": 3}


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Forget the messages already logged (each is logged once per process) and capture anew."""
    monkeypatch.setattr(say_once, "SAID", set())
    caplog.set_level(logging.WARNING, logger="kvsim.config")


def _moot(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "has no effect" in r.getMessage()]


def _summary(config: Any, *labels: str) -> dict[str, Any]:
    """The run's summary (NaN equal to itself via JSON), its key and the ``labels`` (keys that
    only name a setting, not what it did) left out."""
    drop = {"config_key", *labels}
    summary = {k: v for k, v in simulate(config).summary.items() if k not in drop}
    return json.loads(json.dumps(summary, sort_keys=True, default=str))


# id: (overrides with the ignored fields last, how many of them, fragments of each warning,
# a neighbouring config that reads the same fields: not warned)
IGNORED: dict[str, tuple[dict[str, Any], int, list[list[str]], dict[str, Any]]] = {
    # replicas unset, so 1: every request goes to it whatever the rule; a replicas = 1 written
    # is a sweep's one-engine row, deliberate as a k = 0 written is
    "router_of_one_replica": (
        {"fleet.prefill_replicas": 0, "fleet.router": "least_kv"},
        1,
        [["fleet.router = 'least_kv' has no effect", "fleet of 1 replica (replicas is unset)"]],
        {"fleet.replicas": 1, "fleet.router": "least_kv"},
    ),
    # one prefill and one decode replica: each pick has one candidate
    "router_of_one_prefill_one_decode": (
        {
            "fleet.replicas": 2,
            "fleet.prefill_replicas": 1,
            "fleet.router": "prefix",
            "fleet.prefix_weight": 5.0,
        },
        2,
        [
            ["fleet.router = 'prefix' has no effect", "1 prefill and 1 decode replica"],
            ["fleet.prefix_weight = 5.0 has no effect", "1 prefill and 1 decode replica"],
        ],
        {
            "fleet.replicas": 3,
            "fleet.prefill_replicas": 1,
            "fleet.router": "prefix",
            "fleet.prefix_weight": 5.0,
        },
    ),
    # make_router hands overlap_score_weight to kv_cost alone; the default router is round_robin
    "kv_cost_weight_under_round_robin": (
        {"fleet.replicas": 2, "fleet.overlap_score_weight": 3.5},
        1,
        [["fleet.overlap_score_weight = 3.5 has no effect", "router 'round_robin'", "kv_cost"]],
        {"fleet.replicas": 2, "fleet.router": "kv_cost", "fleet.overlap_score_weight": 3.5},
    ),
    # opt-13b: 40 full-attention layers, no sliding or state layer to unify; Gemma-3-27B has 52
    # sliding layers, which false keeps as full attention
    "hybrid_off_on_all_full_model": (
        {"model.attention.hybrid_kv_cache": False},
        1,
        [["model.attention.hybrid_kv_cache = False has no effect", "no sliding-window"]],
        {
            "model": "gemma-3-27b",
            "gpu": "h100-80gb",
            "scheduler.max_model_len": 4096,
            "model.attention.hybrid_kv_cache": False,
        },
    ),
    # k unset (0): the one list of a rate per draft is the empty one, and nothing reads it; a
    # k of 0 written beside it is a deliberate "off" (as for the other speculative fields)
    "empty_acceptance_rates_without_drafts": (
        {"speculative.acceptance_rates": []},
        1,
        [["speculative.acceptance_rates = [] has no effect", "num_speculative_tokens is 0"]],
        {"speculative.num_speculative_tokens": 0, "speculative.acceptance_rates": []},
    ),
}


@pytest.mark.parametrize("case", sorted(IGNORED))
def test_an_ignored_setting_warns_and_changes_nothing(case: str, caplog) -> None:
    overrides, count, fragments, neighbour = IGNORED[case]
    config = config_from_dict({}, {**SMALL, **overrides})
    messages = _moot(caplog)
    assert len(messages) == count, messages
    for message, wanted in zip(messages, fragments, strict=True):
        for fragment in wanted:
            assert fragment in message, f"{fragment!r} not in {message!r}"
    kept = dict(list(overrides.items())[:-count])
    plain = config_from_dict({}, {**SMALL, **kept}, warn=False)
    assert _summary(config, "router") == _summary(plain, "router")  # (the router's name)
    caplog.clear()
    config_from_dict({}, {**SMALL, **neighbour})
    assert _moot(caplog) == []


# vllm-v0 on 2 GiB of KV: 2,147,483,648 // 819,200 bytes an opt-13b token = 2,621 slots, so 20
# requests of the default lengths (up to 2,048 tokens each) preempt one another
SWAP = {
    "workload.num_requests": 20,
    "scheduler.engine": "vllm-v0",
    "cache.kv_cache_gib": 2,
    "scheduler.swap_space_gib": 0,
}


def test_swap_settings_over_no_swap_space_warn_and_change_nothing(caplog) -> None:
    swapping = {"scheduler.preemption_mode": "swap", "cost.swap_copy_overhead_s": 1e-3}
    config = config_from_dict({}, {**SWAP, **swapping})
    messages = _moot(caplog)
    assert len(messages) == 2, messages
    mode, overhead = sorted(messages, key=lambda m: not m.startswith("scheduler"))
    assert mode.startswith("scheduler.preemption_mode = 'swap' has no effect")
    assert "scheduler.swap_space_gib = 0 holds no CPU block" in mode
    assert "falls back to recompute" in mode
    assert overhead.startswith("cost.swap_copy_overhead_s = 0.001 has no effect")
    plain = config_from_dict({}, SWAP, warn=False)
    # every preemption tries a swap-out, finds no CPU block and recomputes: the run is the
    # default rule's (which recomputes a single sequence) but for its label and that count
    got = _summary(config, "preemption_mode", "num_swap_fallbacks")
    assert got["num_preemptions"] > 0  # (the comparison is worth something)
    assert got == _summary(plain, "preemption_mode", "num_swap_fallbacks")
    assert simulate(config).summary["num_swap_fallbacks"] == got["num_preemptions"]
    # a swap pool of 4 GiB is read: no warning
    caplog.clear()
    config_from_dict({}, {**SWAP, **swapping, "scheduler.swap_space_gib": 4})
    assert _moot(caplog) == []


@pytest.mark.parametrize(
    "raw",
    [
        '{"bandwidth_bytes_per_s": 1e9, "bandwidth_bytes_per_s": 2e9}',  # JSON
        "{bandwidth_bytes_per_s = 1e9, bandwidth_bytes_per_s = 2e9}",  # a TOML inline table
        "{ x = { bandwidth_bytes_per_s = 1, bandwidth_bytes_per_s = 2 } }",  # nested
    ],
)
def test_a_key_given_twice_in_one_set_table_is_refused(raw: str) -> None:
    # TOML forbids it, and json would keep the last value without a word
    with pytest.raises(ValueError, match=r"^--set fleet.link: key 'bandwidth_bytes_per_s' "):
        parse_overrides([f"fleet.link={raw}"])
    with pytest.raises(ValueError, match=r"appears more than once in one table") as err:
        parse_overrides([f"fleet.link={raw}"])
    assert "\n" not in str(err.value)


def test_a_key_given_twice_exits_2_with_one_line() -> None:
    args = ["run", "--no-progress", "--set", "fleet.link={a=1,a=2}"]
    result = CliRunner().invoke(app, args, prog_name="kvsim")
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert errors[0].startswith("error: --set fleet.link: key 'a' appears more than once")


# Disaggregated (1 prefill + 1 decode replica) with the default link, infiniband-ndr of
# kvsim/data/links.toml: 50e9 B/s, 10e-6 s. An opt-13b token is 2 (K, V) x 40 layers x 5,120
# x 2 bytes = 819,200 bytes on one GPU, so 1,000 tokens are 819,200,000 bytes.
DISAGG = {**SMALL, "fleet.replicas": 2, "fleet.prefill_replicas": 1}


def _link(overrides: dict[str, Any], data: dict[str, Any] | None = None) -> tuple[Any, ...]:
    """The link's (name, bandwidth, latency) and 1,000 tokens' transfer seconds."""
    config = config_from_dict(data or {}, {**DISAGG, **overrides})
    assert config.fleet is not None
    link = config.fleet.link
    p, d = config.replica_configs
    seconds = transfer_s(p, d, config.fleet, 1000)
    return link.name, link.bandwidth_bytes_per_s, link.latency_s, seconds


def test_one_field_of_the_default_link_overrides_only_that_field() -> None:
    # 1e-5 + 819.2e6 / 25e9 = 1e-5 + 0.032768 (the old table lost the latency: 0.032768)
    got = _link({"fleet.link.bandwidth_bytes_per_s": 25e9})
    assert got == ("infiniband-ndr", 25e9, 1e-5, pytest.approx(0.032778, rel=1e-12))
    # 0 + 819.2e6 / 50e9 (the old table lacked the bandwidth and was refused)
    got = _link({"fleet.link.latency_s": 0.0})
    assert got == ("infiniband-ndr", 50e9, 0.0, pytest.approx(0.016384, rel=1e-12))
    # a named preset took --set fields already: nvlink's 450e9 B/s, 5e-6 s -> 0 + 819.2e6/450e9
    got = _link({"fleet.link": "nvlink", "fleet.link.latency_s": 0.0})
    assert got == ("nvlink", 450e9, 0.0, pytest.approx(819.2e6 / 450e9, rel=1e-12))
    # a table the config writes is a link of its own (as a [gpu] table without a preset is a GPU
    # of its own): the latency it leaves out is LinkSpec's 0, and --set edits that table
    data = {"fleet": {"link": {"bandwidth_bytes_per_s": 1e9}}}
    got = _link({"fleet.link.latency_s": 2e-6}, data)
    assert got == ("custom", 1e9, 2e-6, pytest.approx(2e-6 + 0.8192, rel=1e-12))
