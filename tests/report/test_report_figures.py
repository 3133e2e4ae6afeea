"""The report's charts: log axes labelled in seconds, not by their ticks' first digit."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from kvsim.view.report.data import load_run
from kvsim.view.report.figures import ecdf_figure, log_ticks


@pytest.mark.parametrize(
    ("lo", "hi", "ticks"),
    [
        # 1-2-5 ticks from the last at or below lo to the first at or above hi
        (0.02, 0.3, [0.02, 0.05, 0.1, 0.2, 0.5]),
        (0.017, 0.3, [0.01, 0.02, 0.05, 0.1, 0.2, 0.5]),
        (1.0, 1.0, [1.0]),
        # 1e-4 to 1e4 s is 8 decades: one tick a decade
        (1e-4, 1e4, [1e-4, 1e-3, 0.01, 0.1, 1.0, 10.0, 100.0, 1e3, 1e4]),
    ],
)
def test_log_ticks_by_hand(lo: float, hi: float, ticks: list[float]) -> None:
    assert log_ticks(lo, hi) == pytest.approx(ticks)


def test_ecdf_axes_read_in_seconds(small_runs) -> None:
    # plotly labelled the ticks between decades "2 3 ... 0.1": 0.02 s read as 2 s
    runs = [load_run(d) for d in small_runs]
    fig = ecdf_figure(runs)
    for j, metric in enumerate(
        ["time_to_first_token_seconds", "request_time_per_output_token_seconds"], start=1
    ):
        axis = fig.layout[f"xaxis{'' if j == 1 else j}"]
        values = pd.concat([r.results.requests[metric] for r in runs])
        values = values[values > 0]
        assert list(axis.tickvals) == log_ticks(values.min(), values.max())
        # each label reads as the seconds it marks ("0.02", not "2")
        assert [float(text) for text in axis.ticktext] == pytest.approx(list(axis.tickvals))
        # the axis spans its ticks: data of 22-26 ms, between the ticks 0.02 and 0.05, showed
        # none where plotly ranged the axis to the data alone
        ticks = list(axis.tickvals)
        assert list(axis.range) == pytest.approx([math.log10(ticks[0]), math.log10(ticks[-1])])


def test_a_narrow_latency_range_keeps_two_labelled_ticks() -> None:
    # TPOTs of 0.0220-0.0257 s lie between 0.02 and 0.05: both ticks, on an axis that holds them
    assert log_ticks(0.0220, 0.0257) == pytest.approx([0.02, 0.05])
