"""Hybrid KV cache groups through the one engine: the vllm-v1 profile runs a model with sliding
and full layers on ``HybridPagedAllocator``, and the per-group columns add up to the pool's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim import Results, SimConfig, simulate
from kvsim.base.units import cdiv
from kvsim.workload.request import Request

WINDOW, BLOCK = 64, 16


def config(
    hybrid: bool = True,
    window: int = WINDOW,
    num_sliding_layers: int = 2,
    num_blocks: int = 400,
    **extra: object,
) -> SimConfig:
    """A 4-layer model: 2 full + 2 sliding (window 64): 2 groups of 2 layers (6 sliding of 8
    layers: 1 full + 3 sliding groups of 2); slots of 128 bytes, ``num_blocks`` of 16."""
    model = {
        "num_layers": 4 if num_sliding_layers == 2 else 8,
        "num_attention_heads": 4,
        "num_kv_heads": 2,
        "head_dim": 8,
        "num_params": 1_000_000,
        "max_position_embeddings": 4096,
        "attention": {
            "num_sliding_layers": num_sliding_layers,
            "sliding_window_tokens": window,
            "hybrid_kv_cache": hybrid,
        },
    }
    return SimConfig.model_validate(
        {
            "model": model,
            "gpu": "a100-40gb",
            # one slot: 2 layers x 2 x 2 heads x 8 x 2 bytes = 128 bytes
            "cache": {"kv_cache_bytes": num_blocks * BLOCK * 128, "block_size_tokens": BLOCK},
            "scheduler": {"max_model_len": 1024},
            "debug_invariants": True,
            **extra,
        }
    )


def test_engine_runs_hybrid_groups_and_their_columns_add_up():
    requests = [Request(i, 0.1 * i, 300 + 40 * i, 200, 200) for i in range(12)]
    cfg = config()
    assert cfg.bytes_per_token == 128
    result = simulate(cfg, requests)
    assert result.summary["num_requests"] == 12
    assert result.summary["kv_cache_groups"] == 2
    mem = result.memory
    held = mem["group0_full_held"] + mem["group1_sliding_held"]
    token = mem["group0_full_token_states"] + mem["group1_sliding_token_states"]
    # steady decoders join the decode cohort and run in spans of several steps (12 requests
    # of 200 output tokens each), each row the mean over its steps; the groups' totals are
    # still the pool's (no sharing)
    assert (mem["num_steps"] > 1).any()
    assert mem["num_steps"].sum() > 2 * len(mem)
    np.testing.assert_allclose(held, mem["held"])
    np.testing.assert_allclose(token, mem["token_states"])
    categories = ["token_states", "reservation", "internal_fragmentation"]
    categories += ["external_fragmentation", "free"]
    np.testing.assert_allclose(mem[categories].sum(axis=1), cfg.capacity_tokens)
    # a decoding request's window group holds at most cdiv(64, 16) + 1 = 5 blocks
    decoding = mem["num_prefills"] == 0
    per_request = mem["group1_sliding_held"] / mem["num_requests_running"].clip(lower=1)
    assert per_request[decoding].max() <= (cdiv(WINDOW, BLOCK) + 1) * BLOCK
    assert (mem["group1_sliding_outside_window"] < BLOCK * mem["num_requests_running"] + 1)[
        decoding
    ].all()


def test_hybrid_holds_fewer_slots_than_every_layer_full():
    requests = [Request(i, 0.0, 600, 100, 100) for i in range(4)]
    hybrid = simulate(config(True), requests).summary
    full = simulate(config(False), requests).summary
    # all-full: one group of 4 layers, a slot of 256 bytes: 200 blocks of 16 (same bytes)
    assert full["capacity_tokens"] == 200 * BLOCK
    assert full["num_gpu_blocks"] == 200
    assert hybrid["num_gpu_blocks"] == 400
    # 4 requests of 700 tokens: hybrid 44 full + <= 5 window blocks of 400 (<= 49 %), all-full
    # 44 of 200 blocks each (88 % at the end); the mean share of the pool in use is lower
    assert hybrid["kv_cache_usage_perc"] < full["kv_cache_usage_perc"]


@settings(max_examples=6, deadline=None)
@given(
    window=st.sampled_from([16, 17, 40, 64]),
    num_sliding_layers=st.sampled_from([2, 6]),
    num_blocks=st.integers(160, 400),
    caching=st.booleans(),
    shared_prefix_tokens=st.sampled_from([0, 40, 100]),
    rate_per_s=st.sampled_from([5.0, 60.0]),
    seed=st.integers(0, 999),
)
def test_decode_cohort_per_group_slots_match_the_allocator_at_every_event(
    window, num_sliding_layers, num_blocks, caching, shared_prefix_tokens, rate_per_s, seed
):
    # Steady decoders run as decode cohort members (spans of several steps where nothing
    # waits for KV); debug_invariants checks at every event, against the allocator's own
    # count of each member's groups (LazyDecodes.check_groups / check_step0_groups), the
    # cohort's running sums, and the pool's laws. Here: every slot in one category at every
    # row, the groups' held slots the pool's, and every request served.
    cfg = config(
        window=window,
        num_sliding_layers=num_sliding_layers,
        num_blocks=num_blocks,
        seed=seed,
        cache={
            "kv_cache_bytes": num_blocks * BLOCK * 128,
            "block_size_tokens": BLOCK,
            "enable_prefix_caching": caching,
        },
        scheduler={"max_model_len": 512},
        workload={
            "lengths": "lognormal",
            "arrival": "poisson",
            "rate_per_s": rate_per_s,
            "num_requests": 120,
            "max_total_tokens": 512,
            "shared_prefix_tokens": shared_prefix_tokens,
            "num_tenants": 2,
        },
    )
    result = simulate(cfg)
    assert result.summary["num_requests"] == 120
    mem = result.memory
    cats = ["token_states", "reservation", "internal_fragmentation"]
    cats += ["external_fragmentation", "free"]
    np.testing.assert_allclose(mem[cats].sum(axis=1), cfg.capacity_tokens)
    assert (mem[cats] >= -1e-6).all().all()
    groups = result.summary["kv_cache_groups"]
    held = sum(mem[c] for c in mem.columns if c.startswith("group") and c.endswith("_held"))
    assert groups == (2 if num_sliding_layers == 2 else 4)
    np.testing.assert_allclose(held, mem["unshared"])


def head_waits_behind_a_window(prompt_b: int) -> Results:
    """A (32-token prompt, 150 outputs) decodes while B (``prompt_b`` tokens, 8 outputs), which
    arrives during A's prefill, waits for KV: 1 full + 1 sliding group (W = 16), B = 16, 25
    blocks (the null block and 24 free)."""
    cfg = config(
        window=16,
        num_blocks=25,
        scheduler={"max_model_len": 192, "max_num_batched_tokens": 256},
    )
    return simulate(cfg, [Request(0, 0.0, 32, 150, 150), Request(1, 1e-9, prompt_b, 8, 8)])


def test_a_decode_span_ends_where_a_window_frees_the_block_the_waiting_head_needs():
    # 1 full + 1 sliding group (W = 16), B = 16, 25 blocks: the null block and 24 free.
    # A (32-token prompt, 150 outputs) prefills alone in step 1: 2 + 2 blocks, 20 free.
    # B (160-token prompt: 10 + 10 blocks) arrives during step 1. Step j >= 2 has A compute
    # token n = 30 + j: before it, A's window frees its first block once n - 16 + 1 reaches a
    # multiple of 16 (n = 31, 47, 63 ...) and A takes one block per group when n % 16 == 0.
    #   step 2  (n = 32): frees 1, takes 2 -> 19 free < 20: B waits for KV
    #   steps 3..16 (n = 33..46): nothing changes -> B waits; a decode span may cover them
    #   step 17 (n = 47): frees 1 -> 20 free: B is admitted and prefills
    # so the span from step 2 must end at step 16, before A's window frees its block.
    mem = head_waits_behind_a_window(160).memory
    assert mem["num_steps"].tolist()[:3] == [1, 15, 1]
    assert mem["num_prefills"].tolist()[:3] == [1, 0, 1]
    assert mem["num_requests_running"].tolist()[:3] == [1, 1, 2]
    assert mem["num_requests_waiting"].tolist()[1] == 1


def test_a_decode_span_runs_on_while_the_windows_free_fewer_blocks_than_the_head_lacks():
    # As above, but B has a 168-token prompt: cdiv(168, 16) = 11 blocks a group, 22 in all
    # (the sliding group's admission cap, cdiv(192, 16) + 1 = 13, does not bind). After
    # step 2, 19 are free: B lacks 3. From step 3 on, A's window frees 1 block every 16 steps
    # (n = 47, 63, ...) and its crossings take 2 the step after (n = 48, 64, ...), so the free
    # count runs 20, 18, 19, 17, ... and never reaches 22: B waits until A finishes. A samples
    # token 1 in step 1 and the other 149 in steps 2..150, so one span covers steps 2..150
    # (149 steps; a span that ended where a window frees a block would end at step 16); B
    # prefills alone in step 151 and decodes its other 7 tokens in steps 152..158, in the same
    # span: its first decode step frees the (168 - 16 + 1) // 16 = 9 sliding blocks its
    # prefill left outside its window (vLLM ``get_num_skipped_tokens``), as a pooled cohort
    # member's first step may (nobody waits for them).
    result = head_waits_behind_a_window(168)
    mem = result.memory
    assert mem["num_steps"].tolist() == [1, 149, 8]
    assert mem["num_prefills"].tolist() == [1, 0, 1]
    assert mem["num_requests_waiting"].tolist()[1] == pytest.approx(1)  # (a time mean)
    finish_a, first_b = (
        result.requests["finish_time_s"][0],
        result.requests["first_token_time_s"][1],
    )
    assert first_b > finish_a


def window16(
    num_blocks: int, max_model_len: int, requests: list[Request], block_ids: bool = False
) -> Results:
    """``requests`` on 1 full + 1 sliding group (W = 16), B = 16, ``num_blocks`` blocks (the
    null block and the rest free), 256 tokens a step; ``block_ids``: with a memory map (its
    frames read block ids, so no member takes anonymous blocks in bulk)."""
    cfg = config(
        window=16,
        num_blocks=num_blocks,
        scheduler={"max_model_len": max_model_len, "max_num_batched_tokens": 256},
    )
    return simulate(cfg, requests, map_every_s=0.01 if block_ids else None)


@pytest.mark.parametrize("block_ids", [False, True])
def test_a_just_prefilled_request_frees_what_left_its_window_at_its_first_decode_step(
    block_ids: bool,
):
    # 1 full + 1 sliding group (W = 16), B = 16, 25 blocks: the null block and 24 free.
    # A (150-token prompt: 10 + 10 blocks, 30 outputs) and B (64 tokens: 4 + 4, 5 outputs)
    # arrive together. Step 1: A prefills, 4 free; B needs 8 and waits for KV. Step 2 (A
    # computes token 150): vLLM's allocation for A first frees the sliding blocks wholly
    # before 150 - 16 + 1 = 135, (135 // 16) = 8 of them (12 free); token 150 needs no new
    # block (150 % 16 != 0), so B (8) is admitted in step 2. A joins the decode cohort after
    # its prefill, its first step freeing those 8 blocks (neither a crossing nor a window's
    # residue: nothing else would touch A there): the span after step 1 must end there (were
    # they not counted, it would run on to A's finish).
    # (the same with a memory map, whose block ids keep A one by one that step)
    reqs = [Request(0, 0.0, 150, 30, 30), Request(1, 0.0, 64, 5, 5)]
    result = window16(25, 192, reqs, block_ids)
    mem, req = result.memory, result.requests
    assert mem["num_steps"].tolist()[0] == 1
    assert mem["num_prefills"].tolist()[:2] == [1, 1]
    step1_end = mem["time_s"].iloc[0] + mem["duration_s"].iloc[0]
    assert req["first_scheduled_time_s"][1] == pytest.approx(step1_end)
    # in step 2, A holds 10 full blocks and 10 - 8 = 2 sliding ones; B 4 + 4
    assert mem["group1_sliding_held"].iloc[1] <= (2 + 4) * BLOCK


@pytest.mark.parametrize("block_ids", [False, True])
def test_a_member_freeing_its_prefills_window_blocks_in_a_step_taken_in_turn_needs_no_victim(
    block_ids: bool,
):
    # 1 full + 1 sliding group (W = 16), B = 16, 21 blocks: the null block and 20 free.
    # D (8-token prompt: 1 + 1 blocks, 20 outputs) and A (144 tokens: 9 + 9, 16 outputs)
    # prefill together in step 1: 0 free. In step 2 A computes token 144 and takes a block a
    # group (144 % 16 == 0), which the free pool cannot prove (0 < 2): each running request
    # is allocated in turn. vLLM's allocation for A first frees its sliding blocks wholly
    # before 144 - 16 + 1 = 129, (129 // 16) = 8 of them, so its 2 fit and nobody is
    # preempted; D and A then decode together until A's last token in step 16 (one span of
    # 15 steps), D alone in steps 17..20.
    reqs = [Request(0, 0.0, 8, 20, 20), Request(1, 0.0, 144, 16, 16)]
    result = window16(21, 160, reqs, block_ids)
    assert result.summary["num_preemptions"] == 0
    if not block_ids:  # (a memory map's frames also end events)
        assert result.memory["num_steps"].tolist() == [1, 15, 4]


def test_a_member_freeing_its_prefills_window_blocks_beside_a_sharing_prefill():
    # A (150 tokens, private) and S (300 tokens that another request may share: prefix
    # caching keys its blocks as they fill) arrive together, 256 tokens a step: A prefills
    # whole in step 1 and S its first 106 tokens. In step 2 S prefills its other 194, keying
    # blocks, so the pooled members' blocks are taken and freed in running order: A's step
    # frees its (150 - 16 + 1) // 16 = 8 sliding blocks then. The checks at every event
    # (debug_invariants) count the pooled members' blocks held in no table against the
    # allocator's (a leak there would show).
    shared = Request(1, 0.0, 300, 6, 6, token_segments=((7, 300),))
    result = window16(81, 320, [Request(0, 0.0, 150, 16, 16), shared])
    assert result.memory["num_prefills"].tolist()[:2] == [2, 1]
    assert result.summary["num_preemptions"] == 0
