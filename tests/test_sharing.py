"""Sharing end to end: token identities and chained keys, workload features, the scheduler's
sequence count, hit rates of a shared prefix, and Figure 15's shares in a short run."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kvsim.config import config_from_dict
from kvsim.core.scheduler import make_scheduler
from kvsim.engine import simulate
from kvsim.workload import WorkloadSpec, generate_requests
from kvsim.workload.request import Request
from kvsim.workload.tokens import KeyChain, prompt_segments, stream_segments


def test_mooncake_ids_map_onto_any_block_size():
    # ids [0, 1, 2] vs [0, 1, 5]: the first 1,024 tokens are equal, then they differ
    a = Request(0, 0.0, 1400, 1, 1, prefix_hash_ids=(0, 1, 2))
    b = Request(1, 0.0, 1400, 1, 1, prefix_hash_ids=(0, 1, 5))
    chain = KeyChain()
    for block in (16, 100, 512, 1000):
        ka = chain.block_keys(prompt_segments(a), 1400 // block, block)
        kb = chain.block_keys(prompt_segments(b), 1400 // block, block)
        same = 1024 // block  # blocks entirely inside the shared 1,024 tokens
        assert ka[:same] == kb[:same]
        assert all(x != y for x, y in zip(ka[same:], kb[same:], strict=True))


def test_keys_chain_and_salt():
    chain = KeyChain()
    x = ((("doc", 1), 8), (("tail", 1), 8))
    y = ((("doc", 2), 8), (("tail", 1), 8))  # same second block, different first block
    kx, ky = chain.block_keys(x, 2, 8), chain.block_keys(y, 2, 8)
    assert kx[0] != ky[0]
    assert kx[1] != ky[1]
    assert chain.block_keys(x, 2, 8) == kx  # equal prefixes, equal keys
    assert chain.block_keys(x, 2, 8, salt="t") != kx


def test_interned_ids_are_equal_exactly_for_equal_items_and_keep_only_shapes():
    chain = KeyChain()
    users = [chain.intern(("user", i)) for i in range(10_000)]
    assert len(set(users)) == len(users)
    assert chain.intern(("user", np.int64(7))) == users[7]  # equal items, equal ints
    assert chain.intern(("gen", 7)) != users[7]
    assert chain.intern((0, 7)) != users[7]  # an int where a kind was
    assert chain.intern(("gen", 7, 1)) != chain.intern(("gen", (7, 1)))
    # a table entry per shape (("user", int), ("gen", int), (int, int), ...), none per id: a
    # long run must not keep one for each request's segments
    assert len(chain._shapes) == 5


def test_keys_are_the_same_in_every_process():
    # string hashes are randomised per process; keys must not depend on them
    code = (
        "from kvsim.workload.tokens import KeyChain; c = KeyChain(); "
        "print(c.block_keys(((('sys', 0), 40), (('user', 3), 24)), 4, 16, salt='t'))"
    )
    root = str(Path(__file__).resolve().parents[1])
    path = os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])
    keys = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": path},
            capture_output=True,
            text=True,
            check=True,
            timeout=1200,
        ).stdout
        for seed in ("1", "2")
    }
    assert len(keys) == 1


def test_multi_turn_prompt_holds_the_previous_turn():
    spec = WorkloadSpec(
        lengths="alpaca_like", num_requests=6, num_turns=3, turn_gap_s=5.0, shared_prefix_tokens=10
    )
    reqs = generate_requests(spec, np.random.default_rng(0), max_model_len=2048)
    by_session: dict[int, list[Request]] = {}
    for r in reqs:
        by_session.setdefault(r.session_id, []).append(r)
    for turns in by_session.values():
        for prev, cur in itertools.pairwise(turns):
            history = stream_segments(prev)
            assert prompt_segments(cur)[: len(history)] == history
            assert cur.arrival_time_s == pytest.approx(prev.arrival_time_s + 5.0)
            assert cur.prompt_tokens > prev.prompt_tokens + prev.output_tokens


def test_parallel_and_beam_fields_reach_requests():
    spec = WorkloadSpec(lengths="fixed", num_requests=3, n=4)
    assert {
        r.num_seqs for r in generate_requests(spec, np.random.default_rng(0), max_model_len=2048)
    } == {4}
    with pytest.raises(ValueError, match="parallel sampling or beam search"):
        WorkloadSpec(n=2, beam_width=2)


def test_max_num_seqs_counts_group_sequences():
    # vllm-v0: a group of n = 2 samples counts 2 sequences against max_num_seqs
    cfg = config_from_dict(
        {
            "cache": {"allocator": "paged", "kv_cache_gib": 4},
            "scheduler": {"engine": "vllm-v0", "max_num_seqs": 5},
        }
    )
    from kvsim.engine.build import allocator_from_config

    sched = make_scheduler(allocator_from_config(cfg), cfg.engine_args)
    for i in range(3):
        sched.add_request(Request(i, 0.0, 10, 5, 5, n=2))
    plan = sched.schedule()
    assert len(plan.scheduled) == 2  # 2 + 2 sequences; a third group would make 6 > 5


def test_v1_fans_n_samples_out_into_requests_sharing_the_prompt_blocks():
    # vLLM v1 (ParentRequest): n = 3 becomes 3 requests; prefix caching inside the allocation
    # call lets the 2nd and 3rd hit the first's (40 - 1) // 16 = 2 full prompt blocks at once
    cfg = config_from_dict(
        {
            "cache": {"kv_cache_gib": 4},
            "workload": {
                "lengths": "fixed",
                "fixed_prompt_tokens": 40,
                "fixed_output_tokens": 8,
                "num_requests": 1,
                "n": 3,
            },
        }
    )
    res = simulate(cfg)
    assert res.summary["num_requests"] == 3
    assert res.requests["parent_id"].tolist() == [0, 0, 0]
    assert res.summary["prefix_cache_hits"] == 2 * 32
    assert res.requests["first_scheduled_time_s"].nunique() == 1  # one step admits all three


@pytest.mark.parametrize(
    ("block", "shared", "expected_pct"),
    [
        (16, 15, 0.0),  # shorter than one block: never a hit
        (16, 16, 100 * 199 / 200 * 16 / 80),  # 199 of 200 requests hit one 16-token block of 80
        (32, 24, 0.0),
        (32, 32, 100 * 199 / 200 * 32 / 96),
    ],
)
def test_shared_prefix_hits_only_whole_blocks(block, shared, expected_pct):
    cfg = config_from_dict(
        {
            "cache": {"allocator": "paged", "kv_cache_gib": 12, "block_size_tokens": block},
            "workload": {
                "lengths": "fixed",
                "fixed_prompt_tokens": 64,
                "fixed_output_tokens": 16,
                "rate_per_s": 5.0,
                "num_requests": 200,
                "shared_prefix_tokens": shared,
            },
        }
    )
    summary = simulate(cfg).summary
    assert 100 * summary["prefix_cache_hit_rate"] == pytest.approx(expected_pct)
    assert summary["prefix_cache_queries"] == 200 * (shared + 64)


PREFIX_GROUPS_CSV = """prompt_tokens,output_tokens,arrival_time_s,prefix_group,prefix_tokens
300,10,0,a,256
300,10,10,a,256
300,10,20,a,256
300,10,30,,
"""
SESSION_CSV = """prompt_tokens,output_tokens,arrival_time_s,session_id
100,50,0,s
200,50,10,s
400,10,20,s
"""


@pytest.mark.parametrize(
    ("trace", "extra", "hits"),
    [
        # prefix groups, 16-token blocks, each request done before the next (10 s apart):
        # alone: requests 1 and 2 hit group a's 256 tokens -> 512
        (PREFIX_GROUPS_CSV, {}, 512),
        # a 64-token system prompt before each prompt: 1 and 2 hit 64 + 256 = 320 each, the
        # group-less 3 the prefix's 4 blocks -> 704 (the groups were dropped: 192)
        (PREFIX_GROUPS_CSV, {"shared_prefix_tokens": 64}, 704),
        # 2 tenants, round robin by request: 0 and 2 share tenant 0, so only 2 hits, 256 (0)
        (PREFIX_GROUPS_CSV, {"num_tenants": 2}, 256),
        # a 3-turn session: turn k's prompt repeats turn k-1's prompt and 50-token answer; turn
        # k-1 computed its prompt + 49 outputs: 149 -> 9 blocks (144), 249 -> 15 (240): 384
        (SESSION_CSV, {}, 384),
        # with the 64-token prefix: 213 -> 13 blocks (208), 313 -> 19 (304): 512 (it was 128)
        (SESSION_CSV, {"shared_prefix_tokens": 64}, 512),
        # 2 tenants by session: the session's turns stay in one tenant -> 384 as alone (0)
        (SESSION_CSV, {"num_tenants": 2}, 384),
    ],
)
def test_a_system_prompt_or_tenants_keep_a_traces_own_sharing(
    tmp_path: Path, trace: str, extra: dict, hits: int
) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(trace)
    config = config_from_dict(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-80gb",
            "workload": {"trace": str(path), **extra},
        }
    )
    assert simulate(config).summary["prefix_cache_hits"] == hits


def test_synthetic_turns_over_a_trace_with_sessions_say_they_replace_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    """num_turns chains a trace's rows into synthetic conversations; the trace's own session
    (all 3 rows) is not used, and the warning counts the rows that had one."""
    path = tmp_path / "trace.csv"
    path.write_text(SESSION_CSV)
    spec = {
        "trace": str(path),
        "arrival": "poisson",
        "rate_per_s": 1.0,
        "sample": "replay",
        "num_turns": 3,
    }
    config = config_from_dict({"model": "llama-3.1-8b", "gpu": "h100-80gb", "workload": spec})
    with caplog.at_level("WARNING"):
        simulate(config)
    assert "num_turns = 3 chains the trace's rows" in caplog.text
    assert "hash_ids of 3 of its 3 rows drawn are not used" in caplog.text
