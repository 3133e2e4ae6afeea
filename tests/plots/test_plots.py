"""Each plot function on a small hand-made results table."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from kvsim.view.plots import (
    EMPTY_RGB,
    FREE_RGB,
    latency_cdf,
    memory_map,
    memory_over_time,
    metric_vs,
    slot_colors,
    waste_bars,
)


@pytest.fixture
def memory() -> pd.DataFrame:
    # two spans on a 100-slot pool; each row's categories sum to 100
    return pd.DataFrame(
        {
            "time_s": [0.0, 1.0],
            "duration_s": [1.0, 2.0],
            "token_states": [10.0, 40.0],
            "reservation": [20.0, 10.0],
            "internal_fragmentation": [30.0, 0.0],
            "external_fragmentation": [0.0, 25.0],
            "free": [40.0, 25.0],
        }
    )


def test_memory_over_time_stacks_to_capacity(memory) -> None:
    fig = memory_over_time(memory, capacity_slots=100, title="t")
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert len(ax.collections) == 5  # one band per category
    top = ax.collections[-1].get_paths()[0].vertices[:, 1].max()
    assert top == pytest.approx(100.0)
    fig.savefig(__import__("io").BytesIO(), format="png")


def test_memory_over_time_adds_a_row_per_offload_tier(memory) -> None:
    """A CPU tier of 8 blocks and a disk of 20 below it: a row each under the pool's, their
    bands by category as % of the tier. CPU: 2 stored + 1 storing + 1 loading + 4 free, then
    6 stored + 2 free: the stored band is 2/8 = 25 % then 6/8 = 75 %; disk: 5 stored + 3
    writing + 12 free, then 20 stored: 25 % then 100 %."""
    tiers = memory.assign(
        cpu_tier_stored_blocks=[2, 6],
        cpu_tier_storing_blocks=[1, 0],
        cpu_tier_loading_blocks=[1, 0],
        cpu_tier_free_blocks=[4, 2],
        disk_tier_stored_blocks=[5, 20],
        disk_tier_writing_blocks=[3, 0],
        disk_tier_free_blocks=[12, 0],
    )
    assert len(memory_over_time(memory, capacity_slots=100).axes) == 1
    fig = memory_over_time(tiers, capacity_slots=100)
    _pool, cpu, disk = fig.axes
    assert [ax.get_title() for ax in (cpu, disk)] == ["CPU tier", "disk tier"]
    assert len(cpu.collections) == 4
    assert len(disk.collections) == 3
    for ax, stored in ((cpu, [25.0, 75.0]), (disk, [25.0, 100.0])):
        band = ax.collections[0].get_paths()[0].vertices
        # the stored band's top at t = 0 (the first row) and t = 3 (the last span, closed)
        for t, want in zip((0.0, 3.0), stored, strict=True):
            assert band[np.isclose(band[:, 0], t), 1].max() == pytest.approx(want)
        top = ax.collections[-1].get_paths()[0].vertices[:, 1].max()
        assert top == pytest.approx(100.0)
    fig.savefig(__import__("io").BytesIO(), format="png")


def test_waste_bars_heights_are_the_table_values() -> None:
    table = pd.DataFrame(
        {  # the paper's Figure 2 stacks for Max and Oracle
            "token_states_pct_of_used": [20.4, 38.2],
            "reservation_pct_of_used": [13.3, 25.2],
            "internal_fragmentation_pct_of_used": [57.3, 0.0],
            "external_fragmentation_pct_of_used": [8.9, 36.6],
        }
    )
    fig = waste_bars(table, ["Max", "Oracle"])
    ax = fig.axes[0]
    heights = [round(p.get_height(), 1) for p in ax.patches]
    # bars are drawn category by category: token, reservation, internal, external
    assert heights == [20.4, 38.2, 13.3, 25.2, 57.3, 0.0, 8.9, 36.6]
    assert ax.patches[7].get_y() == pytest.approx(20.4 * 0 + 38.2 + 25.2 + 0.0)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["Max", "Oracle"]
    with pytest.raises(ValueError, match="of: must be"):
        waste_bars(table, ["a", "b"], of="nonsense")


def test_waste_bars_of_capacity_list_free_memory_only_where_a_bar_has_some() -> None:
    # Figure 2's four categories fill the whole pool (free 0.0): a "free" swatch in the legend
    # would name nothing drawn; 10 % free in one bar is drawn and named
    full = {"token_states_pct": [20.0, 96.0], "reservation_pct": [10.0, 2.0]}
    full |= {"internal_fragmentation_pct": [60.0, 0.0], "external_fragmentation_pct": [10.0, 2.0]}

    def legend(free: list[float]) -> list[str]:
        fig = waste_bars(pd.DataFrame(full | {"free_pct": free}), ["a", "b"], of="capacity")
        return [t.get_text() for t in fig.legends[0].get_texts()]

    assert "free" not in legend([0.0, 0.0])
    assert "free" not in legend([0.003, 0.0])  # (Figure 2's Pow2 bar: no visible area)
    assert legend([10.0, 0.0])[-1] == "free"


def test_metric_vs_one_line_per_hue() -> None:
    table = pd.DataFrame(
        {
            "cache.block_size_tokens": [16, 1, 256, 16, 1, 256],
            "token_utilization_perc": [99, 100, 80, 97, 100, 60],
            "wl": ["s", "s", "s", "a", "a", "a"],
        }
    )
    fig = metric_vs(
        table, "cache.block_size_tokens", ["token_utilization_perc"], hue="wl", logx=True
    )
    ax = fig.axes[0]
    assert len(ax.lines) == 2
    assert list(ax.lines[0].get_xdata()) == [1, 16, 256]  # sorted by x
    assert list(ax.lines[1].get_ydata()) == [100, 97, 60]
    assert ax.get_xscale() == "log"


def test_memory_map_cells_blend_owner_empty_and_free() -> None:
    # 8 slots, 4 cells of 2 slots: request 0 holds slots 0-3 with 3 tokens written
    snap = pd.DataFrame({"req_id": [0], "start_slot": [0], "num_slots": [4], "num_tokens": [3]})
    owner = np.asarray(__import__("matplotlib").colormaps["tab20"].colors[0])
    rgb = slot_colors(snap, 8)
    assert np.allclose(rgb[:3], owner)
    assert np.allclose(rgb[3], EMPTY_RGB)
    assert np.allclose(rgb[4:], FREE_RGB)
    fig = memory_map({"contiguous": snap, "paged": snap.iloc[:0]}, 8, num_cells=4)
    cells = np.asarray(fig.axes[0].images[0].get_array())
    assert cells.shape == (2, 2, 3)
    assert np.allclose(cells[0, 0], owner)  # slots 0, 1: tokens
    assert np.allclose(cells[0, 1], (owner + np.asarray(EMPTY_RGB)) / 2)  # slot 2 token, 3 empty
    assert np.allclose(cells[1, 1], FREE_RGB)
    assert np.allclose(np.asarray(fig.axes[1].images[0].get_array()), FREE_RGB)
    assert "75% of allocated holds tokens" in fig.axes[0].get_title()  # 3 of 4 slots
    assert to_rgb("#5c0a0a") == EMPTY_RGB


def test_latency_cdf_steps_to_one() -> None:
    requests = pd.DataFrame(
        {
            "label": ["a"] * 4 + ["b"] * 2,
            "time_to_first_token_seconds": [0.4, 0.1, 0.3, 0.2, 1.0, 2.0],
            "request_time_per_output_token_seconds": [0.01, 0.02, np.nan, 0.03, 0.05, 0.04],
        }
    )
    fig = latency_cdf(
        requests, metrics=("time_to_first_token_seconds", "request_time_per_output_token_seconds")
    )
    ttft, tpot = fig.axes
    # Axes.ecdf: a post-step line starting at (min, 0), rising 1/n at each sorted value
    assert ttft.lines[0].get_drawstyle() == "steps-post"
    assert list(ttft.lines[0].get_xdata()) == [0.1, 0.1, 0.2, 0.3, 0.4]
    assert list(ttft.lines[0].get_ydata()) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert list(tpot.lines[0].get_ydata()) == pytest.approx([0, 1 / 3, 2 / 3, 1.0])  # NaN dropped
    assert [line.get_label() for line in ttft.lines] == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "lines"),
    [
        # worked by hand at 32 characters: the metric name breaks after an underscore, the
        # rest at spaces; nothing is cut inside a run of letters
        (
            "request_time_per_output_token_seconds p95 (s)",
            ["request_time_per_output_token_", "seconds p95 (s)"],
        ),
        ("internal fragmentation (% of used KV)", ["internal fragmentation (% of", "used KV)"]),
        ("token states / allocated KV (%)", ["token states / allocated KV (%)"]),
        ("e2e_request_latency_seconds mean (s)", ["e2e_request_latency_seconds mean", "(s)"]),
    ],
)
def test_axis_labels_wrap_at_spaces_and_after_underscores(text: str, lines: list[str]) -> None:
    from kvsim.view.labels import wrap_label

    assert wrap_label(text, 32).split("\n") == lines


def test_metric_vs_draws_a_share_and_a_latency_from_zero() -> None:
    """Hit rates of 0.06580 and 0.06601 (a 0.3 % relative change) on an axis from 0, not one
    that spans only their difference; a latency on a linear axis too (a new user's trial read
    TTFT means of 2.956 and 2.922 s, 1 % apart, drawn as a steep fall)."""
    table = pd.DataFrame(
        {
            "offload.disk_offloading_size": [256, 1024],
            "prefix_cache_hit_rate": [0.06580, 0.06601],
            "time_to_first_token_seconds_mean": [2.956, 2.922],
        }
    )
    fig = metric_vs(
        table,
        "offload.disk_offloading_size",
        ["prefix_cache_hit_rate", "time_to_first_token_seconds_mean"],
    )
    rate, ttft = fig.axes[:2]
    assert rate.get_ylim()[0] == 0.0
    assert rate.get_ylim()[1] < 0.1  # its top the data's (0.066 and a margin), not a share's 1
    assert ttft.get_ylim()[0] == 0.0
    assert 2.956 < ttft.get_ylim()[1] < 3.5  # (the data's top and a margin)


def test_every_numeric_summary_metric_has_a_unit_on_its_axis(tmp_path) -> None:
    """docs/commands.md: figures carry units on every axis. A metric's label names its unit in
    a parenthesis (or in words: USD), whatever metric ``kvsim plot`` draws against a knob;
    a metric added without one fails here."""
    from kvsim.config import config_from_dict
    from kvsim.engine import simulate
    from kvsim.view.labels import axis_label

    config = config_from_dict({"workload": {"num_requests": 8, "lengths": "fixed"}})
    summary = simulate(config).summary
    numeric = [
        k for k, v in summary.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]
    missing = [k for k in numeric if "(" not in axis_label(k) and "USD" not in axis_label(k)]
    assert numeric
    assert missing == []
    # the fields a shipped experiment sweeps that the new-user trial found bare
    assert axis_label("workload.fixed_prompt_tokens") == "fixed_prompt_tokens (tokens)"
    assert axis_label("spec_decode_mean_acceptance_length").endswith("(tokens a verification)")
