"""Figures 12, 13 and 15 through `kvsim reproduce`, against the paper's numbers (typed in here
from the paper) and bands; known misses are asserted to be misses, so a fix is noticed."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from kvsim.study.paper import reproduce
from kvsim.study.paper.fig12 import ratios
from tests.conftest import missing_trace

# Figure 13 (Kwon et al., SOSP 2023), batched requests; band +-15 %
FIG13 = {
    ("ShareGPT", "Orca (Max)"): 7.00,
    ("ShareGPT", "Orca (Pow2)"): 9.81,
    ("ShareGPT", "Orca (Oracle)"): 13.62,
    ("ShareGPT", "vLLM"): 30.42,
    ("Alpaca", "Orca (Max)"): 7.00,
    ("Alpaca", "Orca (Pow2)"): 43.24,
    ("Alpaca", "Orca (Oracle)"): 72.75,
    ("Alpaca", "vLLM"): 132.44,
}
# Only the ShareGPT vLLM bar is fitted (the per-step overhead); every other bar is predicted.
FIG13_FITTED = ("ShareGPT", "vLLM")
# Figure 15, % of KV saved; band +-2 points
FIG15 = {
    "parallel sampling n=2": 6.09,
    "parallel sampling n=4": 8.53,
    "parallel sampling n=6": 9.79,
    "beam search width=2": 37.56,
    "beam search width=4": 53.13,
    "beam search width=6": 55.16,
}
# The beam model's one parameter is fitted on width 6; widths 2 and 4 are predictions, held to
# the same band.
FIG15_FITTED = "beam search width=6"


def _needs_sharegpt() -> None:
    from kvsim.workload import DataNotFoundError, resolve_trace

    try:
        resolve_trace("sharegpt_opt")
    except DataNotFoundError as exc:
        pytest.skip(missing_trace("sharegpt_opt") or str(exc))


@pytest.mark.full(seconds=135)
def test_fig13_batch_sizes(tmp_path: Path) -> None:
    _needs_sharegpt()
    rep = reproduce("fig13", tmp_path)
    table = rep.table
    assert len(table) == 8
    for r in table.itertuples():
        paper = FIG13[(r.dataset, r.system)]
        assert r.paper == paper
        assert abs(r.mean_batched_requests / paper - 1) <= 0.15, r
        assert r.status == ("fitted" if (r.dataset, r.system) == FIG13_FITTED else "predicted")
        assert r.seeds == 4
    assert any("FITTED on vLLM / ShareGPT" in n for n in rep.notes)


@pytest.mark.full(seconds=55)
def test_fig12_rate_ratios_in_the_papers_bands(tmp_path: Path) -> None:
    _needs_sharegpt()
    rep = reproduce("fig12", tmp_path)
    rates = rep.table.dropna(subset=["sustainable_rate_per_s"]).set_index("system")
    vllm = rates.loc["vLLM", "sustainable_rate_per_s"]
    assert 1.7 <= vllm / rates.loc["Orca (Oracle)", "sustainable_rate_per_s"] <= 2.7
    assert 2.7 <= vllm / rates.loc["Orca (Max)", "sustainable_rate_per_s"] <= 8.0
    # §6.2: "up to 22x" FasterTransformer, which is no better than Orca (Max)
    faster = rates.loc["FasterTransformer", "sustainable_rate_per_s"]
    assert faster <= rates.loc["Orca (Max)", "sustainable_rate_per_s"]
    assert vllm / faster <= 22.0
    assert rep.in_band


def test_fig12_ratios_by_hand() -> None:
    rates = {"Orca (Max)": 0.5, "Orca (Oracle)": 1.0, "vLLM": 2.0, "FasterTransformer": 0.25}
    out = ratios(rates).set_index("ratio")
    assert out.loc["vLLM / Orca (Oracle)", "value"] == 2.0  # in 1.7-2.7
    assert out.loc["vLLM / Orca (Max)", "value"] == 4.0  # in 2.7-8
    assert out.loc["vLLM / FasterTransformer", "value"] == 8.0  # in 2.7-22
    assert out["in_band"].all()
    low = ratios({**dict.fromkeys(rates, 1.0), "vLLM": 1.5}).set_index("ratio")
    assert not low["in_band"].any()  # 1.5 is below every band
    high = ratios({**rates, "FasterTransformer": 0.05}).set_index("ratio")
    assert not high.loc["vLLM / FasterTransformer", "in_band"]  # 40 is above "up to 22"
    plot_only = ratios(rates, None).set_index("ratio")  # a panel published only as a plot
    assert plot_only["value"].to_dict() == {
        "vLLM / Orca (Max)": 4.0,
        "vLLM / Orca (Oracle)": 2.0,
        "vLLM / FasterTransformer": 8.0,
    }
    assert plot_only["paper"].isna().all()
    assert plot_only["in_band"].isna().all()


@pytest.mark.full(seconds=430)
def test_fig15_savings(tmp_path: Path) -> None:
    rep = reproduce("fig15", tmp_path)
    table = rep.table.set_index("system")
    assert table["fitted"].tolist() == [s == FIG15_FITTED for s in table.index]
    assert any(f"FITTED on {FIG15_FITTED}" in n for n in rep.notes)
    for system, paper in FIG15.items():
        saved = table.loc[system, "kv_saved_by_sharing_pct"]
        error = saved - paper
        assert abs(error) <= 2.0, (system, table.loc[system].to_dict())
        assert table.loc[system, "in_band"]  # the printed verdict agrees
    assert (table["num_preemptions"] == 0).all()  # sharing undisturbed


def test_quick_preemption_and_prefix_write_their_figures(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from kvsim.cli import app

    runner = CliRunner()
    result = runner.invoke(app, ["reproduce", "preemption", "--quick", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    png = tmp_path / "quick" / "preemption" / "preemption.png"
    assert png.stat().st_size > 20_000
    table = pd.read_csv(tmp_path / "quick" / "preemption" / "preemption.csv")
    assert set(table["preemption_mode"]) == {"recompute", "swap"}
    # the cost model's per-token swap cost falls as blocks grow (fewer, larger PCIe copies)
    by_block = table.groupby("cache.block_size_tokens")["swap_s_per_token"].first()
    assert by_block.is_monotonic_decreasing
    assert by_block.iloc[0] > by_block.iloc[-1]  # strictly: 16-token blocks copy 16x fewer
    bad = runner.invoke(app, ["reproduce", "fig99", "--out", str(tmp_path)])
    assert bad.exit_code == 2
    assert "unknown 'fig99'" in bad.output
    _prefix_hits_reach_the_naive_ceiling(runner, app, tmp_path)


def _prefix_hits_reach_the_naive_ceiling(runner, app, tmp_path: Path) -> None:
    """With a pool too large to evict, the allocator's hit rate is the ceiling counted naively
    from the trace's hash ids (every repeated 512-token id, first occurrences excluded); a
    smaller pool can only lose hits."""
    from kvsim.workload import DataNotFoundError, resolve_trace

    try:
        resolve_trace("mooncake_conversation")
    except DataNotFoundError:
        return  # the Mooncake trace is not in KVSIM_DATA
    result = runner.invoke(app, ["reproduce", "prefix-caching", "--quick", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    folder = tmp_path / "quick" / "prefix-caching"
    assert (folder / "prefix-caching.png").stat().st_size > 20_000
    table = pd.read_csv(folder / "prefix-caching.csv").sort_values("cache.kv_cache_gib")
    hit_pct = 100 * table["prefix_cache_hit_rate"]
    assert hit_pct.iloc[-1] == pytest.approx(table["ceiling_tokens_pct"].iloc[-1], abs=0.01)
    assert (hit_pct <= table["ceiling_tokens_pct"] + 0.01).all()


@pytest.mark.parametrize(
    "name", ["fig12-66b", "fig12-175b", "fig12-alpaca", "fig14", "fig16", "fig17", "fig18b"]
)
def test_more_figures_run_quick(name: str, tmp_path: Path) -> None:
    if name in ("fig12-66b", "fig12-175b", "fig18b"):
        _needs_sharegpt()
    if name == "fig17":
        from kvsim.workload import DataNotFoundError, resolve_trace

        try:
            resolve_trace("sharegpt_llama2")
        except DataNotFoundError as exc:
            pytest.skip(missing_trace("sharegpt_llama2") or str(exc))
    rep = reproduce(name, tmp_path, quick=True)
    assert [p.suffix for p in rep.paths] == [".csv", ".png"]
    assert rep.paths[1].stat().st_size > 10_000
    # Figures 14, 16 and 17 publish values (an error is shown), Figure 12's Alpaca panels only
    # plots (nothing to be in band with), the others bands
    assert (rep.in_band is None) == (name in ("fig14", "fig16", "fig17", "fig12-alpaca"))


# §6.3 (Kwon et al. 2023), ShareGPT: parallel sampling saves 16.2 % (n = 2) to 30.5 % (n = 6)
# of KV; band +-2 points. Predicted: nothing here is tuned to these numbers.
SHAREGPT_PARALLEL = {2: 16.2, 6: 30.5}


def _sharegpt_saving(**workload: int) -> float:
    from kvsim.config import config_from_dict
    from kvsim.engine import simulate

    cfg = config_from_dict(
        {
            "model": "opt-13b",
            "gpu": "a100-40gb",
            "cost": "vllm-2023",
            "cache": {"allocator": "paged", "kv_cache_gib": 12.0},
            "scheduler": {"engine": "vllm-v0", "max_model_len": 2048},
            "workload": {
                "preset": "sharegpt_paper",
                "rate_per_s": 0.25,
                "num_requests": 2000,  # seeds 0-3 then spread under 0.3 points (400: 0.8)
                **workload,
            },
        }
    )
    return float(simulate(cfg).summary["kv_saved_by_sharing_pct"])


@pytest.mark.parametrize(("n", "paper_pct"), sorted(SHAREGPT_PARALLEL.items()))
def test_sharegpt_parallel_sampling_saving(n: int, paper_pct: float) -> None:
    _needs_sharegpt()
    saved = _sharegpt_saving(n=n)
    assert abs(saved - paper_pct) <= 2.0, saved


# §6.3, ShareGPT: beam search saves 44.3 % (width 2) to 66.3 % (width 6); band +-2 points. The
# beam model's one parameter is fitted on Alpaca width 6 (the default). Its form (a branching
# rate falling as 1 / context) was chosen among the one-parameter forms tried with both datasets
# in view, so ShareGPT tests its fitted number, not the form.
SHAREGPT_BEAM = {2: 44.3, 6: 66.3}


@pytest.mark.full(seconds=40)
@pytest.mark.parametrize(("width", "paper_pct"), sorted(SHAREGPT_BEAM.items()))
def test_sharegpt_beam_search_saving(width: int, paper_pct: float) -> None:
    _needs_sharegpt()
    saved = _sharegpt_saving(beam_width=width)
    assert abs(saved - paper_pct) <= 2.0, saved


def test_fig2_caption_names_files_not_paths() -> None:
    from kvsim.study.paper.fig2 import file_names

    assert (
        file_names("lengths from /data/traces/sharegpt_opt_firstturn_lengths.csv, prompts <= 2048")
        == "lengths from sharegpt_opt_firstturn_lengths.csv, prompts <= 2048"
    )
    assert file_names("a table (/pkg/kvsim/data/sharegpt.parquet)") == "a table (sharegpt.parquet)"
