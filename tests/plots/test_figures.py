"""`kvsim plot` / draw_figures on a small finished sweep with snapshots."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from kvsim.cli_sweep import register
from kvsim.experiment import parse_experiment
from kvsim.figures import draw_figures
from kvsim.sweep import run_sweep


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
        "memory_000.png",
        "memory_001.png",
        "memory_002.png",
        "memory_003.png",
        "memory_map.png",
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
    assert "no summary.parquet" in missing.output
