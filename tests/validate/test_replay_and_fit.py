"""Replaying a measured run (by hand on a tiny one), async scheduling's one-step lag, and the fit's
refusal to use any run outside the train split."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from kvsim.config import CostSpec, config_from_dict
from kvsim.engine import simulate
from kvsim.validate import calibration
from kvsim.validate.errors import ALL_STAGES, stage_errors
from kvsim.validate.fit import FitSplitError, ReplayCache, Window, fit_cost
from kvsim.validate.h100 import read_h100_run
from kvsim.validate.replay import replay_run
from kvsim.workload.request import Request

from .synthetic import TRAIN, VALIDATE, write_h100

# A GPU so fast that only the per-step overhead counts: every step takes 0.01 s.
FAST = {
    "roofline": "operator",
    "hbm_efficiency": 1.0,
    "flops_efficiency": 1.0,
    "step_overhead_s": 0.01,
    "per_seq_overhead_s": 0.0,
    "link_efficiency": 1.0,
    "allreduce_latency_s": 0.0,
    "allreduce_latency_per_peer_s": 0.0,
}


def test_replay_of_a_lone_request_by_hand(tmp_path: Path) -> None:
    # request 0 arrives at 0 on an idle engine (async scheduling schedules it at once): its
    # prefill step [0, 0.01) samples token 1, four decode steps the other 4 of its 5 outputs:
    # first token at 0.01, last at 0.05, before request 1 arrives (0.1). Client-timed: + 5 ms.
    run = replace(read_h100_run(write_h100(tmp_path), TRAIN), gpu="h200")
    fast = {**FAST, "hbm_efficiency": 1.0}  # the tiny model's 1 MB of weights: 0.2 us
    replay = replay_run(run, CostSpec.model_validate(fast), frontend_latency_s=0.005)
    row = replay.requests.set_index("req_id").loc[0]
    # (plus the tiny model's weight reads on an H200: about 40 ns a step)
    assert row["predicted_ttft_s"] == pytest.approx(0.015, abs=1e-6)
    assert row["predicted_e2e_s"] == pytest.approx(0.055, abs=1e-6)
    assert row["predicted_tpot_s"] == pytest.approx(0.01, abs=1e-6)
    assert row["measured_ttft_s"] == pytest.approx(0.02)
    errors = stage_errors(replay)
    assert set(errors["stage"]) == {0, 1, ALL_STAGES}
    # request 4 repeats request 0's prompt (cycle of 4): 40 tokens, 2 full blocks cached
    assert replay.summary["prefix_cache_hits"] > 0


def _two_requests(async_scheduling: bool) -> Any:
    # every step 0.1 s. A (arrives at 0 on an idle engine) is scheduled at once: prefill
    # [0, 0.1), decodes after. B arrives at 0.05, while A's step 0 runs.
    # sync: B is planned at 0.1 (step 1), samples its first token at 0.2: TTFT 0.15 s.
    # async: step 1 was planned at 0, while step 0 ran; B makes step 2 [0.2, 0.3): TTFT 0.25 s.
    config = config_from_dict(
        {
            "model": {
                "num_layers": 1,
                "num_attention_heads": 1,
                "num_kv_heads": 1,
                "head_dim": 1,
                "num_params": 1,
                "dtype_bytes": 1,
                "max_position_embeddings": 64,
            },
            "gpu": {
                "memory_bytes": 10**9,
                "hbm_bandwidth_bytes_per_s": 1e18,
                "fp16_flops_per_s": 1e18,
            },
            "cost": {**FAST, "step_overhead_s": 0.1},
            "cache": {"kv_cache_bytes": 2 * 64, "block_size_tokens": 4},
            "scheduler": {"async_scheduling": async_scheduling, "max_model_len": 32},
        }
    )
    requests = [Request(0, 0.0, 4, 10, 10), Request(1, 0.05, 4, 3, 3)]
    return simulate(config, requests).requests.set_index("req_id")


def test_async_scheduling_adds_one_step_to_an_arrival_during_a_step() -> None:
    sync, lagged = _two_requests(False), _two_requests(True)
    assert sync.loc[0, "time_to_first_token_seconds"] == pytest.approx(0.1)
    assert lagged.loc[0, "time_to_first_token_seconds"] == pytest.approx(0.1)  # idle: at once
    assert sync.loc[1, "time_to_first_token_seconds"] == pytest.approx(0.15)
    assert lagged.loc[1, "time_to_first_token_seconds"] == pytest.approx(0.25)
    assert lagged.loc[1, "first_scheduled_time_s"] == pytest.approx(0.2)


def test_async_scheduling_is_a_v1_knob() -> None:
    with pytest.raises(ValueError, match=r"scheduler\.async_scheduling: a vLLM v1 knob"):
        config_from_dict({"scheduler": {"engine": "vllm-v0", "async_scheduling": True}})


def test_the_fit_refuses_any_run_outside_the_train_split(tmp_path: Path) -> None:
    write_h100(tmp_path)
    validate_run = read_h100_run(tmp_path, VALIDATE)
    with pytest.raises(FitSplitError, match="only train runs may be fitted on"):
        fit_cost(
            [validate_run], ["step_overhead_s"], {"step_overhead_s": 0.001}, cache=ReplayCache(None)
        )


def test_calibration_fits_on_train_and_only_scores_validate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_h100(tmp_path)
    monkeypatch.setenv("KVSIM_REAL_VLLM", str(tmp_path))
    fitted_on: list[list[str]] = []
    scored_on: list[list[str]] = []
    real_fit = calibration.fit_cost

    def spy_fit(runs: Any, free: Any, start: Any, **kw: Any) -> Any:
        fitted_on.append([f"{r.name}:{r.split}" for r in runs])
        return real_fit(runs, free, start, **{**kw, "max_evaluations": 2, "window": Window(4, 2)})

    def spy_score(values: Any, names: list[str]) -> Any:
        scored_on.append(names)
        return 1.0, {"e2e_mean_median_abs_pct": 1.0, "ttft_mean_median_abs_pct": 1.0}

    monkeypatch.setattr(calibration, "fit_cost", spy_fit)
    monkeypatch.setattr(calibration, "validate_score", spy_score)
    out = tmp_path / "fit.toml"
    table = calibration.calibrate_from_runs(
        out, cache_path=None, candidates={"one": (("step_overhead_s",), {})}
    )
    assert fitted_on == [[f"{TRAIN}:train"]]  # the validate run never reaches the fit
    assert scored_on == [[VALIDATE]]
    assert table["provenance"]["train_runs"] == [TRAIN]
    assert "FITTED" in out.read_text()


def test_calibration_says_what_it_fitted_and_chose_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # split.txt names a train run whose files are gone and no validate run: the fit dropped
    # the one without a word and said it "chose on the validate split (3 runs)" of 10 runs
    write_h100(tmp_path, split=f"{TRAIN} train\ngone-run train\n")
    monkeypatch.setenv("KVSIM_REAL_VLLM", str(tmp_path))
    real_fit = calibration.fit_cost

    def quick_fit(runs: Any, free: Any, start: Any, **kw: Any) -> Any:
        return real_fit(runs, free, start, **{**kw, "max_evaluations": 2, "window": Window(4, 2)})

    monkeypatch.setattr(calibration, "fit_cost", quick_fit)
    said: list[str] = []
    out = tmp_path / "fit.toml"
    with caplog.at_level("WARNING", logger="kvsim.validate.calibration"):
        calibration.calibrate_from_runs(
            out,
            cache_path=None,
            candidates={"one": (("step_overhead_s",), {})},
            progress=said.append,
        )
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert "1 run of h100/split.txt is not under" in warned
    assert "gone-run (train)" in warned
    assert "no validate runs" in warned
    assert said[-1].startswith("chose 'one' on the train loss (no validate run)")
    header = out.read_text()
    assert "(1 H100 SXM run, vLLM 0.15.1)" in header
    assert "chosen on its train loss (no validate run)" in header


def test_a_tie_on_validate_keeps_the_simpler_candidate() -> None:
    candidates = {
        "five": (("a", "b", "c", "d", "e"), {}),
        "six": (("a", "b", "c", "d", "e", "f"), {}),
        "five too": (("a", "b", "c", "d", "g"), {}),
    }
    # six parameters beat five by 0.0004 points: a tie (TIE_POINTS = 0.1), the five stay
    assert (
        calibration.choose({"five": 2.4681, "six": 2.4677, "five too": 3.0}, candidates) == "five"
    )
    # by 0.2 points: the six win
    assert calibration.choose({"five": 2.5, "six": 2.3, "five too": 3.0}, candidates) == "six"
    # among as many parameters the better score wins outright
    assert calibration.choose({"five": 2.5, "six": 2.5, "five too": 2.45}, candidates) == "five too"


def test_a_cached_replay_is_not_reused_for_an_edited_run(tmp_path: Path) -> None:
    # the cache key was the run's name and request count: a run whose measurements changed
    # (every latency doubled) fitted to the old replay's statistics, the same loss
    from kvsim.validate.fit import replay_stats

    write_h100(tmp_path)
    run = read_h100_run(tmp_path, TRAIN)
    cache = ReplayCache(tmp_path / "replays.jsonl")
    values = {"step_overhead_s": 0.001}
    first, replayed = replay_stats(run, values, cache, None)
    assert replayed
    assert replay_stats(run, values, cache, None) == (first, False)  # the same run: cached
    doubled = run.measured.copy()
    doubled[["ttft_s", "e2e_s"]] *= 2
    edited = replace(run, measured=doubled)
    again, replayed = replay_stats(edited, values, ReplayCache(tmp_path / "replays.jsonl"), None)
    assert replayed
    measured = [k for k in again if k.endswith("/e2e_s/mean/measured")]
    assert measured
    assert again[measured[0]] == pytest.approx(2 * first[measured[0]])


def test_a_cache_line_without_statistics_is_skipped(tmp_path: Path, caplog) -> None:
    # {} read back as a replay whose every residual is 0: "train loss 0.0000"
    import json
    import logging

    path = tmp_path / "replays.jsonl"
    good = {"0/e2e_s/mean/measured": 1.0, "0/e2e_s/mean/predicted": 1.1}
    lines = [{"key": "a", "stats": {}}, {"key": "b", "stats": good}]
    lines.append({"key": "c", "stats": {"x/measured": 1.0}})  # (no predicted side)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with caplog.at_level(logging.WARNING, logger="kvsim.validate"):
        cache = ReplayCache(path)
    assert cache.get("a") is None
    assert cache.get("c") is None
    assert cache.get("b") == good
    assert sum("no statistics pair" in r.getMessage() for r in caplog.records) == 2


def test_train_runs_at_two_block_sizes_are_named(tmp_path: Path, monkeypatch) -> None:
    # "train runs at several block sizes: [16, 32]" named neither the runs nor the data folder
    import json

    from kvsim.validate.calibration import calibrate_from_runs

    write_h100(tmp_path, split=f"{TRAIN} train\n{VALIDATE} train\n")
    replay = tmp_path / "h100" / "replay" / f"{VALIDATE}.json"
    data = json.loads(replay.read_text())
    data["config"]["block_size"] = 32
    replay.write_text(json.dumps(data))
    monkeypatch.setenv("KVSIM_REAL_VLLM", str(tmp_path))
    with pytest.raises(ValueError, match=r"run at several block sizes \(16 tokens: ") as caught:
        calibrate_from_runs(tmp_path / "fit.toml", cache_path=None)
    assert f"32 tokens: {VALIDATE}" in str(caught.value)
    assert str(tmp_path) in str(caught.value)


def test_a_fit_stopped_by_its_evaluation_budget_is_warned(tmp_path: Path, caplog) -> None:
    # --max-evaluations 2 wrote a fit of flops_efficiency 0.259, where the search stopped,
    # as if it were a minimum
    import logging

    write_h100(tmp_path)
    run = read_h100_run(tmp_path, TRAIN)
    with caplog.at_level(logging.WARNING, logger="kvsim.validate"):
        fit_cost(
            [run],
            ["step_overhead_s"],
            {"step_overhead_s": 0.009},
            cache=ReplayCache(None),
            max_evaluations=1,
            window=Window(4, 2),
        )
    said = [r.getMessage() for r in caplog.records]
    assert any("stopped at --max-evaluations 1 before converging" in m for m in said), said
