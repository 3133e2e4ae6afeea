"""The published numbers kept as data equal the paper's, typed in here a second time from the
paper (Kwon et al., SOSP 2023: Figure 2 stacks, Figure 13 bars, Figure 15 savings, §6.2)."""

from __future__ import annotations

import pytest

from kvsim.study.paper.published import published, published_value


@pytest.mark.parametrize(
    ("figure", "dataset", "system", "metric", "value"),
    [
        ("fig2", "ShareGPT", "Orca (Max)", "token_states_pct", 20.4),
        ("fig2", "ShareGPT", "Orca (Pow2)", "external_fragmentation_pct", 41.6),
        ("fig2", "ShareGPT", "Orca (Oracle)", "reservation_pct", 25.2),
        ("fig2", "ShareGPT", "vLLM", "token_states_pct", 96.3),
        ("fig13", "ShareGPT", "vLLM", "num_requests_running_step_mean", 30.42),
        ("fig13", "Alpaca", "Orca (Oracle)", "num_requests_running_step_mean", 72.75),
        ("fig15", "Alpaca", "beam search width=6", "kv_saved_by_sharing_pct", 55.16),
        ("fig15", "Alpaca", "parallel sampling n=2", "kv_saved_by_sharing_pct", 6.09),
    ],
)
def test_published_values(figure, dataset, system, metric, value) -> None:
    assert published_value(figure, system, metric, dataset) == value


def test_figure12_bands_and_stack_sums() -> None:
    bands = published("fig12").set_index("system")
    assert tuple(bands.loc["vLLM / Orca (Oracle)", ["low", "high"]]) == (1.7, 2.7)
    assert tuple(bands.loc["vLLM / Orca (Max)", ["low", "high"]]) == (2.7, 8.0)
    stacks = published("fig2").groupby("system")["value"].sum()
    # each Orca stack covers the whole KV memory (100 % up to the paper's rounding)
    for system in ("Orca (Max)", "Orca (Pow2)", "Orca (Oracle)"):
        assert stacks[system] == pytest.approx(100.0, abs=0.15)
    with pytest.raises(ValueError, match="no published numbers"):
        published("fig99")
