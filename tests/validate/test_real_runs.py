"""The real measured runs (``$KVSIM_REAL_VLLM``; skipped without them): the readers' aggregates
equal the ones the sources published, and the facts the replay rests on hold in the files."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from kvsim.validate.catalog import list_runs, load_run
from kvsim.validate.peers import h100_peer_errors, llmservingsim_summary
from kvsim.validate.runs import ENV_VAR

ROOT = Path(os.environ.get(ENV_VAR, Path(__file__).resolve().parents[3] / "shared/data/real-vllm"))
pytestmark = pytest.mark.skipif(
    not (ROOT / "h100").is_dir(),
    reason=f"no measured runs: {ROOT / 'h100'} is not a folder (set {ENV_VAR} to the runs' folder)",
)

# the validate split's experiments in the peers' table (inference-sim/sim-to-real-accuracy-
# validation numbers them 2, 3 and 12)
VALIDATE = {
    "20260218-150956-codellama-34b-tp2-codegen": ("CodeLlama-34b-Instruct-hf", 2, "codegen"),
    "20260218-155500-codellama-34b-tp2-roleplay": ("CodeLlama-34b-Instruct-hf", 2, "roleplay"),
    "20260218-135247-mixtral-8x7b-v0-1-tp2-reasoning": ("Mixtral-8x7B-v0.1", 2, "reasoning"),
}


def test_the_splits_are_the_sources() -> None:
    runs = list_runs(ROOT)
    assert sorted(n for n, s in runs.items() if s == "validate") == sorted(VALIDATE)
    assert sum(s == "train" for s in runs.values()) == 10
    assert runs["rtx4090-llama-3.1-8b"] == "held-out"


@pytest.mark.parametrize("name", sorted(VALIDATE))
def test_measured_means_equal_the_peers_actual_values(name: str) -> None:
    # the peers' "actual" mean E2E and TTFT of every stage (milliseconds in their file) are the
    # means of the same requests this reader measures
    run = load_run(name, ROOT)
    model, tp, workload = VALIDATE[name]
    peers = h100_peer_errors(ROOT / "h100" / "peer_errors.csv", model, tp, workload, 0.0)
    assert peers.empty  # a measured mean of 0 matches no experiment
    measured = run.measured
    e2e = float(measured["e2e_s"].mean())
    peers = h100_peer_errors(ROOT / "h100" / "peer_errors.csv", model, tp, workload, e2e)
    assert not peers.empty
    for stage, group in measured.groupby("stage"):
        for metric in ("e2e_s", "ttft_s"):
            theirs = peers[
                (peers["stage"] == stage)
                & (peers["metric"] == metric)
                & (peers["statistic"] == "mean")
            ]
            assert float(theirs["measured"].iloc[0]) == pytest.approx(
                float(group[metric].mean()), rel=1e-9
            )


def test_rtx4090_measured_values_equal_llmservingsims_vllm_column() -> None:
    run = load_run("rtx4090-llama-3.1-8b", ROOT)
    theirs = llmservingsim_summary(ROOT / "rtx4090-llama-3.1-8b" / "llmservingsim_summary.txt")
    mine = {
        ("ttft_s", "mean"): run.measured["ttft_s"].mean(),
        ("e2e_s", "mean"): run.measured["e2e_s"].mean(),
        ("e2e_s", "p99"): np.percentile(run.measured["e2e_s"], 99),
        ("tpot_s", "mean"): run.measured["tpot_s"].mean(),
    }
    for (metric, stat), value in mine.items():
        row = theirs[(theirs["metric"] == metric) & (theirs["statistic"] == stat)]
        assert float(row["measured"].iloc[0]) == pytest.approx(value, abs=1e-4)  # 0.1 ms rounding


@pytest.mark.full(seconds=10)
def test_h100_prompts_recur_every_100_requests() -> None:
    # the generator's 10 x 10 prompts (results/config.yaml) are sent in a cycle: the recorded
    # prompt lengths recur with period 100 (a match by chance among ~30 lengths: ~3 %)
    for name in list_runs(ROOT):
        if name.startswith("rtx"):
            continue
        run = load_run(name, ROOT)
        lengths = {r.req_id: r.prompt_tokens for r in run.requests}
        pairs = [(i, i + 100) for i in lengths if i + 100 in lengths]
        share = np.mean([lengths[a] == lengths[b] for a, b in pairs])
        assert share >= 0.95, name


def test_every_error_request_of_the_reasoning_run_comes_after_the_last_success() -> None:
    run = load_run("20260218-135247-mixtral-8x7b-v0-1-tp2-reasoning", ROOT)
    assert run.num_left_out == 3294
    assert len(run.measured) == 1506
    assert int(run.measured["req_id"].max()) == 1505
    assert len(run.requests) == 4800  # replayed as load


@pytest.mark.full(seconds=20)
def test_a_held_out_replay_gives_finite_errors() -> None:
    from kvsim.validate.errors import kv_usage_error, stage_errors
    from kvsim.validate.replay import replay_run

    replay = replay_run(load_run("rtx4090-llama-3.1-8b", ROOT))
    errors = stage_errors(replay)
    assert np.isfinite(errors["error_pct"]).all()
    kv = kv_usage_error(replay)
    assert kv is not None
    assert 0 <= kv["kv_mean_abs_diff_points"] <= 100
