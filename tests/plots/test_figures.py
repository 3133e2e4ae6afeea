"""`kvsim plot` / draw_figures on a small finished sweep with snapshots."""

from __future__ import annotations

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from kvsim.cli.sweep import register
from kvsim.study.experiment import parse_experiment
from kvsim.study.figures import draw_figures
from kvsim.study.sweep import run_sweep
from tests.plots.small_sweeps import FOUR_SHORT_REQUESTS, small_sweep


def test_draw_figures_and_cli(tmp_path) -> None:
    exp = parse_experiment(
        {
            "base": {
                "cache": {"kv_cache_gib": 2.0},
                "workload": {
                    "lengths": "fixed",
                    "fixed_prompt_tokens": 64,
                    "fixed_output_tokens": 32,
                    "num_requests": 10,
                    "rate_per_s": 5.0,
                },
            },
            "grid": {"workload.rate_per_s": [5.0, 10.0]},
            "zip": {"label": ["contiguous", "paged"], "cache.allocator": ["first_fit", "paged"]},
            "snapshot_at_s": 1.0,
        },
        name="figs",
    )
    run_sweep(exp, tmp_path, progress=False)
    written = draw_figures(tmp_path / "figs")
    names = sorted(p.name for p in written)
    assert names == [
        "latency_cdf.png",
        "memory_contiguous_rate_per_s-10.png",
        "memory_contiguous_rate_per_s-5.png",
        "memory_map.png",
        "memory_paged_rate_per_s-10.png",
        "memory_paged_rate_per_s-5.png",
        "vs_rate_per_s.png",
        "waste_bars.png",
    ]
    assert all(p.stat().st_size > 1000 for p in written)

    app = typer.Typer()
    register(app)
    result = CliRunner().invoke(app, ["plot", str(tmp_path / "figs"), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert len(list((tmp_path / "o" / "figs").glob("*.png"))) == 8
    missing = CliRunner().invoke(app, ["plot", str(tmp_path / "nothing")])
    assert missing.exit_code == 2
    assert f"{tmp_path / 'nothing'}: no such folder" in missing.output


def test_figures_an_earlier_drawing_left_are_named(tmp_path, caplog) -> None:
    # a PNG of a point the sweep no longer has stays in figures/ beside the new ones: said
    folder = small_sweep(tmp_path, {"seed": [1, 2]})
    first = {p.name for p in draw_figures(folder)}
    (folder / "figures" / "memory_an_earlier_point.png").write_bytes(b"png")
    with caplog.at_level("WARNING"):
        again = {p.name for p in draw_figures(folder)}
    assert again == first
    assert "1 PNG(s) this plot did not draw are left from earlier" in caplog.text
    assert "memory_an_earlier_point.png" in caplog.text


def test_every_point_is_drawn_and_bars_split_into_panels_past_eight(tmp_path) -> None:
    # 5 rates x 2 allocators = 10 points: more than 8 bars, so one panel per rate
    rates = [1.0, 2.0, 4.0, 8.0, 16.0]
    folder = small_sweep(
        tmp_path,
        {"workload.rate_per_s": rates},
        {"label": ["contiguous", "paged"], "cache.allocator": ["first_fit", "paged"]},
    )
    written = draw_figures(folder)
    assert len([p for p in written if p.name.startswith("memory_")]) == 10
    from kvsim.study.load import load_sweep
    from kvsim.view.plots import waste_bars

    sweep = load_sweep(folder)
    fig = waste_bars(sweep.summary, sweep.labels(), facet="workload.rate_per_s")
    assert len(fig.axes) == 5
    assert [ax.get_title() for ax in fig.axes] == [f"rate_per_s = {r:g}" for r in rates]
    assert all(len(ax.get_xticklabels()) == 2 for ax in fig.axes)
    # without a facet column, runs of eight
    fig = waste_bars(sweep.summary, sweep.labels())
    assert [len(ax.get_xticklabels()) for ax in fig.axes] == [8, 2]


def test_no_chart_against_a_field_zipped_with_the_label(tmp_path) -> None:
    # the rate is a property of each labelled point, not a swept axis
    folder = small_sweep(
        tmp_path,
        {},
        {"label": ["slow", "fast"], "workload.rate_per_s": [1.0, 30.0]},
    )
    names = {p.name for p in draw_figures(folder)}
    assert not any(n.startswith("vs_") for n in names)
    assert "memory_slow.png" in names


def test_log_axes_where_values_span_decades() -> None:
    import pandas as pd

    from kvsim.view.plots import metric_vs

    table = pd.DataFrame(
        {
            "cache.kv_cache_gib": [1.0, 2.0, 4.0, 8.0, 16.0],
            "time_to_first_token_seconds_p99": [800.0, 90.0, 3.0, 0.4, 0.3],
            "token_utilization_perc": [97.0, 96.0, 96.0, 95.0, 95.0],
        }
    )
    fig = metric_vs(
        table,
        "cache.kv_cache_gib",
        ["time_to_first_token_seconds_p99", "token_utilization_perc"],
        targets={"time_to_first_token_seconds_p99": 2.0},
    )
    latency, util = fig.axes[:2]
    assert latency.get_xscale() == "log"  # 1..16 GiB spans 16x
    assert latency.get_yscale() == "log"  # 0.3..800 s
    assert util.get_yscale() == "linear"
    assert latency.get_xlabel() == "KV cache (GiB)"
    # wrapped at words to fit its panel: the same words, unit included
    assert latency.get_ylabel().split() == ["time_to_first_token_seconds", "p99", "(s)"]
    dashed = [line for line in latency.lines if line.get_linestyle() == "--"]
    assert [tuple(line.get_ydata()) for line in dashed] == [(2.0, 2.0)]


def test_gridlines_are_drawn_below_the_data():
    # a fresh-eyes trial saw Figure 2's gridlines through the bars
    from matplotlib.figure import Figure

    from kvsim.view.style import styled

    @styled
    def axes_under_style():
        return Figure().subplots()

    assert axes_under_style().get_axisbelow() is True


def test_offload_tier_legend_swatches_stand_out() -> None:
    # the tier panel's legend sat frameless on the blue "stored" area, so the blue "stored"
    # swatch vanished into it: a white frame now covers the area, and every swatch is outlined
    # (the "free" swatch is near-white)
    import pandas as pd
    from matplotlib.colors import to_rgba

    from kvsim.view.offload_plots import BANDWIDTH, SIZE, offload_figure

    summary = pd.DataFrame(
        {
            SIZE: [0.0, 16.0],
            BANDWIDTH: [51.2e9, 51.2e9],
            "time_to_first_token_seconds_mean": [0.3, 0.2],
            "time_to_first_token_seconds_p90": [0.9, 0.5],
            "external_prefix_cache_hit_rate": [float("nan"), 0.6],
            "prefix_cache_hit_rate": [0.2, 0.2],
        }
    )
    tier = pd.DataFrame(  # 10 blocks: 8 stored, 1 storing, 1 free from t = 1 s
        {
            "time_s": [0.0, 1.0],
            "cpu_tier_stored_blocks": [0, 8],
            "cpu_tier_storing_blocks": [0, 1],
            "cpu_tier_loading_blocks": [0, 0],
            "cpu_tier_free_blocks": [10, 1],
        }
    )
    fig = offload_figure(summary, tier, tier_title="CPU tier")
    legend = fig.axes[2].get_legend()
    assert legend.get_frame_on()
    assert legend.get_frame().get_facecolor() == to_rgba("white")
    assert [t.get_text() for t in legend.get_texts()] == [
        "stored",
        "storing (GPU->CPU copy)",
        "loading (read by a copy to the GPU or disk)",
        "free",
    ]
    for handle in legend.legend_handles:
        assert handle.get_edgecolor() != handle.get_facecolor()
        assert handle.get_linewidth() > 0


def test_tier_legends_name_every_memory_column_of_their_tier() -> None:
    # the figures sum a tier's legend keys as its memory columns (every block in one)
    from kvsim.results.offload import DISK_COLUMNS, TIER_COLUMNS
    from kvsim.view.offload_plots import DISK_NAMES, TIER_NAMES

    assert tuple(TIER_NAMES) == TIER_COLUMNS
    assert tuple(DISK_NAMES) == DISK_COLUMNS


def _disk_sweep(tmp_path, sizes=(0, 4, 16, 64), drives=(3.2e9, 6.4e9, 12.8e9), name="disk"):
    """make offload-disk's sweep in small: disk sizes (GiB, 0: none) crossed with a drive's read
    and write bandwidths zipped (bytes/s), points of four requests (12 by default)."""
    exp = parse_experiment(
        {
            "base": {
                "cache": {"kv_cache_gib": 2.0, "enable_prefix_caching": True},
                "offload": {"kv_offloading_size": 1},
                "workload": FOUR_SHORT_REQUESTS,
            },
            "grid": {"offload.disk_offloading_size": list(sizes)},
            "zip": {
                "offload.disk_read_bandwidth_bytes_per_s": list(drives),
                "offload.disk_write_bandwidth_bytes_per_s": list(drives),
            },
        },
        name=name,
    )
    run_sweep(exp, tmp_path, progress=False)
    return tmp_path / name


def test_long_sweep_labels_fit_their_figures(tmp_path) -> None:
    # a new user's trial of make offload-disk: points labelled by three long field names with
    # raw bytes/s ("disk_read_bandwidth_bytes_per_s=6400000000.0, ...") squeezed the bars'
    # panels (constrained_layout gave up, with a warning) and ran each CDF row's legend across
    # the next panel
    import warnings

    from kvsim.study.load import load_sweep

    folder = _disk_sweep(tmp_path)
    assert load_sweep(folder).labels()[:2] == [
        "disk_offloading_size=0 GiB, disk_read/write_bandwidth=3.2 GB/s",
        "disk_offloading_size=0 GiB, disk_read/write_bandwidth=6.4 GB/s",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a layout warning fails the test
        written = draw_figures(folder)
    assert {"latency_cdf.png", "waste_bars.png", "vs_disk_offloading_size.png"} <= {
        p.name for p in written
    }


def test_latency_cdf_legend_sits_below_its_panels() -> None:
    # one legend for the figure, under the panels, each label once with one colour in every
    # row; a row names its facet value, so the labels leave it out
    import pandas as pd
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from kvsim.view.plots import latency_cdf

    drives = ["disk_read/write_bandwidth=3.2 GB/s", "disk_read/write_bandwidth=6.4 GB/s"]
    rows = [
        {"label": d, "size": size, "time_to_first_token_seconds": 0.1 * (i + 1) * (j + 1)}
        for size in range(5)
        for i, d in enumerate(drives)
        for j in range(3)
    ]
    fig = latency_cdf(
        pd.DataFrame(rows), metrics=("time_to_first_token_seconds",), facet="size", title="t"
    )
    canvas = FigureCanvasAgg(fig)
    canvas.draw()  # (lays the figure out)
    assert len(fig.axes) == 5  # 10 runs: one row per size
    assert all(ax.get_legend() is None for ax in fig.axes)
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == drives
    renderer = canvas.get_renderer()
    top = legend.get_window_extent(renderer).y1
    assert top <= min(ax.get_tightbbox(renderer).y0 for ax in fig.axes) + 1
    for ax in fig.axes:  # the same colour for a drive in every row
        assert [line.get_color() for line in ax.lines] == [
            h.get_color() for h in legend.legend_handles
        ]


def test_a_swept_zero_stays_on_a_log_axis() -> None:
    # vs_disk_offloading_size.png lost its size-0 point (no disk) to the log axis: the axis is
    # a symmetric log now, linear from 0 to the smallest size, every size a tick
    import io

    import pandas as pd

    from kvsim.view.plots import metric_vs

    table = pd.DataFrame(
        {
            "offload.disk_offloading_size": [0, 4, 16, 64],
            "time_to_first_token_seconds_mean": [0.40, 0.40, 0.27, 0.27],
        }
    )
    fig = metric_vs(table, "offload.disk_offloading_size", ["time_to_first_token_seconds_mean"])
    fig.savefig(io.BytesIO(), format="png")
    (ax,) = fig.axes
    assert ax.get_xscale() == "symlog"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0", "4", "16", "64"]
    low, high = ax.get_xlim()
    assert low < 0 < 64 < high  # the 0 point inside the axes
    # evenly spaced: 0 one step (4x) before 4, as 4 is before 16
    x = ax.transData.transform([(v, 0) for v in (0, 4, 16, 64)])[:, 0]
    assert np.diff(x) == pytest.approx([x[2] - x[1]] * 3, rel=1e-6)
    # no 0 among the values: a log axis as before
    fig = metric_vs(
        table.iloc[1:], "offload.disk_offloading_size", ["time_to_first_token_seconds_mean"]
    )
    assert fig.axes[0].get_xscale() == "log"


def test_bandwidths_read_in_gb_per_s_in_figures() -> None:
    # raw bytes/s (6400000000.0) in legends and axes: decimal GB/s, as drive datasheets give
    import pandas as pd

    from kvsim.view.plots import metric_vs

    table = pd.DataFrame(
        {
            "offload.link_bandwidth_bytes_per_s": [16e9, 32e9, 64e9, 128e9],
            "time_to_first_token_seconds_mean": [0.4, 0.3, 0.25, 0.2],
        }
    )
    fig = metric_vs(
        table, "offload.link_bandwidth_bytes_per_s", ["time_to_first_token_seconds_mean"]
    )
    (ax,) = fig.axes
    assert ax.get_xlabel() == "link bandwidth, one direction (GB/s)"
    assert list(ax.lines[0].get_xdata()) == [16.0, 32.0, 64.0, 128.0]


def test_long_bar_labels_stand_one_field_a_line() -> None:
    # slanted in one line, six points' labels of two fields ran into each other and off the
    # figure's left edge: one field a line, level under a bar widened to hold it
    import itertools
    import warnings

    import pandas as pd
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from kvsim.view.plots import waste_bars

    labels = [
        f"disk_offloading_size={size}, disk_read/write_bandwidth={bw} GB/s"
        for size in (0, 16)
        for bw in (3.2, 6.4, 12.8)
    ]
    table = pd.DataFrame({f"{c}_pct_of_used": [25.0] * 6 for c in ("token_states", "free")})
    for c in ("reservation", "internal_fragmentation", "external_fragmentation"):
        table[f"{c}_pct_of_used"] = 25.0
    fig = waste_bars(table, labels)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a layout warning fails the test
        FigureCanvasAgg(fig).draw()
    ticks = fig.axes[0].get_xticklabels()
    assert ticks[0].get_text() == "disk_offloading_size=0\ndisk_read/write_bandwidth=3.2 GB/s"
    assert all(t.get_rotation() == 0 for t in ticks)
    boxes = [t.get_window_extent() for t in ticks]
    assert all(a.x1 <= b.x0 for a, b in itertools.pairwise(boxes))  # none overlap
    # a short label stays in one slanted line
    fig = waste_bars(table.iloc[:2], ["first_fit", "paged"])
    assert [t.get_rotation() for t in fig.axes[0].get_xticklabels()] == [25, 25]


def test_memory_figures_name_a_zipped_drive_and_draw_a_repeated_config_once(tmp_path) -> None:
    """Disk 0 and 2 GiB x two drives zipped (read = write): the drive is no axis (its two
    fields move together), so the names add it where the disk size alone repeats; the no-disk
    point is one config for both drives (its bandwidths change nothing) and one figure."""
    folder = _disk_sweep(tmp_path, sizes=(0, 2), drives=(3.2e9, 6.4e9), name="drives")
    names = sorted(p.name for p in draw_figures(folder) if "memory_" in p.name)
    assert names == [
        "memory_disk_offloading_size-0_disk_read-write_bandwidth-3.2.png",
        "memory_disk_offloading_size-2_disk_read-write_bandwidth-3.2.png",
        "memory_disk_offloading_size-2_disk_read-write_bandwidth-6.4.png",
    ]


def test_offload_figure_lines_take_kvsims_colours_and_one_legend() -> None:
    """Two links: the second's lines are kvsim's second colour (red, #d62728, per
    kvsim.mplstyle), not matplotlib's default orange, once the figure is drawn outside the
    style; the TTFT panel's one legend names the links and the two line styles."""
    import pandas as pd
    from matplotlib.colors import to_rgb

    from kvsim.view.offload_plots import BANDWIDTH, SIZE, offload_figure

    summary = pd.DataFrame(
        {
            SIZE: [0.0, 16.0, 0.0, 16.0],
            BANDWIDTH: [25.6e9, 25.6e9, 51.2e9, 51.2e9],
            "time_to_first_token_seconds_mean": [0.3, 0.2, 0.3, 0.15],
            "time_to_first_token_seconds_p90": [0.9, 0.5, 0.9, 0.4],
            "external_prefix_cache_hit_rate": [float("nan"), 0.6, float("nan"), 0.6],
            "prefix_cache_hit_rate": [0.2, 0.2, 0.2, 0.2],
        }
    )
    fig = offload_figure(summary, None)
    fig.savefig(__import__("io").BytesIO(), format="png")  # (outside the style's context)
    ttft = fig.axes[0]
    second = [line for line in ttft.get_lines() if line.get_label() == "51.2 GB/s"]
    assert len(second) == 1
    assert to_rgb(second[0].get_color()) == to_rgb("#d62728")
    legends = [c for c in ttft.get_children() if isinstance(c, type(ttft.get_legend()))]
    assert len(legends) == 1
    assert [t.get_text() for t in ttft.get_legend().get_texts()] == [
        "25.6 GB/s",
        "51.2 GB/s",
        "mean",
        "p90",
    ]


def test_an_undefined_tier_hit_rate_is_no_point_on_the_offload_figure() -> None:
    """With the tier off nothing is looked up in it: its hit rate is NaN (0 / 0), drawn as no
    point, not as 0 %; the 16 GiB point's 60 % is drawn."""
    import pandas as pd

    from kvsim.view.offload_plots import BANDWIDTH, SIZE, offload_figure

    summary = pd.DataFrame(
        {
            SIZE: [0.0, 16.0],
            BANDWIDTH: [25.6e9, 25.6e9],
            "time_to_first_token_seconds_mean": [0.3, 0.2],
            "time_to_first_token_seconds_p90": [0.9, 0.5],
            "external_prefix_cache_hit_rate": [float("nan"), 0.6],
            "prefix_cache_hit_rate": [0.2, 0.2],
        }
    )
    hits = offload_figure(summary, None).axes[1].get_lines()[0]
    ys = np.asarray(hits.get_ydata(), dtype=float)
    assert np.isnan(ys[0])
    assert ys[1] == pytest.approx(60.0)


def test_a_fleet_points_memory_figure_shows_a_replica_that_decodes():
    # P/D 1:2: replica 0 prefills (it holds each prompt only while computing it), 1 and 2
    # decode: the figure shows replica 1; co-located, replica 0; no replica table, replica 0.
    import pandas as pd

    from kvsim.study.figures import _decoding_replica

    pd_fleet = pd.DataFrame({"replica": [0, 1, 2], "role": ["prefill", "decode", "decode"]})
    assert _decoding_replica(pd_fleet) == 1
    assert _decoding_replica(pd.DataFrame({"replica": [0, 1], "role": ["both", "both"]})) == 0
    assert _decoding_replica(None) == 0


def test_a_sweep_without_memory_rows_draws_its_other_figures(tmp_path, caplog) -> None:
    """record_memory = false (fig18b, prefix-length): no share column, no memory rows. kvsim
    plot refused the folder kvsim sweep had just written ("lacks columns ..."); now the waste
    bars and memory figures are left out, said once, and the others drawn. The mean running
    requests come from the memory rows: asked for, they are said missing because of it."""
    import logging

    exp = parse_experiment(
        {
            "base": {
                "record_memory": False,
                "cache": {"kv_cache_gib": 2.0},
                "workload": FOUR_SHORT_REQUESTS,
            },
            "grid": {"cache.block_size_tokens": [8, 16]},
            "analysis": {
                "vs_metrics": [
                    "time_to_first_token_seconds_mean",
                    "num_requests_running_mean",
                    "kv_offload_loads",  # (no CPU tier: missing, but not for want of memory)
                ]
            },
        },
        name="nomem",
    )
    run_sweep(exp, tmp_path, progress=False)
    with caplog.at_level(logging.INFO, logger="kvsim.study.figures"):
        written = draw_figures(tmp_path / "nomem")
    assert sorted(p.name for p in written) == ["latency_cdf.png", "vs_block_size_tokens.png"]
    assert "no KV memory recorded (record_memory = false)" in caplog.text
    # a metric of the memory rows asked for is said missing, and why
    assert (
        "no ['num_requests_running_mean'] in summary.parquet (record_memory = false), not drawn"
        in caplog.text
    )
    assert "no ['kv_offload_loads'] in summary.parquet, not drawn" in caplog.text
