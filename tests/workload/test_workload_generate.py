"""Synthetic arrivals and lengths: statistics against their definitions, caps, filters,
slicing and determinism. Expected values come from the distributions' formulas or by hand."""

from __future__ import annotations

import numpy as np
import pytest

from kvsim.workload import WorkloadSpec, generate_requests


def _gen(spec: WorkloadSpec, max_model_len: int = 2048, seed: int = 7) -> list:
    return generate_requests(spec, np.random.default_rng(seed), max_model_len=max_model_len)


def _fields(reqs: list) -> list[tuple]:
    return [
        (r.req_id, r.arrival_time_s, r.prompt_tokens, r.output_tokens, r.max_tokens) for r in reqs
    ]


def test_default_spec_generates_sorted_requests() -> None:
    reqs = _gen(WorkloadSpec())
    assert len(reqs) == 1000
    assert [r.req_id for r in reqs] == list(range(1000))
    times = [r.arrival_time_s for r in reqs]
    assert times == sorted(times)
    assert times[0] == 0.0
    assert all(r.prompt_tokens >= 1 and r.output_tokens >= 1 for r in reqs)
    assert all(r.output_tokens <= r.max_tokens for r in reqs)
    assert all(r.prompt_tokens + r.output_tokens <= 2048 for r in reqs)


def test_poisson_mean_gap_and_cv() -> None:
    rate_per_s = 4.0
    reqs = _gen(WorkloadSpec(rate_per_s=rate_per_s, num_requests=20001, lengths="fixed"))
    gaps = np.diff([r.arrival_time_s for r in reqs])
    # Exponential gaps: mean 1/rate = 0.25 s, CV 1. Std error of the mean: 0.25/sqrt(2e4) ~ 0.0018.
    assert gaps.mean() == pytest.approx(0.25, abs=0.01)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("cv", [0.5, 3.0])
def test_gamma_mean_gap_and_cv(cv: float) -> None:
    spec = WorkloadSpec(arrival="gamma", rate_per_s=2.0, cv=cv, num_requests=50001, lengths="fixed")
    gaps = np.diff([r.arrival_time_s for r in _gen(spec)])
    assert gaps.mean() == pytest.approx(0.5, rel=0.04)
    assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.08)


def test_time_scale_halves_synthetic_span() -> None:
    base = _gen(WorkloadSpec(num_requests=200))
    fast = _gen(WorkloadSpec(num_requests=200, time_scale=0.5))
    assert fast[-1].arrival_time_s == pytest.approx(base[-1].arrival_time_s / 2)
    assert [r.prompt_tokens for r in fast] == [r.prompt_tokens for r in base]


def test_duration_bounds_synthetic_arrivals() -> None:
    reqs = _gen(WorkloadSpec(rate_per_s=10.0, duration_s=500.0, lengths="fixed"))
    assert all(r.arrival_time_s < 500.0 for r in reqs)
    # Poisson count over 500 s at 10/s: mean 5000, std ~71.
    assert abs(len(reqs) - 5000) < 360


def test_determinism_and_seed_sensitivity() -> None:
    spec = WorkloadSpec(arrival="gamma", cv=2.0, rate_per_s=3.0, num_requests=300)
    assert _fields(_gen(spec, seed=1)) == _fields(_gen(spec, seed=1))
    assert _fields(_gen(spec, seed=1)) != _fields(_gen(spec, seed=2))


def test_rate_change_keeps_lengths() -> None:
    slow = _gen(WorkloadSpec(rate_per_s=1.0, num_requests=100))
    fast = _gen(WorkloadSpec(rate_per_s=5.0, num_requests=100))
    assert [r.prompt_tokens for r in slow] == [r.prompt_tokens for r in fast]


def test_sharegpt_like_matches_paper_means() -> None:
    # Paper (PagedAttention) ShareGPT means 161.31 / 337.99 after the 2048-token filter.
    reqs = _gen(WorkloadSpec(num_requests=30000), max_model_len=2048)
    assert np.mean([r.prompt_tokens for r in reqs]) == pytest.approx(161.31, rel=0.05)
    assert np.mean([r.output_tokens for r in reqs]) == pytest.approx(337.99, rel=0.03)


def test_alpaca_like_matches_paper_means() -> None:
    reqs = _gen(WorkloadSpec(lengths="alpaca_like", num_requests=30000), max_model_len=2048)
    assert np.mean([r.prompt_tokens for r in reqs]) == pytest.approx(19.31, rel=0.03)
    assert np.mean([r.output_tokens for r in reqs]) == pytest.approx(58.45, rel=0.03)


def test_lognormal_sigma_zero_is_exact() -> None:
    spec = WorkloadSpec(
        lengths="lognormal",
        prompt_mean_tokens=100,
        output_mean_tokens=20,
        prompt_sigma=0,
        output_sigma=0,
        num_requests=5,
    )
    assert {(r.prompt_tokens, r.output_tokens) for r in _gen(spec)} == {(100, 20)}


def test_lognormal_mean() -> None:
    spec = WorkloadSpec(
        lengths="lognormal",
        prompt_mean_tokens=300,
        output_mean_tokens=50,
        prompt_sigma=0.5,
        output_sigma=0.5,
        num_requests=20000,
    )
    reqs = _gen(spec, max_model_len=100_000)
    assert np.mean([r.prompt_tokens for r in reqs]) == pytest.approx(300, rel=0.02)
    assert np.mean([r.output_tokens for r in reqs]) == pytest.approx(50, rel=0.02)


def test_uniform_split_by_hand() -> None:
    # total 1001, ratio 3: output = ceil(1001/4) = 251, prompt = 750.
    spec = WorkloadSpec(
        lengths="uniform", min_total_tokens=1001, max_total_tokens=1001, num_requests=3
    )
    assert {(r.prompt_tokens, r.output_tokens) for r in _gen(spec)} == {(750, 251)}


def test_uniform_vidur_range() -> None:
    reqs = _gen(WorkloadSpec(lengths="uniform", num_requests=5000))
    totals = np.array([r.prompt_tokens + r.output_tokens for r in reqs])
    assert totals.min() >= 256
    assert totals.max() <= 2048
    assert totals.mean() == pytest.approx((256 + 2048) / 2, rel=0.03)
    ratio = sum(r.prompt_tokens for r in reqs) / sum(r.output_tokens for r in reqs)
    assert ratio == pytest.approx(3.0, rel=0.01)


def test_max_tokens_caps_output() -> None:
    spec = WorkloadSpec(
        lengths="fixed",
        fixed_prompt_tokens=40,
        fixed_output_tokens=500,
        max_tokens=100,
        num_requests=2,
    )
    assert {(r.prompt_tokens, r.output_tokens, r.max_tokens) for r in _gen(spec)} == {
        (40, 100, 100)
    }


def test_max_tokens_defaults_to_room_left() -> None:
    spec = WorkloadSpec(
        lengths="fixed", fixed_prompt_tokens=48, fixed_output_tokens=10, num_requests=1
    )
    assert _gen(spec, max_model_len=2048)[0].max_tokens == 2000


def test_overflow_drop_and_truncate() -> None:
    long = {
        "lengths": "fixed",
        "fixed_prompt_tokens": 1500,
        "fixed_output_tokens": 600,
        "num_requests": 4,
    }
    with pytest.raises(ValueError, match="no requests left"):
        _gen(WorkloadSpec(**long), max_model_len=2048)
    cut = _gen(WorkloadSpec(**long, overflow="truncate"), max_model_len=2048)
    assert {(r.prompt_tokens, r.output_tokens, r.max_tokens) for r in cut} == {(1500, 548, 548)}
    huge = dict(long, fixed_prompt_tokens=3000)
    cut = _gen(WorkloadSpec(**huge, overflow="truncate"), max_model_len=2048)
    assert {(r.prompt_tokens, r.output_tokens) for r in cut} == {(2047, 1)}


def test_drop_filter_redraws_to_requested_count() -> None:
    reqs = _gen(WorkloadSpec(num_requests=2000), max_model_len=512)
    assert len(reqs) == 2000
    assert all(r.prompt_tokens + r.output_tokens <= 512 for r in reqs)


def test_min_length_filters() -> None:
    spec = WorkloadSpec(
        lengths="alpaca_like", min_prompt_tokens=10, min_output_tokens=30, num_requests=2000
    )
    reqs = _gen(spec)
    assert min(r.prompt_tokens for r in reqs) >= 10
    assert min(r.output_tokens for r in reqs) >= 30


def test_user_file_replay_and_slicing(tmp_path) -> None:
    path = tmp_path / "mine.csv"
    path.write_text("input_len,output_len\n5,6\n2,9\n7,1\n8,3\n")
    spec = WorkloadSpec(trace=str(path), sample="replay", num_requests=3, min_prompt_tokens=3)
    reqs = _gen(spec)
    # Row (2, 9) fails min_prompt_tokens=3; the first three kept rows remain, in file order.
    assert [(r.prompt_tokens, r.output_tokens) for r in reqs] == [(5, 6), (7, 1), (8, 3)]


def test_turns_past_the_context_are_counted_in_a_warning(caplog, monkeypatch) -> None:
    from kvsim.base import say_once

    monkeypatch.setattr(say_once, "SAID", set())
    # fixed 300-token messages and 200-token answers, 4 turns, max_model_len 1,000: turn k's
    # prompt is 300 + 500 k tokens, so turn 0 (300) and turn 1 (800) fit, turns 2-3 do not
    spec = WorkloadSpec(
        lengths="fixed",
        fixed_prompt_tokens=300,
        fixed_output_tokens=200,
        num_requests=8,
        num_turns=4,
    )
    with caplog.at_level("WARNING"):
        reqs = _gen(spec, max_model_len=1000)
    assert len(reqs) == 4  # two conversations of two turns
    assert "4 of 8 turns are not generated" in caplog.text
    assert "the run has 4 requests, not workload.num_requests = 8" in caplog.text


def test_a_shared_prefix_that_pushes_requests_past_max_model_len_says_how_many_it_cut(
    caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    """The same draws with and without a 1,800-token prefix (it is added after drawing): a
    request is cut where 1,800 + prompt + output passes 2,048 (its output shortened), its prompt
    too where 1,800 + prompt passes 2,047; the warning gives both counts, worked here from the
    prefix-free draws."""
    import logging

    plain = generate_requests(
        WorkloadSpec(num_requests=200), np.random.default_rng(5), max_model_len=2048
    )
    cut = sum(1800 + r.prompt_tokens + r.output_tokens > 2048 for r in plain)
    prompts = sum(1800 + r.prompt_tokens > 2047 for r in plain)
    assert 0 < prompts < cut < 200
    spec = WorkloadSpec(num_requests=200, shared_prefix_tokens=1800)
    with caplog.at_level(logging.WARNING, logger="kvsim.workload"):
        shared = generate_requests(spec, np.random.default_rng(5), max_model_len=2048)
    assert max(r.prompt_tokens + r.output_tokens for r in shared) <= 2048
    (message,) = [m.getMessage() for m in caplog.records if "shared_prefix" in m.getMessage()]
    assert f"{cut} of 200 requests" in message
    assert f"the output first ({prompts} of them to a prompt of max_model_len - 1" in message


def test_a_shared_prefix_cuts_only_requests_that_fit_alone_and_counts_prompt_cuts(
    caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    """Ten fixed requests of 1,000 + 1 tokens behind a 1,500-token prefix at max_model_len
    2,048: each prompt is cut from 2,500 to 2,047 tokens (the output, 1 token, is not): all ten
    counted, as prompt cuts. Ten of 3,000 + 10 tokens, too long alone: kept whole behind the
    prefix (3,100 + 10, rejected later as without it), not cut and not counted."""
    import logging

    from kvsim.workload.sharing import apply_sharing

    def fixed(prompt: int, output: int, prefix: int) -> WorkloadSpec:
        return WorkloadSpec(
            num_requests=10,
            lengths="fixed",
            fixed_prompt_tokens=prompt,
            fixed_output_tokens=output,
            shared_prefix_tokens=prefix,
        )

    rng = np.random.default_rng(1)
    short = generate_requests(fixed(1000, 1, 0), rng, max_model_len=4096)
    with caplog.at_level(logging.WARNING, logger="kvsim.workload"):
        cut = apply_sharing(fixed(1000, 1, 1500), short, 2048)
    assert {(r.prompt_tokens, r.output_tokens) for r in cut} == {(2047, 1)}
    (message,) = [m.getMessage() for m in caplog.records if "shared_prefix" in m.getMessage()]
    assert "10 of 10 requests that fit max_model_len = 2,048 alone" in message
    assert "the output first (10 of them to a prompt of max_model_len - 1" in message
    caplog.clear()
    long = generate_requests(fixed(3000, 10, 0), rng, max_model_len=4096)
    with caplog.at_level(logging.WARNING, logger="kvsim.workload"):
        kept = apply_sharing(fixed(3000, 10, 100), long, 2048)
    assert {(r.prompt_tokens, r.output_tokens) for r in kept} == {(3100, 10)}
    assert not [m for m in caplog.records if "shared_prefix" in m.getMessage()]


def test_overflow_cut_output_serves_as_vllm_does(tmp_path) -> None:
    """vLLM 0.34.0's server: a prompt of max_model_len tokens or more is refused
    (``_validate_prompt_len``); a shorter one runs with max_tokens lowered to max_model_len -
    prompt (``get_max_tokens``). max_model_len 1,100: (1,000, 50) runs whole; (1,000, 200) runs
    with 100 outputs; (1,200, 5) stays whole, for the run to reject. Fixed lengths 1,500 +
    600 at 2,048 run with 548 outputs (not redrawn: vLLM would serve them so)."""
    trace = tmp_path / "t.csv"
    trace.write_text("prompt_tokens,output_tokens\n1000,50\n1000,200\n1200,5\n")
    spec = WorkloadSpec(trace=str(trace), overflow="cut_output", num_requests=3)
    got = sorted((r.prompt_tokens, r.output_tokens) for r in _gen(spec, max_model_len=1100))
    assert got == [(1000, 50), (1000, 100), (1200, 5)]
    fixed = WorkloadSpec(
        lengths="fixed",
        fixed_prompt_tokens=1500,
        fixed_output_tokens=600,
        num_requests=4,
        overflow="cut_output",
    )
    assert {(r.prompt_tokens, r.output_tokens) for r in _gen(fixed, max_model_len=2048)} == {
        (1500, 548)
    }


def test_a_multi_turn_rate_over_a_duration_starts_conversations_across_the_whole_window() -> None:
    """``rate_per_s`` counts conversation starts (WorkloadSpec): Poisson at 0.5/s over 1,000 s
    starts Poisson(500) conversations (sd 22.4; 4 sd: 410 to 590) spread over the window (none
    in its last 100 s has chance e^-50), each of 4 turns 20 s apart (fixed 100-token messages
    and answers: turn 3's prompt is 700 tokens, within 8,192). Drawing 500 request times and
    starting a conversation at each of the first quarter gave 125 conversations in 250 s."""
    spec = WorkloadSpec(
        lengths="fixed",
        fixed_prompt_tokens=100,
        fixed_output_tokens=100,
        rate_per_s=0.5,
        duration_s=1000.0,
        num_turns=4,
        turn_gap_s=20.0,
    )
    reqs = _gen(spec, max_model_len=8192)
    turns: dict[int, list[float]] = {}
    for r in reqs:
        turns.setdefault(r.session_id, []).append(r.arrival_time_s)
    assert 410 <= len(turns) <= 590
    assert all(len(times) == 4 for times in turns.values())
    starts = sorted(min(times) for times in turns.values())
    assert 900.0 < starts[-1] < 1000.0
    assert all(max(times) - min(times) == pytest.approx(60.0) for times in turns.values())


def test_multi_turn_requests_keep_the_clients_max_tokens() -> None:
    """``workload.max_tokens = 50`` caps every turn's output and its ``max_tokens`` (what a
    contiguous reservation holds), as it does a single-turn request: fixed 100-token messages
    asking 500 answer tokens, 2 turns, max_model_len 8,192 -> 50 and 50 for every request
    (turn 1's context, 250 tokens, leaves 7,942: the client's 50 is the smaller)."""
    spec = WorkloadSpec(
        lengths="fixed",
        fixed_prompt_tokens=100,
        fixed_output_tokens=500,
        max_tokens=50,
        rate_per_s=2.0,
        num_requests=10,
        num_turns=2,
        turn_gap_s=5.0,
    )
    reqs = _gen(spec, max_model_len=8192)
    assert len(reqs) == 10
    assert {r.output_tokens for r in reqs} == {50}
    assert {r.max_tokens for r in reqs} == {50}
    assert sorted({r.prompt_tokens for r in reqs}) == [100, 250]
