"""A NaN fleet metric (not measured: a hit rate with no lookup, a latency with no finished
request) is never drawn as a 0: no bar, "n/a" in its place, a warning with the count."""

from __future__ import annotations

import logging
import math

import pandas as pd
import pytest

from kvsim.study import figures
from kvsim.study.load import SweepResults
from kvsim.view.fleet_plots import point_bars


def _panels(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def test_a_nan_value_gets_no_bar_but_an_na_mark_at_its_place() -> None:
    table = pd.DataFrame({"prefix_cache_hit_rate": [0.5, math.nan, 0.25]})
    fig = point_bars(table, ["a", "b", "c"], ["prefix_cache_hit_rate"])
    (ax,) = _panels(fig)
    # rows 0 and 2 measured: two bars at x = 0 and 2, of heights 0.5 and 0.25
    bars = sorted((p.get_x() + p.get_width() / 2, p.get_height()) for p in ax.patches)
    assert bars == [(pytest.approx(0.0), 0.5), (pytest.approx(2.0), 0.25)]
    texts = {t.get_text(): t for t in ax.texts}
    # the bars' values ("{:.3g}": 0.5, 0.25) and one "n/a" at row 1; no "nan" and no "0"
    assert sorted(texts) == ["0.25", "0.5", "n/a"]
    assert texts["n/a"].get_position()[0] == 1
    # the missing row keeps its place: the axis spans every row's tick
    low, high = ax.get_xlim()
    assert low < 0
    assert high > 2


def _sweep(tmp_path, columns: dict[str, list[float]]) -> SweepResults:
    summary = pd.DataFrame({"fleet.router": ["rr", "lp", "kv"], **columns})
    return SweepResults(tmp_path, summary, {"swept_fields": ["fleet.router"], "name": "t"})


def _drawn(monkeypatch, sweep: SweepResults, tmp_path) -> list:
    saved: list = []
    monkeypatch.setattr(figures, "_save", lambda fig, path, written: saved.append(fig))
    figures._fleet_figures(sweep, tmp_path, [])
    return saved


def test_fleet_figure_marks_a_point_with_no_latency_na_and_warns_the_count(
    tmp_path, monkeypatch, caplog
) -> None:
    sweep = _sweep(
        tmp_path,
        {
            # router "lp" finished no request: its TTFT is undefined (NaN), not 0 s
            "time_to_first_token_seconds_p50": [0.2, math.nan, 0.3],
            "prefix_cache_hit_rate": [math.nan] * 3,  # no lookup anywhere: left out
            "usd_per_million_output_tokens": [1.5, 2.0, 2.5],
        },
    )
    with caplog.at_level(logging.INFO, logger="kvsim.study.figures"):
        (fig,) = _drawn(monkeypatch, sweep, tmp_path)
    ttft, usd = _panels(fig)  # hit rate: no panel (NaN at all 3 points)
    assert len(ttft.patches) == 2  # 3 points less the unmeasured one
    assert [t.get_text() for t in ttft.texts].count("n/a") == 1
    assert len(usd.patches) == 3
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1
    assert "time_to_first_token_seconds_p50" in warned[0]
    assert "1 of 3 points" in warned[0]
    assert any("prefix_cache_hit_rate" in r.getMessage() for r in caplog.records)


def test_no_measured_fleet_metric_draws_no_figure_and_warns(tmp_path, monkeypatch, caplog) -> None:
    # every metric NaN or 0: nothing to draw (the old code divided by 0 panels)
    sweep = _sweep(tmp_path, {"prefix_cache_hit_rate": [math.nan, 0.0, math.nan]})
    with caplog.at_level(logging.WARNING, logger="kvsim.study.figures"):
        assert _drawn(monkeypatch, sweep, tmp_path) == []
    assert "no fleet.png" in caplog.text
