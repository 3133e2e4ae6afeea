"""More settings a config ignores (``kvsim.config.ignored``): a router with one replica to pick,
an empty ``acceptance_rates`` with
no drafts, swap settings over a swap pool of no block, a swap space where nothing swaps (vllm-v1,
or vllm-v0 over slabs), the prefill-to-decode link of a co-located fleet; and two ``--set`` table
values: a key given
twice in one inline table is refused, and one field of ``fleet.link`` edits the default link."""

from __future__ import annotations

from typing import Any

import pytest
from typer.testing import CliRunner

from kvsim.cli import app
from kvsim.cli.common import parse_overrides
from kvsim.config import config_from_dict
from kvsim.config.ignored import moot_reason
from kvsim.engine import simulate
from kvsim.fleet.fleet import transfer_s
from tests.conftest import forget_warnings, moot_warnings, summary_without

SMALL = {"workload.num_requests": 3}


pytestmark = pytest.mark.usefixtures("fresh_warnings")


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
    # k unset (0): the one list of a rate per draft is the empty one, and nothing reads it; a
    # k of 0 written beside it is a deliberate "off" (as for the other speculative fields)
    "empty_acceptance_rates_without_drafts": (
        {"speculative.acceptance_rates": []},
        1,
        [["speculative.acceptance_rates = [] has no effect", "num_speculative_tokens is 0"]],
        {"speculative.num_speculative_tokens": 0, "speculative.acceptance_rates": []},
    ),
    # prefill_replicas unset (0): no decode replica receives KV, so transfer_s never runs
    "link_of_a_colocated_fleet": (
        {"fleet.replicas": 2, "fleet.link": "nvlink"},
        1,
        [["fleet.link = 'nvlink' has no effect", "co-located fleet (prefill_replicas is unset)"]],
        {"fleet.replicas": 2, "fleet.prefill_replicas": 1, "fleet.link": "nvlink"},
    ),
    # one field edits the default link (infiniband-ndr: 50e9 B/s, 10e-6 s), shown as its fields;
    # a prefill_replicas = 0 written beside it is a sweep's co-located row, deliberate
    "link_field_of_a_colocated_fleet": (
        {"fleet.replicas": 2, "fleet.link.latency_s": 0.0},
        1,
        [
            [
                "fleet.link = {'name': 'infiniband-ndr', 'bandwidth_bytes_per_s': 50000000000.0, "
                "'latency_s': 0.0} has no effect",
                "no KV crosses the prefill-to-decode link",
            ]
        ],
        {"fleet.replicas": 2, "fleet.prefill_replicas": 0, "fleet.link.latency_s": 0.0},
    ),
    # each length distribution reads its own parameters (kvsim.workload.selection
    # _draw_lengths): the lognormal's means under the sharegpt_like fit, the fixed lengths
    # under uniform, the uniform split under fixed
    "lognormal_mean_under_a_named_fit": (
        {"workload.lengths": "sharegpt_like", "workload.prompt_mean_tokens": 50.0},
        1,
        [
            [
                "workload.prompt_mean_tokens = 50.0 has no effect",
                "lengths = 'lognormal' only, and the lengths are 'sharegpt_like'",
            ]
        ],
        {"workload.lengths": "lognormal", "workload.prompt_mean_tokens": 50.0},
    ),
    "fixed_length_under_uniform": (
        {"workload.lengths": "uniform", "workload.fixed_prompt_tokens": 100},
        1,
        [["workload.fixed_prompt_tokens = 100 has no effect", "lengths = 'fixed' only"]],
        {"workload.lengths": "fixed", "workload.fixed_prompt_tokens": 100},
    ),
    # one turn and no trace: no conversation to space
    "turn_gap_without_turns": (
        {"workload.turn_gap_s": 5.0},
        1,
        [["workload.turn_gap_s = 5.0 has no effect", "num_turns is 1"]],
        {"workload.num_turns": 2, "workload.turn_gap_s": 5.0},
    ),
    # vllm-v1 fans n > 1 out into requests: no sequence group shares its blocks
    "sequence_groups_under_v1": (
        {"workload.n": 2, "cache.share_sequence_groups": False},
        1,
        [["cache.share_sequence_groups = False has no effect", "vllm-v1 has no sequence groups"]],
        {"scheduler.engine": "vllm-v0", "cache.share_sequence_groups": False},
    ),
    "uniform_split_under_fixed": (
        {"workload.lengths": "fixed", "workload.prefill_decode_ratio": 1.0},
        1,
        [["workload.prefill_decode_ratio = 1.0 has no effect", "lengths = 'uniform' only"]],
        {"workload.lengths": "uniform", "workload.prefill_decode_ratio": 1.0},
    ),
}


def test_a_plan_knob_of_a_length_distribution_not_drawn_is_moot() -> None:
    """``kvsim plan`` refuses a knob whose every value runs the same workload: the lognormal's
    prompt mean under the sharegpt_like fit; under lognormal it is read."""
    data = {"workload": {"lengths": "sharegpt_like"}}
    why = moot_reason(config_from_dict(data, warn=False), data, "workload.prompt_mean_tokens")
    assert why is not None
    assert "'sharegpt_like'" in why
    data = {"workload": {"lengths": "lognormal"}}
    config = config_from_dict(data, warn=False)
    assert moot_reason(config, data, "workload.prompt_mean_tokens") is None


@pytest.mark.parametrize("case", sorted(IGNORED))
def test_an_ignored_setting_warns_and_changes_nothing(case: str, caplog) -> None:
    overrides, count, fragments, neighbour = IGNORED[case]
    config = config_from_dict({}, {**SMALL, **overrides})
    messages = moot_warnings(caplog)
    assert len(messages) == count, messages
    for message, wanted in zip(messages, fragments, strict=True):
        for fragment in wanted:
            assert fragment in message, f"{fragment!r} not in {message!r}"
    kept = dict(list(overrides.items())[:-count])
    plain = config_from_dict({}, {**SMALL, **kept}, warn=False)
    assert summary_without(config, "router") == summary_without(
        plain, "router"
    )  # (the router's name)
    forget_warnings(caplog)
    config_from_dict({}, {**SMALL, **neighbour})
    assert moot_warnings(caplog) == []


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
    messages = moot_warnings(caplog)
    assert len(messages) == 2, messages
    mode, overhead = sorted(messages, key=lambda m: not m.startswith("scheduler"))
    assert mode.startswith("scheduler.preemption_mode = 'swap' has no effect")
    assert "scheduler.swap_space_gib = 0 holds no CPU block" in mode
    assert "falls back to recompute" in mode
    assert overhead.startswith("cost.swap_copy_overhead_s = 0.001 has no effect")
    plain = config_from_dict({}, SWAP, warn=False)
    # every preemption tries a swap-out, finds no CPU block and recomputes: the run is the
    # default rule's (which recomputes a single sequence) but for its label and that count
    got = summary_without(config, "preemption_mode", "num_swap_fallbacks")
    assert got["num_preemptions"] > 0  # (the comparison is worth something)
    assert got == summary_without(plain, "preemption_mode", "num_swap_fallbacks")
    assert simulate(config).summary["num_swap_fallbacks"] == got["num_preemptions"]
    # a swap pool of 4 GiB is read: no warning
    forget_warnings(caplog)
    config_from_dict({}, {**SWAP, **swapping, "scheduler.swap_space_gib": 4})
    assert moot_warnings(caplog) == []


def test_hybrid_kv_cache_on_full_attention_layers_keeps_the_plain_pool(caplog) -> None:
    # opt-13b has full-attention layers only: vLLM runs it in one KV cache group, its plain
    # block pool, whatever the hybrid manager's switch, and offloads it. hybrid_kv_cache true
    # gave a one-group hybrid pool (group0_* shares) that refused a CPU tier; now neither value
    # changes the pool, and both offload
    tier = {"offload.kv_offloading_size": 4}
    for on in (True, False):
        config = config_from_dict({}, {**SMALL, "model.attention.hybrid_kv_cache": on})
        assert config.kv_groups is None
        assert not [k for k in simulate(config).summary if k.startswith("group0_")]
        config_from_dict({}, {**SMALL, **tier, "model.attention.hybrid_kv_cache": on})


def test_the_default_link_named_is_not_warned_and_a_plan_knob_of_the_link_is_moot(caplog) -> None:
    # infiniband-ndr is the link of a fleet that names none: naming it changes nothing
    data = {"fleet": {"replicas": 2, "link": "infiniband-ndr"}}
    config = config_from_dict(data, SMALL)
    assert moot_warnings(caplog) == []
    # a plan's knob inside the link is moot with the link (kvsim plan refuses such a knob)
    why = moot_reason(config, data, "fleet.link.bandwidth_bytes_per_s")
    assert why is not None
    assert "co-located fleet" in why


# vllm-v1 on 2 GiB (2,621 slots for 20 requests of up to 2,048 tokens) preempts; vllm-v0's buddy
# slabs hold groups of n = 2, which v0's default rule would swap out over a paged pool
NO_POOL = {
    "vllm_v1": (
        {"workload.num_requests": 20, "cache.kv_cache_gib": 2},
        "scheduler.engine = 'vllm-v1' has no CPU swap space",
    ),
    "vllm_v0_over_slabs": (
        {
            "scheduler.engine": "vllm-v0",
            "cache.allocator": "buddy",
            "cache.kv_cache_gib": 6,
            "workload.n": 2,
        },
        "allocator 'buddy' is not paged: vllm-v0 swaps paged blocks only",
    ),
}


@pytest.mark.parametrize("case", sorted(NO_POOL))
def test_a_swap_space_where_nothing_swaps_warns_and_changes_nothing(case: str, caplog) -> None:
    base, reason = NO_POOL[case]
    swapping = {"scheduler.swap_space_gib": 8, "cost.swap_copy_overhead_s": 1e-3}
    config = config_from_dict({}, {**base, **swapping})
    space, overhead = moot_warnings(caplog)
    assert space.startswith("scheduler.swap_space_gib = 8.0 has no effect")
    assert reason in space
    assert overhead.startswith("cost.swap_copy_overhead_s = 0.001 has no effect")
    assert reason in overhead
    # the default 4 GiB goes unread too, so the run is the same
    assert summary_without(config) == summary_without(config_from_dict({}, base, warn=False))
    # a paged pool under vllm-v0 reads both
    forget_warnings(caplog)
    paged = {"scheduler.engine": "vllm-v0", "cache.allocator": "paged", "cache.kv_cache_gib": 6}
    config_from_dict({}, {**base, **paged, **swapping})
    assert moot_warnings(caplog) == []
    # a replica of its own pool may swap (vllm-v0 over paged blocks): not warned (a replica of
    # its own engine is refused: a fleet's replicas run one engine profile)
    if case == "vllm_v0_over_slabs":
        forget_warnings(caplog)
        own = [{"cache": {"allocator": "paged"}}]
        fleet = {"fleet.replicas": 2, "fleet.replica_overrides": own}
        config_from_dict({}, {**base, **fleet, **swapping})
        assert moot_warnings(caplog) == []


def test_swap_settings_over_a_pool_smaller_than_one_block_warn_and_change_nothing(caplog) -> None:
    # one opt-13b block is 16 tokens x 819,200 bytes = 13,107,200 bytes; 0.012 GiB is
    # int(0.012 x 1,073,741,824) = 12,884,901 bytes: no block, as 0 GiB
    swapping = {"scheduler.preemption_mode": "swap", "cost.swap_copy_overhead_s": 1e-3}
    config = config_from_dict({}, {**SWAP, "scheduler.swap_space_gib": 0.012, **swapping})
    mode, overhead = moot_warnings(caplog)
    assert mode.startswith("scheduler.preemption_mode = 'swap' has no effect")
    assert (
        "scheduler.swap_space_gib = 0.012 holds no CPU block (one is 16 tokens x 819,200 bytes "
        "= 13,107,200 bytes), so every swap-out falls back to recompute"
    ) in mode
    assert overhead.startswith("cost.swap_copy_overhead_s = 0.001 has no effect")
    # the 0 GiB run of the default rule, but for the label and the fallbacks counted
    got = summary_without(config, "preemption_mode", "num_swap_fallbacks")
    assert got["num_preemptions"] > 0  # (the comparison is worth something)
    plain = config_from_dict({}, SWAP, warn=False)
    assert got == summary_without(plain, "preemption_mode", "num_swap_fallbacks")
    # 0.0125 GiB is 13,421,772 bytes: one block, read
    forget_warnings(caplog)
    config_from_dict({}, {**SWAP, "scheduler.swap_space_gib": 0.0125, **swapping})
    assert moot_warnings(caplog) == []


def test_a_vattention_swap_block_is_a_page_of_tokens(caplog) -> None:
    # opt-13b's 80 tensors (40 layers, K and V) split 819,200 bytes a token into 10,240; a 2 MiB
    # page holds 2,097,152 // 10,240 = 204 tokens, so a swapped block is 204 x 819,200 =
    # 167,116,800 bytes: 0.155 GiB (166,429,982 bytes) holds none, 0.16 GiB (171,798,691) one
    pages = {**SWAP, "cache.allocator": "vattention", "scheduler.preemption_mode": "swap"}
    config_from_dict({}, {**pages, "scheduler.swap_space_gib": 0.155})
    (message,) = moot_warnings(caplog)
    assert "(one is 204 tokens x 819,200 bytes = 167,116,800 bytes)" in message
    forget_warnings(caplog)
    config_from_dict({}, {**pages, "scheduler.swap_space_gib": 0.16})
    assert moot_warnings(caplog) == []


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


def test_an_allocator_knob_a_replicas_own_allocator_reads_is_not_warned(caplog) -> None:
    # a paged fleet whose second replica is first-fit: that replica sizes its slabs by
    # cache.reservation, so the field is read (it was warned as moot: the rule saw only the
    # config's own allocator); a knob neither allocator takes is still warned, naming both
    fleet = {"replicas": 2, "replica_overrides": [{}, {"cache": {"allocator": "first_fit"}}]}
    base = {"cache": {"allocator": "paged"}, "fleet": fleet, "workload": {"num_requests": 40}}
    pow2 = config_from_dict(base, {"cache.reservation": "pow2"})
    assert moot_warnings(caplog) == []
    max_ = config_from_dict(base, {"cache.reservation": "max"}, warn=False)
    # read: the first-fit replica reserves max_model_len (2,048) rather than the next power
    # of two, so it holds more KV; the paged replica's usage is the same
    from kvsim.fleet import simulate as simulate_fleet

    usage = []
    for config in (pow2, max_):
        replicas = simulate_fleet(config).replicas
        assert replicas is not None
        usage.append(replicas["kv_cache_usage_perc"].tolist())
    assert usage[0][0] == usage[1][0]
    assert usage[0][1] < usage[1][1]
    config_from_dict(base, {"cache.page_size_bytes": 65536})
    assert moot_warnings(caplog) == [
        "cache.page_size_bytes = 65536 has no effect: the replicas' allocators ('paged', "
        "'first_fit') have no virtual-memory pages (the field applies to vattention)"
    ]


def test_a_knob_of_the_base_allocator_that_every_replica_replaces_is_warned(caplog) -> None:
    # both replicas first-fit: no pool is paged, so the base's block size is read by none
    # (of kvsim's allocators only 'paged' has blocks: radix holds tokens, vattention pages)
    overrides = [{"cache": {"allocator": "first_fit"}}] * 2
    data = {"cache": {"allocator": "paged", "block_size_tokens": 32}}
    data["fleet"] = {"replicas": 2, "replica_overrides": overrides}
    config_from_dict(data)
    assert moot_warnings(caplog) == [
        "cache.block_size_tokens = 32 has no effect: allocator 'first_fit' has no blocks (the "
        "field applies to paged)"
    ]


def test_beam_branch_tokens_over_a_trace_is_not_called_moot(tmp_path, caplog) -> None:
    """A trace's rows may carry their own beam_width (kvsim's CSV column), which the config's
    beam_width = 1 does not show: beam_branch_tokens is read there, so it is not warned of;
    without a trace it still is."""
    trace = tmp_path / "beams.csv"
    trace.write_text("prompt_tokens,output_tokens,beam_width\n10,5,3\n")
    workload = {"trace": str(trace), "beam_branch_tokens": 5.0}
    config_from_dict({"scheduler": {"engine": "vllm-v0"}, "workload": workload})
    assert moot_warnings(caplog) == []
    config_from_dict({"scheduler": {"engine": "vllm-v0"}, "workload": {"beam_branch_tokens": 5.0}})
    (message,) = moot_warnings(caplog)
    assert "workload.beam_branch_tokens = 5.0 has no effect" in message
