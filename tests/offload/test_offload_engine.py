"""A CPU-tier hit that arrives while the GPU copy was evicted, hand-worked end to end.

OPT-13B: 800 KiB = 819,200 bytes of KV per token, so a 16-token block is 13,107,200 bytes. The
GPU pool is 13 blocks (block 0 is vLLM v1's null block: 12 usable, ids 1..12); the CPU tier is
0.5 GiB = 536,870,912 bytes -> 40 blocks (536,870,912 // 13,107,200 = 40.96); the link carries
1 GB/s each way (``offload.link_bandwidth_bytes_per_s``), so one block crosses in 13.1072 ms.

- A (t=0): prompt ``a`` x 160 = 10 full blocks, 2 outputs. Its prefill computes 160 tokens and
  caches blocks a0..a9; after the step they are stored to the tier: 10 blocks, 131,072,000 bytes.
  Its second step computes token 161 in an 11th block (partial); A finishes and frees all 11.
- B (t=5): prompt ``b`` x 176 = 11 blocks, 2 outputs: it needs cdiv(177, 16) = 12 blocks, the
  whole pool, so every one of A's cached blocks is evicted from the GPU. B's 11 full blocks are
  stored to the tier (40 blocks: no eviction there).
- C (t=10): prompt ``a`` x 160 + ``c`` x 20 = 180 tokens, 2 outputs. GPU lookup: block a0 is
  gone -> 0 tokens. Tier lookup over its 180 // 16 = 11 full blocks: a0..a9 held and stored,
  the 11th (a ``c`` block) not -> 10 blocks = 160 tokens to load. The load takes
  10 x 13,107,200 = 131,072,000 bytes / 1e9 = 0.131072 s, during which C holds 10 GPU blocks and
  waits; at t=10.131072 it is scheduled and its prefill computes 180 - 160 = 20 tokens (164
  fewer than without the tier, which computes all 180). C's ``c`` block (tokens 160..175) is
  then stored: 22 blocks stored in all, 288,358,400 bytes GPU->CPU.
- Queries: 160 + 176 + 180 = 516 tokens; hits 160 (vLLM's external prefix cache counters).
"""

from __future__ import annotations

import pytest

from kvsim import simulate
from kvsim.config.sim import config_from_dict
from kvsim.results.offload import TIER_COLUMNS
from kvsim.workload.request import Request
from tests.conftest import forget_warnings

BLOCK_BYTES = 16 * 819_200


def config(offload_gib: float | None, prompt_only: bool = True, **extra: object):
    data: dict[str, object] = {
        "model": "opt-13b",
        "gpu": "a100-40gb",
        "cache": {"kv_cache_bytes": 13 * BLOCK_BYTES, "enable_prefix_caching": True},
        "scheduler": {"max_model_len": 192},
        "debug_invariants": True,
        **extra,
    }
    if offload_gib is not None:
        data["offload"] = {
            "kv_offloading_size": offload_gib,
            "link_bandwidth_bytes_per_s": 1e9,
            "offload_prompt_only": prompt_only,
        }
    return config_from_dict(data)


def requests() -> list[Request]:
    return [
        Request(0, 0.0, 160, 2, 2, token_segments=(("a", 160),)),
        Request(1, 5.0, 176, 2, 2, token_segments=(("b", 176),)),
        Request(2, 10.0, 180, 2, 2, token_segments=(("a", 160), ("c", 20))),
    ]


def test_cpu_tier_hit_after_gpu_eviction() -> None:
    with_tier = simulate(config(0.5), requests())
    without = simulate(config(None), requests())
    s = with_tier.summary
    assert s["cpu_tier_blocks"] == 40
    # C: no GPU hit (B evicted a0..a9), 160 tokens from the tier
    assert s["prefix_cache_hits"] == without.summary["prefix_cache_hits"] == 0
    assert s["external_prefix_cache_queries"] == 516
    assert s["external_prefix_cache_hits"] == 160
    assert s["kv_offload_loads"] == 1
    assert s["kv_offload_bytes_cpu_to_gpu"] == 10 * BLOCK_BYTES == 131_072_000
    assert s["kv_offload_time_cpu_to_gpu_s"] == pytest.approx(0.131072)
    assert s["kv_offload_bytes_gpu_to_cpu"] == 22 * BLOCK_BYTES == 288_358_400
    assert s["cpu_tier_stored_blocks"] == 22
    assert s["cpu_tier_evicted_blocks"] == 0
    c = with_tier.requests.set_index("req_id").loc[2]
    assert c["num_cached_tokens"] == 160
    # prefill computed (vLLM's request_prefill_kv_computed_tokens): 180 - 160 = 20, not 180
    assert c["prompt_tokens"] - c["num_cached_tokens"] == 20
    plain_c = without.requests.set_index("req_id").loc[2]
    assert plain_c["prompt_tokens"] - plain_c["num_cached_tokens"] == 180
    assert c["first_scheduled_time_s"] == pytest.approx(10.131072)  # after the load
    assert c["request_queue_time_seconds"] == pytest.approx(0.131072)
    # the prefill after the load computes 20 tokens, not 180: one short step (A's and B's
    # prefills of 160 and 176 tokens take longer on the same GPU)
    prefill = c["request_prefill_time_seconds"]
    assert prefill < without.requests.set_index("req_id").loc[2, "request_prefill_time_seconds"]
    assert c["first_token_time_s"] == pytest.approx(10.131072 + prefill)


def test_a_hit_still_being_stored_holds_the_request_until_the_copy_ends() -> None:
    """vLLM 0.34.0: a tier block whose copy is in flight is ``HIT_PENDING``, and a request
    whose hit run holds one waits (``get_num_new_matched_tokens`` returns ``None``) rather than
    compute what the tier is about to hold. The engine, with nothing else to run, sleeps until
    the copy ends.

    B arrives at t=0.001, while A's prefill runs; it needs the whole pool, so it starts when A
    finishes and evicts A's cached blocks. A's 10 blocks cross the 1 GB/s link from the end of
    A's prefill (its first token) for 10 x 13.1072 ms = 0.131072 s. C arrives at t=0.1, after B
    finished and before that copy ends: the GPU has none of A's blocks, the tier all 10 still
    storing, so C waits until the copy ends, then loads them (another 0.131072 s) and starts:
    first scheduled at A's first token + 0.262144 s, with 160 tokens cached. Without the
    deferral C would miss the tier and prefill all 180 tokens at t=0.1."""
    reqs = [
        Request(0, 0.0, 160, 2, 2, token_segments=(("a", 160),)),
        Request(1, 0.001, 176, 2, 2, token_segments=(("b", 176),)),
        Request(2, 0.1, 180, 2, 2, token_segments=(("a", 160), ("c", 20))),
    ]
    run = simulate(config(0.5), reqs).requests.set_index("req_id")
    a_stored_s = run.loc[0, "first_token_time_s"] + 0.131072
    assert run.loc[1, "finish_time_s"] < 0.1 < a_stored_s  # (the scenario's premise)
    assert run.loc[2, "num_cached_tokens"] == 160
    assert run.loc[2, "first_scheduled_time_s"] == pytest.approx(a_stored_s + 0.131072)


def test_a_request_arriving_during_a_load_starts_at_once() -> None:
    """C's load runs from t=10 to 10.131072 with nothing else to run; D (a prompt of its own,
    32 tokens: its prefill takes the 2 GPU blocks of 12 that C's 10 leave) arrives at t=10.05
    and is scheduled then, not when the load ends."""
    d = Request(3, 10.05, 32, 2, 2, token_segments=(("d", 32),))
    run = simulate(config(0.5), [*requests(), d]).requests.set_index("req_id")
    assert run.loc[3, "first_scheduled_time_s"] == pytest.approx(10.05)
    assert run.loc[2, "first_scheduled_time_s"] >= 10.131072


def test_tier_occupancy_series_conserves_blocks() -> None:
    """One memory row per engine event, each with the tier's blocks at its start
    (stored, storing, loading, free): t=0 (A's prefill) an empty tier; t=5 (B) A's 10 blocks,
    whose copy ended at 0.021 + 0.131 s; t=10.131072 (C, its load just ended) A's and B's 21.
    C's wait for its load is an idle gap with no row (nothing runs)."""
    memory = simulate(config(0.5), requests()).memory
    tier = memory[list(TIER_COLUMNS)]
    assert (tier.sum(axis=1) == 40).all()  # every tier block in exactly one category
    assert memory["time_s"].tolist() == pytest.approx([0.0, 5.0, 10.131072])
    assert tier.to_numpy().tolist() == [[0, 0, 0, 40], [10, 0, 0, 30], [21, 0, 0, 19]]


def test_tier_miss_changes_nothing_but_counters() -> None:
    """A tier too small for A's prefix (1 block) holds only the last block stored; C misses
    its first block, so nothing loads and the run times equal the run without a tier."""
    small = simulate(config(BLOCK_BYTES / 2**30), requests())
    plain = simulate(config(None), requests())
    assert small.summary["cpu_tier_blocks"] == 1
    assert small.summary["kv_offload_loads"] == 0
    assert small.summary["external_prefix_cache_hits"] == 0
    cols = ["first_token_time_s", "finish_time_s"]
    assert small.requests[cols].equals(plain.requests[cols])


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"scheduler": {"engine": "vllm-v0", "max_model_len": 192}}, "vllm-v1"),
        (
            {"cache": {"kv_cache_bytes": 13 * BLOCK_BYTES, "allocator": "radix"}},
            "allocator 'radix'",
        ),
        (
            {"cache": {"kv_cache_bytes": 13 * BLOCK_BYTES, "enable_prefix_caching": False}},
            "enable_prefix_caching",
        ),
    ],
)
def test_offload_refused_outside_vllm_v1_paged_caching(extra: dict, match: str) -> None:
    with pytest.raises(ValueError, match=rf"offload\.kv_offloading_size: .*{match}"):
        config(0.5, **extra)


def test_bad_offload_values_name_field_and_value() -> None:
    with pytest.raises(
        ValueError, match=r"offload\.kv_offloading_size: .*greater than or equal to 0.*-1"
    ):
        config_from_dict({"offload": {"kv_offloading_size": -1}})
    with pytest.raises(ValueError, match=r"offload\.kv_offloading_backend: .*'lmcache'"):
        config_from_dict({"offload": {"kv_offloading_size": 1, "kv_offloading_backend": "lmcache"}})
    with pytest.raises(ValueError, match=r"offload\.kv_offloading_size: .*holds no block"):
        config_from_dict({"offload": {"kv_offloading_size": 1e-6}})


def test_unset_offload_keeps_the_canonical_config() -> None:
    assert "offload" not in config(None).canonical_json()
    assert '"offload"' in config(0.5).canonical_json()


def test_tier_blocks_are_page_aligned_and_mla_keeps_one_copy_under_tp() -> None:
    """vLLM 0.34.0 ``CPUOffloadingSpec``: ``num_chunks = cpu_bytes // round_up(block bytes x
    copies, 4096)``, one copy per worker unless an MLA model runs tensor parallel alone
    (``replicated_layout``). An MLA model of 61 layers (DeepSeek-V3's), latent 512 + 64 in
    bf16 on TP 2: one block 16 x 61 x 576 x 2 = 1,124,352 bytes (274.5 pages) -> one copy
    rounded up to 275 x 4096 = 1,126,400; 16 GiB = 17,179,869,184 // 1,126,400 = 15,252
    blocks (15,252 x 1,126,400 = 17,179,852,800; kvsim had 17,179,869,184 // 2 // 1,124,352 =
    7,639). Llama-3.1-8B on TP 2: two
    copies of 16 x 32 x 4 x 128 x 2 x 2 = 1,048,576 bytes, whole pages: 8,192 blocks."""
    from kvsim.config.offload import cpu_tier_blocks

    mla = config_from_dict(
        {
            "model": {
                "preset": "llama-3.1-8b",
                "num_layers": 61,
                "kv_lora_rank": 512,
                "qk_rope_head_dim": 64,
                "num_kv_heads": 1,
            },
            "gpu": "h100-80gb",
            "parallel": {"tensor_parallel_size": 2},
            "offload": {"kv_offloading_size": 16},
        }
    )
    assert mla.bytes_per_token == 61 * 576 * 2
    assert cpu_tier_blocks(mla) == 15_252
    dense = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "parallel": {"tensor_parallel_size": 2},
            "offload": {"kv_offloading_size": 16},
        }
    )
    assert cpu_tier_blocks(dense) == 8_192


def test_zero_size_is_off() -> None:
    """``kv_offloading_size = 0`` runs as without the section (a sweep's "off" point)."""
    off = simulate(config(0.0), requests())
    plain = simulate(config(None), requests())
    assert "cpu_tier_blocks" not in off.summary
    assert off.requests.equals(plain.requests)


def test_prometheus_counters_in_vllms_names() -> None:
    """A/B/C: the connector's 516 query tokens and 160 hits; the GPU prefix cache's own hits
    stay 0 (C's 160 cached tokens all came from the tier)."""
    from kvsim.results.prometheus import prometheus_snapshot

    text = prometheus_snapshot(simulate(config(0.5), requests()))
    lines = {ln.split("{")[0]: float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines() if "{" in ln}
    assert lines["vllm:external_prefix_cache_queries_total"] == 516
    assert lines["vllm:external_prefix_cache_hits_total"] == 160
    assert lines["vllm:prefix_cache_hits_total"] == 0
    assert lines["vllm:prompt_tokens_cached_total"] == 160


def test_prometheus_offload_series_in_vllms_names() -> None:
    """A/B/C (module docstring), the connector's and CPU manager's own series as vLLM 0.34.0
    writes them (``offloading/metrics.py``, ``cpu/spec.py``):
    - stores, one copy a request: A's 10 blocks (131,072,000 bytes), B's 11 (144,179,200), C's
      ``c`` block (13,107,200): 288,358,400 bytes in 0.2883584 s at 1 GB/s; one load, C's
      10 blocks, 131,072,000 bytes in 0.131072 s;
    - store sizes: 13,107,200 <= 20e6; the two others <= 150e6 (TRANSFER_SIZE_BUCKETS);
    - blocks each store asked the tier for (``cpu_allocation_size``): 10, 11 and 1 (C's other
      10 are held: it loaded them) -> le 1: 1, le 4: 1, le 16: 3, sum 22; none failed;
    - config: 40 chunks of 1 block, 40 x 13,107,200 = 524,288,000 bytes (a block is 3,200
      pages of 4 KiB: no padding), 40 x 192 // cdiv(192, 16) = 640 tokens."""
    from kvsim.results.prometheus import prometheus_snapshot

    text = prometheus_snapshot(simulate(config(0.5), requests()))
    rows = [ln.rsplit(" ", 1) for ln in text.splitlines() if not ln.startswith("#")]
    value = {name: float(number) for name, number in rows}
    base = 'engine="0",model_name="opt-13b"'
    assert value[f"vllm:kv_offload_store_bytes_total{{{base}}}"] == 288_358_400
    assert value[f"vllm:kv_offload_store_time_total{{{base}}}"] == pytest.approx(0.2883584)
    assert value[f"vllm:kv_offload_load_bytes_total{{{base}}}"] == 131_072_000
    assert value[f"vllm:kv_offload_load_time_total{{{base}}}"] == pytest.approx(0.131072)
    store = f'{base},transfer_type="GPU_to_CPU"'
    assert value[f"vllm:kv_offload_total_bytes_total{{{store}}}"] == 288_358_400
    assert value[f'vllm:kv_offload_total_bytes_total{{{base},transfer_type="CPU_to_GPU"}}'] == (
        131_072_000
    )
    assert value[f"vllm:kv_offload_allocation_failure_total{{{base}}}"] == 0
    size = {
        le: value[f'vllm:kv_offload_store_size_bucket{{engine="0",le="{le}",model_name="opt-13b"}}']
        for le in ("10000000.0", "20000000.0", "100000000.0", "150000000.0", "+Inf")
    }
    assert size == {
        "10000000.0": 0,
        "20000000.0": 1,
        "100000000.0": 1,
        "150000000.0": 3,
        "+Inf": 3,
    }
    assert value[f"vllm:kv_offload_store_size_sum{{{base}}}"] == 288_358_400
    assert value[f"vllm:kv_offload_size_count{{{store}}}"] == 3
    assert value[f"vllm:kv_offload_load_size_count{{{base}}}"] == 1
    alloc = {
        le: value[
            f'vllm:kv_offload_cpu_allocation_size_bucket{{engine="0",le="{le}",model_name="opt-13b"}}'
        ]
        for le in ("1.0", "4.0", "16.0")
    }
    assert alloc == {"1.0": 1, "4.0": 1, "16.0": 3}
    assert value[f"vllm:kv_offload_cpu_allocation_size_sum{{{base}}}"] == 22
    info = next(ln for ln in text.splitlines() if ln.startswith("vllm:kv_offload_config_info{"))
    for label in (
        'cpu_num_chunks="40"',
        'cpu_blocks_per_chunk="1"',
        'cpu_kv_cache_size_bytes="524288000"',
        'cpu_kv_cache_size_tokens="640"',
    ):
        assert label in info


def test_a_decoding_request_offers_each_block_at_the_end_of_the_step_that_fills_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One request, prompt 20 tokens, 40 outputs, alone (a 13-block pool fits its 60 tokens):
    #   step 1 prefills tokens 0..19: block 0 (tokens 0..15) is full after it
    #   step j >= 2 computes token 18 + j: block 1 fills with token 31 (step 13), block 2 with
    #   token 47 (step 29); the last token computed is 58 (the 60th is sampled, never cached),
    #   so block 3 (48..63) never fills
    # From step 2 on it decodes as a cohort member, in spans: each block is still offered to the
    # tier at the end of the step that fills it (vLLM offers a scheduled request's newly full
    # blocks after each step), not when its request is next handled on its own. With
    # offload_prompt_only off (vLLM's default stores block 0 alone: the prompt's only full one)
    # the three are stored.
    from kvsim.core.scheduler.offload import OffloadConnector

    offers: list[tuple[int, float]] = []  # (blocks covered, when)
    store_tokens = OffloadConnector.store_tokens

    def spy(self, computed, now_s):  # type: ignore[no-untyped-def]
        offers.extend((n // 16, now_s) for _, n in computed)
        return store_tokens(self, computed, now_s)

    monkeypatch.setattr(OffloadConnector, "store_tokens", spy)
    request = [Request(0, 0.0, 20, 40, 40, token_segments=(("d", 20),))]
    summary = simulate(config(0.5, prompt_only=False), request).summary
    assert summary["cpu_tier_stored_blocks"] == 3
    first_offer = {}
    for blocks, when in offers:
        for k in range(blocks):
            first_offer.setdefault(k, when)
    assert sorted(first_offer) == [0, 1, 2]
    # the step boundaries: one memory row a step
    steps = simulate(config(0.5, prompt_only=False, memory_resolution="step"), request).memory
    assert (steps["num_steps"] == 1).all()
    ends = (steps["time_s"] + steps["duration_s"]).tolist()
    for block, step in ((0, 1), (1, 13), (2, 29)):
        assert first_offer[block] == pytest.approx(ends[step - 1], rel=1e-12, abs=1e-12)


@pytest.mark.parametrize(("prompt_only", "hits"), [(True, 32), (False, 80)])
def test_a_later_turn_hits_the_earlier_turns_output_only_if_decode_blocks_are_stored(
    prompt_only: bool, hits: int
) -> None:
    """vLLM 0.34.0 stores only prompt blocks by default (``offload_prompt_only``,
    ``vllm/v1/kv_offload/base.py``; ``_calc_num_offloadable_tokens`` caps at
    ``num_prompt_tokens``). The pool and tier as above (12 usable GPU blocks, 40 CPU blocks):

    - A (t=0): prompt ``a`` x 32, 64 outputs: it computes 32 + 63 = 95 tokens, 5 full blocks
      (0..4); prompt-only stores blocks 0-1 (its 32 prompt tokens), else all 5.
    - B (t=5): prompt ``b`` x 176, 2 outputs: cdiv(177, 16) = 12 blocks, the whole pool, so
      every cached block of A's leaves the GPU; its 11 prompt blocks are stored either way.
    - C (t=10): the next turn, prompt = A's prompt + A's 64 outputs + ``c`` x 16 = 112 tokens,
      2 outputs: no GPU hit; the tier holds A's first 2 blocks (prompt-only: a hit of 32 tokens)
      or its first 5 (80 tokens; block 5, tokens 80..95, never filled in A). C's prefill then
      stores the rest of its 112 // 16 = 7 full blocks: 7 - 2 = 5, or 7 - 5 = 2.
    - Stored: 2 + 11 + 5 = 18, or 5 + 11 + 2 = 18: the same blocks, A's outputs stored by C
      rather than by A. Queries: 32 + 176 + 112 = 320 tokens either way."""
    run = [
        Request(0, 0.0, 32, 64, 64, token_segments=(("a", 32),)),
        Request(1, 5.0, 176, 2, 2, token_segments=(("b", 176),)),
        Request(2, 10.0, 112, 2, 2, token_segments=(("a", 32), (("gen", 0), 64), ("c", 16))),
    ]
    summary = simulate(config(0.5, prompt_only=prompt_only), run).summary
    assert summary["prefix_cache_hits"] == 0
    assert summary["external_prefix_cache_queries"] == 320
    assert summary["external_prefix_cache_hits"] == hits
    assert summary["cpu_tier_stored_blocks"] == 18


def test_a_load_takes_no_lookahead_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM 0.34.0 allocates an async load's blocks with no lookahead (``Scheduler.schedule``:
    ``effective_lookahead_tokens = 0`` while ``load_kv_async``: no step runs during the load).
    A/B/C above under EAGLE, k = 3: a block's key covers the token after it, so C's block 9
    (tokens 144..159, then A's first output or C's ``c``) differs from A's: the tier hits 9
    blocks = 144 tokens, and C holds cdiv(144, 16) = 9 GPU blocks while they load, not
    cdiv(144 + 3, 16) = 10."""
    from kvsim.core.scheduler.offload import OffloadConnector

    held: list[tuple[int, int]] = []  # (loaded tokens, GPU blocks held) at each load's start
    start_load = OffloadConnector.start_load

    def spy(self, request, gpu_hit, num_loaded):  # type: ignore[no-untyped-def]
        held.append((num_loaded, self.allocator.held_slots(request.req_id) // 16))
        return start_load(self, request, gpu_hit, num_loaded)

    monkeypatch.setattr(OffloadConnector, "start_load", spy)
    cfg = config(
        0.5,
        speculative={
            "method": "eagle",
            "num_speculative_tokens": 3,
            "acceptance_rate": 0.7,
            "draft_num_kv_layers": 0,
        },
    )
    summary = simulate(cfg, requests()).summary
    assert held == [(144, 9)]
    assert summary["external_prefix_cache_hits"] == 144


@pytest.mark.parametrize(("method", "stored"), [("ngram", 2), ("eagle", 2)])
def test_a_verifications_drafts_are_not_stored(method: str, stored: int) -> None:
    """vLLM stores min(computed + scheduled, known) tokens' full blocks
    (``_calc_num_offloadable_tokens``): a verification's drafts are scheduled, not known. One
    request, prompt 32 + output 15 = 47 tokens in blocks of 16, k = 3 drafts all accepted: the
    verification at 45 known tokens schedules 1 + 3, up to token 48, past its 47 (kvsim had
    asked the stream for block 2's key, which it cannot have). Blocks 0 and 1 (tokens 0-31)
    fill; tokens 32-46 never fill block 2: 2 blocks stored, with EAGLE's hash lookahead too
    (block 1 is keyed once token 32 is known). (offload_prompt_only off: with it on, block 2,
    past the prompt, would not be stored whatever the drafts.)"""
    cfg = config(
        1.0,
        prompt_only=False,
        speculative={
            "method": method,
            "num_speculative_tokens": 3,
            "acceptance_rate": 1.0,
            "draft_num_kv_layers": 0,  # (blocks of the target's layers only: BLOCK_BYTES)
        },
    )
    run = [Request(0, 0.0, 32, 15, 15, token_segments=(("a", 32),))]
    summary = simulate(cfg, requests=run).summary
    assert summary["cpu_tier_stored_blocks"] == stored
    assert summary["kv_offload_bytes_gpu_to_cpu"] == stored * BLOCK_BYTES


def test_a_disk_hit_after_the_cpu_copy_was_evicted_end_to_end() -> None:
    """A/B/C above with an 11-block CPU tier and a 40-block disk (0.5 GiB) whose links carry
    0.5 GB/s each way (a block in 26.2144 ms).

    - A's 10 blocks are stored to the CPU tier and written on to the disk (by ~0.5 s).
    - B's 11 blocks need 11 CPU slots: one is free, so A's 10 are evicted (CPU evictions: 10);
      B's are written to the disk too (the disk holds 21 blocks, no eviction).
    - C (t=10): GPU miss; CPU miss at a0; the disk holds a0..a9 -> all 10 promoted, evicting 10
      of B's 11 CPU blocks (20 evictions). Disk->CPU: 131,072,000 bytes / 0.5e9 = 0.262144 s, C
      waits; at 10.262144 the tier holds them and C loads them over the 1 GB/s link, 0.131072 s:
      first scheduled at 10.393216 with 160 tokens cached.
    - C's ``c`` block is stored after its prefill: one more CPU eviction (21; B's last block) and
      one more disk write: 22 blocks written, 288,358,400 bytes CPU->disk.
    """
    offload = {
        "kv_offloading_size": 11.5 * BLOCK_BYTES / 2**30,  # floor -> 11 blocks
        "link_bandwidth_bytes_per_s": 1e9,
        "disk_offloading_size": 0.5,  # 40 blocks
        "disk_read_bandwidth_bytes_per_s": 0.5e9,
        "disk_write_bandwidth_bytes_per_s": 0.5e9,
    }
    run = simulate(config(None, offload=offload), requests())
    s = run.summary
    assert (s["cpu_tier_blocks"], s["disk_tier_blocks"]) == (11, 40)
    assert s["disk_tier_promoted_blocks"] == 10
    assert s["disk_tier_promotions"] == 1
    assert s["kv_offload_bytes_disk_to_cpu"] == 131_072_000
    assert s["kv_offload_time_disk_to_cpu_s"] == pytest.approx(0.262144)
    assert s["disk_tier_written_blocks"] == 22
    assert s["kv_offload_bytes_cpu_to_disk"] == 288_358_400
    assert s["disk_tier_evicted_blocks"] == 0
    assert s["cpu_tier_evicted_blocks"] == 21
    assert s["external_prefix_cache_hits"] == 160
    assert s["kv_offload_loads"] == 1
    c = run.requests.set_index("req_id").loc[2]
    assert c["num_cached_tokens"] == 160
    assert c["first_scheduled_time_s"] == pytest.approx(10.393216)
    from kvsim.results.prometheus import prometheus_snapshot

    text = prometheus_snapshot(run)
    lines = {ln.split("{")[0]: ln for ln in text.splitlines() if "{" in ln}
    read, write = (lines[f"vllm:kv_offload_tiering_{n}_bytes_total"] for n in ("read", "write"))
    assert 'tier="1:fs"' in read
    assert float(read.rsplit(" ", 1)[1]) == 131_072_000
    assert float(write.rsplit(" ", 1)[1]) == 288_358_400


def test_disk_bandwidths_without_a_disk_warn(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one warning per bandwidth written without a disk (kvsim.config.ignored's rule); a 0 GiB
    # disk written beside them is a sweep's "off" point: deliberate, not warned
    from kvsim.base import say_once
    from kvsim.config import config_from_dict

    monkeypatch.setattr(say_once, "SAID", set())  # (said once a process)
    drive = {"disk_read_bandwidth_bytes_per_s": 1.5e9, "disk_write_bandwidth_bytes_per_s": 1e9}
    with caplog.at_level("WARNING"):
        config_from_dict({"offload": {"kv_offloading_size": 1, **drive}})
    moot = [r.getMessage() for r in caplog.records if "has no effect" in r.getMessage()]
    assert moot == [
        f"offload.{name} = {value!r} has no effect: there is no disk tier: "
        "disk_offloading_size (GiB) is unset"
        for name, value in drive.items()
    ]
    forget_warnings(caplog)
    with caplog.at_level("WARNING"):
        config_from_dict({"offload": {"kv_offloading_size": 1, "disk_offloading_size": 0, **drive}})
    assert "has no effect" not in caplog.text


def test_a_fleet_sums_its_replicas_offload_counters() -> None:
    """Two replicas behind round robin, each with the 40-block tier: A goes to replica 0, B to
    replica 1, C to replica 0, where A's blocks are still cached on the GPU (B never reached
    it): C's GPU hit is a0..a9 = 160 tokens and the tier is asked for the 20 left, of which it
    holds none (its ``c`` block is new). Queries 160 + 176 + 20 = 356 tokens, 0 hits, no load;
    stored: A's 10 blocks and C's ``c`` block on replica 0, B's 11 on replica 1: 22 blocks,
    288,358,400 bytes GPU->CPU. Each replica's tier is 40 blocks (a tier's size is one GPU's
    share, as a lone engine reports it)."""
    from kvsim.fleet import simulate as simulate_fleet

    run = simulate_fleet(config(0.5, fleet={"replicas": 2, "router": "round_robin"}), requests())
    s = run.summary
    assert s["cpu_tier_blocks"] == 40
    assert s["external_prefix_cache_queries"] == 356
    assert s["external_prefix_cache_hits"] == 0
    assert s["external_prefix_cache_hit_rate"] == 0.0
    assert s["kv_offload_loads"] == 0
    assert s["cpu_tier_stored_blocks"] == 22
    assert s["kv_offload_bytes_gpu_to_cpu"] == 22 * BLOCK_BYTES == 288_358_400
    assert list(run.replicas["kv_offload_bytes_gpu_to_cpu"]) == [11 * BLOCK_BYTES] * 2
    assert set(TIER_COLUMNS) <= set(run.memory.columns)  # each replica's tier over time
    # every row's tier blocks add up to its replica's tier (40 blocks)
    assert (run.memory[list(TIER_COLUMNS)].sum(axis=1) == 40).all()


def test_a_dropped_load_counts_its_request_once_in_the_prefix_cache_counters() -> None:
    # vLLM 0.34.0 records a request's prefix-cache lookup at its admission, once; a later one
    # (after a preemption) counts apart (PrefixCacheStats ``preempted``). A load kvsim drops
    # (``kv_offload_loads_dropped``: its blocks freed before it ran) admits its request again:
    # that counts apart too, so prefix_cache_queries is every request's prompt once (the sum of
    # prompt tokens, which is what metrics.prom exports), and the tokens served from a cache
    # at first admission are the GPU's hits plus the tier's.
    config = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "workload": {"preset": "multi_turn_chat", "num_requests": 300},
            "cache": {"kv_cache_gib": 1},
            "scheduler": {"max_model_len": 8000},
            "offload": {"kv_offloading_size": 8},
        }
    )
    results = simulate(config)
    summary = results.summary
    assert summary["kv_offload_loads_dropped"] > 0  # (the case drops loads)
    assert summary["prefix_cache_queries"] == results.requests["prompt_tokens"].sum()
    cached = summary["prefix_cache_hits"] + summary["external_prefix_cache_hits"]
    assert summary["prefix_cached_tokens_total"] == cached


def test_a_prompt_the_tier_had_no_room_for_is_offered_again_while_it_decodes() -> None:
    # A 2-block tier (2 x 13,107,200 = 26,214,400 bytes = 0.0244140625 GiB, page-aligned:
    # 13,107,200 / 4096 = 3,200 pages a block). A (prompt 32: 2 full blocks) and B (prompt 16:
    # 1 full block) arrive at t=0 and prefill in step 1; at its end A's 2 blocks take both
    # slots (storing for 2 x 13.1072 ms), and B's offer finds no free slot and no evictable one
    # (A's are still storing): vLLM skips the store, and B is offered again at the end of each
    # later step that fills one of its blocks (token 31 fills its second block in step 17; only
    # its prompt's block is offered: offload_prompt_only). By then A's copies have ended, so B's
    # block evicts one of A's: 3 blocks stored, 1 evicted. (Without the retry: 2 stored, 0
    # evicted.) B decodes as a member of the decode cohort all along.
    gib = 2 * BLOCK_BYTES / 2**30
    run = simulate(
        config(gib),
        [
            Request(0, 0.0, 32, 40, 40, token_segments=(("a", 32),)),
            Request(1, 0.0, 16, 40, 40, token_segments=(("b", 16),)),
        ],
    )
    summary = run.summary
    assert summary["cpu_tier_blocks"] == 2
    assert summary["cpu_tier_stored_blocks"] == 3
    assert summary["cpu_tier_evicted_blocks"] == 1
