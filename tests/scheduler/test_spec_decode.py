"""Speculative decoding: lookahead slots, drafts verified, rejected ones rolled back (vLLM 0.34.0
``Scheduler.schedule`` / ``update_from_output``, ``KVCacheManager.allocate_slots``).

Every expected number is worked out by hand in the comments. The first scenario is the one
``tests/vllm/vllm_driver.py --self-check`` runs through vLLM's own Scheduler (the same numbers
come out of vLLM).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.config import config_from_dict
from kvsim.config.speculative import SpeculativeConfig
from kvsim.core.kv.paged import PagedAllocator
from kvsim.core.scheduler import SpecDecoder, make_scheduler
from kvsim.engine import simulate
from kvsim.results.prometheus import prometheus_snapshot
from tests.scheduler.conftest import engine_args, req, step


def spec_run(k: int, lookahead: int, rates: list[float], num_blocks: int = 21):
    """One request (prompt 10, output 6) on ``num_blocks`` blocks of 4 (block 0 null): each
    step's row, the drafter and the scheduler."""
    pool = PagedAllocator(
        capacity_tokens=num_blocks * 4, block_size_tokens=4, reserve_null_block=True
    )
    args = engine_args(
        max_num_batched_tokens=16,
        max_num_seqs=4,
        max_model_len=64,
        reserve_null_block=True,
        num_speculative_tokens=k,
        num_lookahead_tokens=lookahead,
    )
    spec = SpecDecoder(k, lookahead, rates, seed=0)
    sched = make_scheduler(pool, args, spec=spec)
    r = req(0, 10, 6)
    sched.add_request(r)
    rows = []
    while sched.has_work():
        plan, finished = step(sched)
        rows.append(
            (
                plan.num_new_tokens[0],
                len(pool.block_table(0)) if not finished else None,
                r.num_computed_tokens,
                r.num_output_tokens,
                pool.num_free_blocks,
            )
        )
    return rows, spec, sched


def test_eagle_reserves_lookahead_and_rolls_rejections_back():
    # k = 2, EAGLE (2 lookahead slots); rates [1.0, 0.0]: u < 1.0 always, u < 0.0 never, so
    # every verification accepts exactly 1 of its 2 drafts and samples 1 + 1 tokens.
    rows, spec, _ = spec_run(2, 2, [1.0, 0.0])
    # step 0: prefill 10; 10 + 2 lookahead = 12 slots = 3 blocks (17 of 20 usable free);
    #   samples 1 -> computed 10, outputs 1, 2 drafts
    # step 1: 1 + 2 drafts = 3 tokens; 10 + 3 + 2 = 15 slots = 4 blocks (16 free); 1 rejected:
    #   computed 13 - 1 = 12, outputs 1 + 2 = 3
    # step 2: 3 tokens; 12 + 3 + 2 = 17 slots = 5 blocks (15 free); computed 14, outputs 5
    # step 3: 3 tokens; 14 + 3 + 2 = 19 slots = 5 blocks; the 6th output finishes it (freed:
    #   all 20 free); of its 2 sampled tokens only 1 is kept, so computed is 14 + 1 = 15
    assert [row[:4] for row in rows] == [
        (10, 3, 10, 1),
        (3, 4, 12, 3),
        (3, 5, 14, 5),
        (3, None, 15, 6),
    ]
    assert [row[4] for row in rows] == [17, 16, 15, 20]
    # vLLM's counters: 3 verifications of 2 drafts, 1 accepted each, position 0 only
    summary = spec.summary()
    assert (summary["spec_decode_num_drafts"], summary["spec_decode_num_draft_tokens"]) == (3, 6)
    assert summary["spec_decode_num_accepted_tokens"] == 3
    assert summary["spec_decode_num_accepted_tokens_pos0"] == 3
    assert summary["spec_decode_num_accepted_tokens_pos1"] == 0
    assert summary["spec_decode_mean_acceptance_length"] == 2.0  # 1 + 3 / 3


def test_ngram_reserves_no_lookahead():
    # n-gram lookup: the same drafts, no lookahead slots. Step 0: 10 slots = 3 blocks;
    # step 1: 10 + 3 = 13 = 4 blocks; step 2: 12 + 3 = 15 = 4 blocks; step 3: 14 + 3 = 17 = 5
    rows, _, _ = spec_run(2, 0, [1.0, 0.0])
    assert [row[1] for row in rows] == [3, 4, 4, None]
    assert [row[4] for row in rows] == [17, 16, 16, 20]


def test_all_drafts_accepted_stop_at_max_tokens():
    # k = 3, all accepted (rates 1.0): step 0 prefill samples 1; step 1 verifies 1 + 3 and
    # keeps 4 (outputs 5); step 2 would keep 4 more but only 1 is left: outputs 6, finished in
    # 3 steps instead of 6. Computed covers all but the last token: 10 + 6 - 1 = 15.
    rows, spec, _ = spec_run(3, 3, [1.0, 1.0, 1.0])
    assert [(n, c, o) for n, _, c, o, _ in rows] == [(10, 10, 1), (4, 14, 5), (4, 15, 6)]
    # the last verification accepted 3 drafts by the draw, though 2 of them were trimmed
    assert spec.summary()["spec_decode_num_accepted_tokens"] == 6


def test_acceptance_draws_follow_the_per_position_rates():
    # alpha = 0.7 per draft given the ones before: P(a >= i) = 0.7, 0.49, 0.343, so the mean
    # accepted is 1.533. Over 20,000 verifications a share's standard deviation is at most
    # sqrt(0.25 / 20,000) = 0.0035; 5 of them make the band 0.018.
    spec = SpecDecoder(3, 3, [0.7, 0.49, 0.343], seed=7)
    n = 20_000
    total = sum(spec.accept(3) for _ in range(n))
    per_pos = [c / n for c in spec.num_accepted_tokens_per_pos]
    for got, want in zip(per_pos, [0.7, 0.49, 0.343], strict=True):
        assert abs(got - want) < 0.018
    assert abs(total / n - 1.533) < 3 * 0.018
    # a verification of fewer drafts (the budget cut it) accepts at most those
    assert all(spec.accept(1) <= 1 for _ in range(100))


def test_rejected_slots_are_reservation_not_token_states():
    # a request of prompt 10 and output 6 (final KV 15 tokens) holding 4 blocks of 4 = 16
    # slots after a verification rolled back to 12 computed tokens: token states 12,
    # internal max(16 - 15, 0) = 1, reservation min(16, 15) - 12 = 3
    pool = PagedAllocator(capacity_tokens=84, block_size_tokens=4, reserve_null_block=True)
    r = req(0, 10, 6)
    pool.allocate(r, 15)
    assert pool.request_slots(r, 12)[:3] == (16, 12, 1)
    # a verification writing drafts past the final length (16 tokens > 15): 15 token states,
    # the written slot past it internal fragmentation
    assert pool.request_slots(r, 16)[:3] == (16, 15, 1)


def test_drafter_cost_is_one_term_of_the_step():
    from kvsim.engine.build import build_parts

    cfg = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "cost": "lean",  # 80 % of HBM bandwidth, 60 % of peak FLOP/s: worked below
            "cache": {"kv_cache_gib": 8.0},
            "scheduler": {"max_model_len": 8192},
            "speculative": {
                "num_speculative_tokens": 3,
                "acceptance_rate": 0.7,
                "draft_num_params": 240_000_000,
            },
        }
    )
    cost = build_parts(cfg, [], pooled=True).cost
    # EAGLE's 0.24 B-parameter head in fp16 = 0.48 GB a pass, at H100's 3.35 TB/s x 0.8
    # (the lean preset's hbm_efficiency) = 2.68 TB/s: 1.791e-4 s; 3 passes 5.373e-4 s. Its FLOPs
    # for 8 sequences, 2 x 0.24e9 x 8 = 3.84e9 at 989e12 x 0.6 FLOP/s = 6.5e-6 s, are shorter.
    assert cost.draft_s(8) == pytest.approx(3 * 0.48e9 / 2.68e12, rel=1e-9)
    # verifying 1 + 3 tokens after 100 computed ones is a 4-token chunk in the same roofline;
    # with 8 drafting sequences the step is longer by exactly the drafter's term
    base = cost.step_s(4, 100, 2 * 4 * 100 + 16, 1)
    assert cost.step_s(4, 100, 2 * 4 * 100 + 16, 1, 8) - base == pytest.approx(cost.draft_s(8))


def test_an_eagle_head_of_unknown_size_is_one_layer_of_the_target():
    from kvsim.engine.build import build_parts

    def drafter(**spec) -> dict:
        return {
            "model": "llama-2-7b",
            "gpu": "h100-80gb",
            "cost": "lean",
            "cache": {"kv_cache_gib": 8.0},
            "scheduler": {"max_model_len": 4096},
            "speculative": {"num_speculative_tokens": 3, "acceptance_rate": 0.7, **spec},
        }

    # Llama-2-7B: 6.738 B parameters, 32 layers, a 32,000 x 4,096 embedding and an untied LM
    # head: (6,738,000,000 - 2 x 131,072,000) / 32 = 202,370,500 a layer, and the 2 x 4,096**2 =
    # 33,554,432 fusion layer: 235,924,932, EAGLE's "0.24 B" for this target (Li et al. 2024, §4)
    cfg = config_from_dict(drafter())
    assert cfg.draft_params == 235_924_932
    # its fp16 weights, 471,849,864 B a pass at 2.68 TB/s (lean: 0.8 x 3.35 TB/s), 3 passes
    cost = build_parts(cfg, [], pooled=True).cost
    assert cost.draft_s(8) == pytest.approx(3 * 471_849_864 / 2.68e12, rel=1e-9)
    assert cfg.weight_bytes_per_gpu == 2 * (6_738_000_000 + 235_924_932)
    # a size given is kept (0: a free drafter), and n-gram lookup reads none
    assert config_from_dict(drafter(draft_num_params=0)).draft_params == 0
    assert config_from_dict(drafter(method="ngram")).draft_params == 0


def test_a_draft_acceptance_rate_needs_no_optional_extra(monkeypatch):
    # a base install has no scipy (the fit extra): the solver must not reach for it
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    spec = SpeculativeConfig(num_speculative_tokens=3, draft_acceptance_rate=0.511)
    assert spec.position_rates == pytest.approx([0.7, 0.49, 0.343], abs=1e-3)


def test_a_dense_targets_eagle_head_is_one_decoder_layer_and_the_fusion_layer():
    from kvsim.config.hardware import ModelSpec
    from kvsim.config.speculative import eagle_head_params

    # Llama-2-7B: 6,738,000,000 parameters less its untied embedding and LM head, 2 x 32,000 x
    # 4,096 = 262,144,000, over 32 layers: 202,370,500; plus the 2 x 4,096**2 = 33,554,432
    # fusion layer: 235,924,932, EAGLE's published 0.24 B (Li et al., ICML 2024, section 4)
    assert eagle_head_params(ModelSpec.model_validate("llama-2-7b")) == 235_924_932


def test_a_moe_targets_eagle_head_is_a_dense_layer_of_the_experts_a_token_reads():
    from kvsim.config.hardware import ModelSpec
    from kvsim.config.speculative import eagle_head_params

    # gpt-oss-20b: 20,914,757,184 parameters less its untied embedding and LM head (2 x 201,088 x
    # 2,880 = 1,158,266,880) less 32 experts x 24 layers x 24,883,200 = 646,192,704 dense, over
    # 24 layers 26,924,696; plus the 4 experts a token reads, 99,532,800, and the 2 x 2,880**2
    # = 16,588,800 fusion layer: 143,046,296 (all 32 experts made it 0.84 B)
    assert eagle_head_params(ModelSpec.model_validate("gpt-oss-20b")) == 143_046_296


@pytest.mark.parametrize(
    ("k", "draft_rate", "alpha"),
    [
        (1, 0.4, 0.4),  # one draft: its rate is the draft acceptance rate
        (2, 0.5, (5**0.5 - 1) / 2),  # (a + a**2) / 2 = 0.5: a**2 + a - 1 = 0, the golden ratio's
        (3, 0.511, 0.7),  # (0.7 + 0.49 + 0.343) / 3 = 0.511
        (3, 0.0, 0.0),
        (3, 1.0, 1.0),
    ],
)
def test_vllms_draft_acceptance_rate_is_the_mean_of_the_position_rates(k, draft_rate, alpha):
    spec = SpeculativeConfig(num_speculative_tokens=k, draft_acceptance_rate=draft_rate)
    assert spec.position_rates == pytest.approx([alpha**i for i in range(1, k + 1)], abs=1e-9)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        # vLLM logs "Avg Draft acceptance rate: 69.1%"
        ({"draft_acceptance_rate": 69.1}, r"a rate in % is 0.691 here"),
        ({"acceptance_rate": 70}, r"a rate in % is 0.7 here \(acceptance_rate = 0.7\)"),
        # as vLLM logs it ("Avg Draft acceptance rate: 69.1%"): it said "expected a number"
        ({"draft_acceptance_rate": "69.1%"}, r"a share of 1, got '69.1%': write 0.691"),
        (
            {"acceptance_rate": 0.5, "draft_acceptance_rate": 0.6},
            r"draft_acceptance_rate: set one of acceptance_rate, acceptance_rates, "
            r"draft_acceptance_rate, got acceptance_rate = 0.5, draft_acceptance_rate = 0.6",
        ),
    ],
)
def test_acceptance_given_twice_or_in_percent_is_refused(spec, message):
    with pytest.raises(ValueError, match=message):
        SpeculativeConfig(num_speculative_tokens=3, **spec)


def small(spec: dict, **cache) -> dict:
    return {
        "model": "llama-3.1-8b",
        "gpu": "h100-80gb",
        "cache": {"kv_cache_gib": 0.25, **cache},
        "scheduler": {"max_model_len": 1024, "max_num_batched_tokens": 512, "max_num_seqs": 64},
        "workload": {"preset": "sharegpt_like", "rate_per_s": 20.0, "num_requests": 40},
        "speculative": spec,
    }


# drafts a step, acceptance, drafter and seed of a hypothesis run
DRAFTERS = {
    "k": st.integers(1, 5),
    "alpha": st.floats(0.0, 1.0),
    "method": st.sampled_from(["eagle", "ngram"]),
    "seed": st.integers(0, 1000),
}


@settings(max_examples=6, deadline=None)
@given(**DRAFTERS)
def test_every_slot_in_one_category_at_every_step(k, alpha, method, seed):
    # a 2,048-slot pool (0.25 GiB of 128 KiB tokens, requests up to 1,024 tokens) under load:
    # every step's five categories sum to the capacity, and the allocator's laws hold
    # (debug_invariants)
    data = small({"num_speculative_tokens": k, "acceptance_rate": alpha, "method": method})
    cfg = config_from_dict({**data, "seed": seed, "debug_invariants": True})
    results = simulate(cfg.model_copy(update={"memory_resolution": "step"}))
    memory = results.memory
    cats = [
        "token_states",
        "reservation",
        "internal_fragmentation",
        "external_fragmentation",
        "free",
    ]
    for col in cats:
        assert (memory[col] >= -1e-9).all(), col
    total = memory[cats].sum(axis=1)
    assert ((total - cfg.capacity_tokens).abs() < 1e-6).all()
    assert results.summary["num_requests"] == 40
    drafts = results.summary["spec_decode_num_draft_tokens"]
    assert math.isfinite(drafts)
    assert drafts > 0


def test_same_seed_same_run_other_seed_other_draws():
    data = small({"num_speculative_tokens": 3, "acceptance_rate": 0.6})
    a = simulate(config_from_dict({**data, "seed": 1})).summary
    b = simulate(config_from_dict({**data, "seed": 1})).summary
    c = simulate(config_from_dict({**data, "seed": 2})).summary
    assert a["spec_decode_num_accepted_tokens"] == b["spec_decode_num_accepted_tokens"]
    assert a["e2e_request_latency_seconds_mean"] == b["e2e_request_latency_seconds_mean"]
    assert a["spec_decode_num_accepted_tokens"] != c["spec_decode_num_accepted_tokens"]


@pytest.mark.parametrize(
    ("spec", "extra", "message"),
    [
        ({"num_speculative_tokens": 3}, {}, r"3 speculative tokens need an acceptance rate"),
        (
            {"num_speculative_tokens": 2, "acceptance_rates": [0.5, 0.6]},
            {},
            r"non-increasing shares",
        ),
        (
            {"num_speculative_tokens": 2, "acceptance_rates": [0.5]},
            {},
            r"one rate per speculative token \(2\)",
        ),
        (
            {"num_speculative_tokens": 2, "acceptance_rate": 0.5},
            {"scheduler": {"engine": "vllm-v0", "max_model_len": 1024}},
            r"runs under vLLM v1's scheduler",
        ),
        (
            {"num_speculative_tokens": 2, "acceptance_rate": 0.5},
            {"cache": {"allocator": "radix", "kv_cache_gib": 0.25}},
            r"need lookahead slots from a block pool",
        ),
        (
            {"num_speculative_tokens": 4, "acceptance_rate": 0.5},
            {
                "scheduler": {
                    "max_model_len": 1024,
                    "max_num_seqs": 64,
                    "long_prefill_token_threshold": 3,
                }
            },
            r"long_prefill_token_threshold \(3\) must be 0 or exceed",
        ),
    ],
)
def test_config_errors_name_the_field(spec, extra, message):
    data = {**small(spec), **extra}
    with pytest.raises(ValueError, match=message):
        config_from_dict(data)


def test_default_config_keeps_its_hash():
    # the speculative section at its default is left out of the canonical form
    assert "speculative" not in config_from_dict({}).canonical_json()


def test_no_drafts_is_one_point_whatever_the_other_rows_name():
    # experiments/spec-decode.toml: 4 acceptance rates x 4 rows. The "no drafts" row (k = 0)
    # speculates nowhere, so its 4 points are one run (one key); the other 12 points differ
    # in k, method or acceptance: 1 + 12 = 13 keys
    from kvsim.study.experiment import load_experiment

    points = load_experiment(Path(__file__).parents[2] / "experiments/spec-decode.toml").points()
    assert len(points) == 16
    off = {p.key for p in points if p.label == "no drafts"}
    assert len(off) == 1
    assert len({p.key for p in points}) == 13


def _eagle_sched(
    pool: PagedAllocator,
    k: int = 2,
    batched: int = 64,
    hash_lookahead: int = 1,
    lookahead: int | None = None,
    rates: list[float] | None = None,
):
    """A scheduler with a prefix cache and ``k`` drafts: EAGLE's ``k`` lookahead slots unless
    ``lookahead`` says otherwise (0: n-gram), acceptance ``rates`` (0.5 each by default)."""
    lookahead = k if lookahead is None else lookahead
    args = engine_args(
        max_num_batched_tokens=batched,
        max_num_seqs=4,
        max_model_len=64,
        reserve_null_block=True,
        enable_prefix_caching=True,
        num_speculative_tokens=k,
        num_lookahead_tokens=lookahead,
        num_hash_lookahead_tokens=hash_lookahead,
    )
    spec = SpecDecoder(k, lookahead, rates or [0.5] * k, seed=0)
    return make_scheduler(pool, args, spec=spec)


def _hit_after(first: list, second: list, hash_lookahead: int) -> int:
    """Tokens ``second``'s prompt hits once ``first`` has run to its end (blocks of 4)."""
    pool = PagedAllocator(
        capacity_tokens=40 * 4,
        block_size_tokens=4,
        reserve_null_block=True,
        enable_prefix_caching=True,
    )
    sched = _eagle_sched(pool, hash_lookahead=hash_lookahead)
    a = req(0, sum(n for _, n in first), 3, token_segments=tuple(first))
    sched.add_request(a)
    while sched.has_work():
        step(sched)
    b = req(1, sum(n for _, n in second), 3, token_segments=tuple(second))
    sched.add_request(b)
    sched.schedule()
    return b.num_computed_tokens


def test_eagle_keys_a_block_with_the_token_after_it():
    # vLLM 0.34.0, EAGLE with a prefix cache: num_hash_lookahead_tokens = 1, so block i's hash
    # covers tokens up to (i + 1) * 4 + 1. Prompts "s"x8 + "a"x3 and "s"x8 + "b"x3 share 8
    # tokens, 2 whole blocks, and part at token 8: block 1's key reads token 8 ("a" vs "b"),
    # so the second hits block 0 only, 4 tokens; keyed without the lookahead it hits 8 (its
    # cap is (11 - 1) // 4 = 2 blocks)
    first, second = [("s", 8), ("a", 3)], [("s", 8), ("b", 3)]
    assert _hit_after(first, second, hash_lookahead=1) == 4
    assert _hit_after(first, second, hash_lookahead=0) == 8
    # parting mid-block (token 6) the lookahead changes nothing: block 0 is shared, block 1 not
    first, second = [("s", 6), ("a", 5)], [("s", 6), ("b", 5)]
    assert _hit_after(first, second, 1) == _hit_after(first, second, 0) == 4


def test_a_padded_verification_counts_as_vllm_counts_it():
    # n-gram k = 2 (no lookahead slots), rates [1, 0]: a verification of 2 real drafts accepts
    # 1. Request 0 (prompt "s" x 10, output 8) runs alone: its prefill samples output 1, then
    # verifications at outputs 1, 3, 5 and 7 (the last keeps none of its accepted draft: 1
    # output left) - 4 drafts, 8 draft tokens, 4 accepted by the draws. Request 1 (prompt
    # "s" x 9, output 3) then hits 2 cached blocks (8 tokens, the cap (9 - 1) // 4 = 2): one
    # token left, so vLLM pads its drafts ([-1, -1], pad_spec_decode) and update_from_output
    # counts that verification as 2 draft tokens, 0 accepted; its next verification accepts 1
    # and finishes it. vLLM's counters: 6 drafts, 12 draft tokens, 5 accepted (vLLM 0.34.0's
    # own Scheduler gave these on the same requests); kvsim counted 5 / 10 / 5
    pool = PagedAllocator(
        capacity_tokens=41 * 4,
        block_size_tokens=4,
        reserve_null_block=True,
        enable_prefix_caching=True,
    )
    sched = _eagle_sched(pool, hash_lookahead=0, lookahead=0, rates=[1.0, 0.0])
    spec = sched.spec
    assert spec is not None
    first = req(0, 10, 8, token_segments=(("s", 10),))
    sched.add_request(first)
    while sched.has_work():
        step(sched)
    assert first.num_output_tokens == 8
    assert (spec.num_drafts, spec.num_draft_tokens, spec.num_accepted_tokens) == (4, 8, 4)
    second = req(1, 9, 3, token_segments=(("s", 9),))
    sched.add_request(second)
    plan, _ = step(sched)
    assert second.num_cached_tokens == 8
    assert plan.num_new_tokens == [3]  # its one token and the 2 placeholders
    while sched.has_work():
        step(sched)
    summary = spec.summary()
    counts = [
        summary[f"spec_decode_num_{c}"] for c in ("drafts", "draft_tokens", "accepted_tokens")
    ]
    assert counts == [6, 12, 5]
    assert summary["spec_decode_num_accepted_tokens_pos0"] == 5
    assert summary["spec_decode_num_accepted_tokens_pos1"] == 0


def test_lookahead_slots_are_held_not_cached():
    # vLLM allocate_slots caches min(computed + new, known) tokens, the lookahead slots left
    # out. A 10-token prompt in chunks of 6 with 2 lookahead slots: step 0 computes tokens 0-5
    # and holds 6 + 2 = 8 slots (2 blocks of 4), but only block 0 (tokens 0-3) is full of
    # computed tokens, so one block is cached, not the 2 that 8 slots would fill
    pool = PagedAllocator(
        capacity_tokens=20 * 4,
        block_size_tokens=4,
        reserve_null_block=True,
        enable_prefix_caching=True,
    )
    sched = _eagle_sched(pool, batched=6, hash_lookahead=0)
    sched.add_request(req(0, 10, 3, token_segments=(("s", 10),)))
    step(sched)
    assert len(pool.block_table(0)) == 2
    assert pool.pool.num_cached() == 1


def test_eagle_with_a_prefix_cache_keys_one_token_ahead():
    # vLLM 0.34.0 VllmConfig._resolve_num_hash_lookahead_tokens: an EAGLE-style drafter with
    # the prefix cache on -> 1; n-gram lookup, no prefix cache, or no speculation -> 0
    base = small({"num_speculative_tokens": 3, "acceptance_rate": 0.7})
    lookahead = config_from_dict(base).engine_args.num_hash_lookahead_tokens
    assert lookahead == 1
    ngram = {**base, "speculative": {**base["speculative"], "method": "ngram"}}
    assert config_from_dict(ngram).engine_args.num_hash_lookahead_tokens == 0
    uncached = {**base, "cache": {**base["cache"], "enable_prefix_caching": False}}
    assert config_from_dict(uncached).engine_args.num_hash_lookahead_tokens == 0
    assert config_from_dict({}).engine_args.num_hash_lookahead_tokens == 0


def test_a_verification_caches_its_computed_tokens_in_every_hybrid_group():
    # vLLM update_from_output: with drafts, cache_blocks(request, num_computed_tokens) after the
    # step, in every KV cache group, freeing nothing. A full and an 8-token sliding-window group
    # of blocks of 4, EAGLE k = 2 with a prefix cache (hash lookahead 1). A 12-token prompt:
    # step 0 computes tokens 0-11 and holds 12 + 2 lookahead = 14 slots, 4 blocks a group
    # (8 + the null block of 21: 12 free); at scheduling its known tokens are 12, so blocks
    # whose key reads a 13th token wait: min(12, 12 - 1) // 4 = 2 blocks a group keyed; after
    # the step it has sampled token 13, so min(12, 13 - 1) // 4 = 3 blocks a group: 6 keyed.
    # The window's first block (tokens 0-3 end before 12 - 8 + 1 = 5) stays until the next
    # allocation: still 12 free blocks
    from kvsim.config.layers import KVCacheGroup, KVCacheGroups
    from kvsim.core.kv.hybrid import HybridPagedAllocator

    kinds = (KVCacheGroup("full", 1), KVCacheGroup("sliding", 1, 8))
    pool = HybridPagedAllocator(
        capacity_tokens=21 * 4,
        kv_groups=KVCacheGroups(kinds, 1, 4, 1),
        enable_prefix_caching=True,
        max_in_flight_tokens=64,
        max_model_len=64,
    )
    sched = _eagle_sched(pool)
    sched.add_request(req(0, 12, 5, token_segments=(("s", 12),)))
    plan = sched.schedule()
    assert (pool.pool.num_cached(), pool.pool.num_free) == (4, 12)
    sched.complete(plan, 1.0, 1.0)
    assert (pool.pool.num_cached(), pool.pool.num_free) == (6, 12)


def lone_decoder(**extra) -> dict:
    # one request (prompt 16, output 41) with EAGLE's 3 drafts all accepted (rate 1: every
    # uniform draw u < 1)
    return {
        "model": "llama-3.1-8b",
        "gpu": "h100-80gb",
        "workload": {
            "lengths": "fixed",
            "fixed_prompt_tokens": 16,
            "fixed_output_tokens": 41,
            "num_requests": 1,
        },
        "speculative": {"num_speculative_tokens": 3, "acceptance_rate": 1.0},
        **extra,
    }


def test_a_lone_requests_prefill_and_verifications_run_as_one_span():
    # the prefill step samples output 1 and proposes 3 drafts; each verification then keeps all
    # 3 and samples one more: 4 outputs a step, so outputs 1 -> 41 take 40 / 4 = 10
    # verifications (the last: 37 outputs, 3 left, 3 accepted), 11 steps in all. Nothing
    # arrives or waits, and the prefill samples in its step, so all 11 steps are one span: one
    # memory row (11 at memory_resolution = "step"), the same finish
    fast = simulate(config_from_dict(lone_decoder(debug_invariants=True)))
    steps = simulate(config_from_dict(lone_decoder(memory_resolution="step")))
    for results, rows in ((fast, 1), (steps, 11)):
        s = results.summary
        assert (s["num_steps"], len(results.memory)) == (11, rows)
        assert (s["spec_decode_num_drafts"], s["spec_decode_num_draft_tokens"]) == (10, 30)
        assert s["spec_decode_num_accepted_tokens"] == 30
    assert fast.requests["finish_time_s"].iat[0] == pytest.approx(
        steps.requests["finish_time_s"].iat[0], rel=1e-12
    )
    # vLLM observes one inter-token latency a step that returns tokens (IterationStats): the 10
    # verifications after the prefill's first token, not 40 gaps between its 41 tokens; 30 of
    # its outputs were accepted drafts
    for results in (fast, steps):
        row = results.requests.iloc[0]
        assert row["num_draft_outputs"] == 30
        decode_s = row["finish_time_s"] - row["first_token_time_s"]
        itl = results.summary["inter_token_latency_seconds_mean"]
        assert itl == pytest.approx(decode_s / 10, rel=1e-12)
        text = prometheus_snapshot(results)
        assert (
            'vllm:inter_token_latency_seconds_count{engine="0",model_name="llama-3.1-8b"} 10.0'
            in text
        )
    # its last verification holds 52 + 4 computed + 3 lookahead = 59 slots: 4 blocks of 16 (64),
    # 8 past its final 16 + 41 - 1 = 56 tokens (internal fragmentation in the last step)
    assert steps.memory["internal_fragmentation"].iat[-1] == 8


@settings(max_examples=5, deadline=None)
@given(**DRAFTERS)
def test_speculative_spans_change_no_outcome(k, alpha, method, seed):
    # a light load (2 requests/s on 1 GiB) lets decoders run alone between arrivals: the run with
    # spans gives every request the same counts and times (to 1e-9: a span adds its steps'
    # durations before the clock moves) and the same draws as one planned step by step
    data = small(
        {"num_speculative_tokens": k, "acceptance_rate": alpha, "method": method}, kv_cache_gib=1
    )
    data["workload"] = {**data["workload"], "rate_per_s": 2.0, "num_requests": 30}
    cfg = config_from_dict({**data, "seed": seed, "debug_invariants": True})
    fast = simulate(cfg)
    steps = simulate(cfg.model_copy(update={"memory_resolution": "step"}))
    assert len(fast.memory) < len(steps.memory) == steps.summary["num_steps"]
    mine, theirs = fast.requests.set_index("req_id"), steps.requests.set_index("req_id")
    for col in ("num_preemptions", "num_cached_tokens", "output_tokens"):
        assert mine[col].equals(theirs[col]), col
    for col in ("first_token_time_s", "finish_time_s"):
        assert ((mine[col] - theirs[col]).abs() <= 1e-9 * theirs[col].abs()).all(), col
    for name, value in steps.summary.items():
        if name.startswith("spec_decode_num") or name in ("num_steps", "num_preemptions"):
            assert fast.summary[name] == value, name
    for share in ("token_states_pct", "internal_fragmentation_pct", "kv_cache_usage_perc"):
        assert fast.summary[share] == pytest.approx(steps.summary[share], rel=1e-9), share


def test_each_steps_tokens_as_vllm_observes_them():
    # vLLM's iteration_tokens_total observes, each step, the prompt tokens computed of the
    # requests sampling their first output plus every token sampled (new_token_ids). The EAGLE
    # case above: step 0 computes the 10-token prompt and samples 1 (11); steps 1 and 2 sample
    # 1 + 1 accepted (2 each); step 3 samples 2 but keeps only the 6th output (1)
    _, _, sched = spec_run(2, 2, [1.0, 0.0])
    assert sched.iteration_tokens == {11: 1, 2: 2, 1: 1}
    # all accepted (k = 3): 11, then 1 + 3 = 4 (outputs 5), then the last output alone (1)
    _, _, sched = spec_run(3, 3, [1.0, 1.0, 1.0])
    assert sched.iteration_tokens == {11: 1, 4: 1, 1: 1}


def test_a_drafter_as_large_as_its_target_is_warned(caplog):
    # Llama-3.1-8B: 8,030,000,000 parameters and 32 layers; a 20 B drafter or one with 64 KV
    # layers ran silently (EAGLE's head is 1 layer and a fraction of the weights)
    import logging

    from tests.conftest import forget_warnings

    base = {
        "model": "llama-3.1-8b",
        "gpu": "h100-80gb",
        "scheduler": {"max_model_len": 8192},
    }
    spec = {"num_speculative_tokens": 3, "acceptance_rate": 0.7}
    forget_warnings(caplog)
    with caplog.at_level(logging.WARNING, logger="kvsim.config"):
        config_from_dict({**base, "speculative": {**spec, "draft_num_params": 20_000_000_000}})
        config_from_dict({**base, "speculative": {**spec, "draft_num_kv_layers": 64}})
        config_from_dict({**base, "speculative": {**spec, "draft_num_params": 1_000_000_000}})
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2
    assert said[0].startswith(
        "speculative.draft_num_params = 20,000,000,000 is at least llama-3.1-8b's 8,030,000,000"
    )
    assert said[1].startswith(
        "speculative.draft_num_kv_layers = 64 is at least llama-3.1-8b's 32 layers"
    )
