"""The ``kvsim`` command line: ``run`` a config, reproduce ``fig2``, list ``presets``.

Bad input (a wrong config value, a malformed trace line, a missing data folder) prints one clear
message naming the field, the value and what was expected, and exits with status 2, without a
traceback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from tqdm import tqdm

from kvsim.config import config_from_dict, load_config, preset_table
from kvsim.engine import simulate
from kvsim.workload import DataNotFoundError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="kvsim: simulate KV-cache allocation policies for LLM serving.",
)
console = Console()
err_console = Console(stderr=True)
T = TypeVar("T")

SUMMARY_ROWS = (
    ("token_states_pct", "token states (% of KV)"),
    ("reservation_pct", "reservation (% of KV)"),
    ("internal_fragmentation_pct", "internal fragmentation (% of KV)"),
    ("external_fragmentation_pct", "external fragmentation (% of KV)"),
    ("free_pct", "free (% of KV)"),
    ("kv_usage_perc", "kv_cache_usage_perc (allocated %)"),
    ("token_utilization_perc", "token states / allocated (%)"),
    ("mean_running", "mean running requests"),
    ("max_running", "max running requests"),
    ("num_blocked_steps", "blocked steps (head fits in total free, no hole)"),
    ("num_preemptions", "num_preemptions"),
    ("throughput_requests_per_s", "throughput (requests/s)"),
    ("throughput_output_tokens_per_s", "throughput (output tokens/s)"),
    ("p50_ttft_s", "TTFT p50 (s)"),
    ("p99_ttft_s", "TTFT p99 (s)"),
    ("p50_tpot_s", "TPOT p50 (s)"),
    ("p99_tpot_s", "TPOT p99 (s)"),
    ("p50_e2e_s", "E2E p50 (s)"),
    ("p99_e2e_s", "E2E p99 (s)"),
    ("mean_normalized_latency_s", "normalized latency mean (s/token)"),
)


def _guard(fn: Callable[[], T]) -> T:
    """Run ``fn``; turn user errors into one red message and exit status 2."""
    try:
        return fn()
    except (ValueError, OSError, DataNotFoundError) as err:
        err_console.print(f"[bold red]error:[/] {err}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def check_out_dir(out: Path | None) -> None:
    """Fail before simulating when ``out`` cannot be a results folder."""
    if out is not None and out.exists() and not out.is_dir():
        raise ValueError(f"--out: expected a folder, got the existing file {str(out)!r}")


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["cache.block_size_tokens=32"]`` -> ``{"cache.block_size_tokens": 32}`` (JSON values)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise ValueError(
                f"--set: expected KEY=VALUE (e.g. cache.block_size_tokens=32), got {pair!r}"
            )
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def summary_table(summary: dict[str, Any], title: str) -> Table:
    """A two-column rich table of the headline metrics."""
    table = Table(title=title, show_header=False)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for key, label in SUMMARY_ROWS:
        value = summary.get(key)
        if value is None:
            continue
        table.add_row(label, f"{value:,.3f}" if isinstance(value, float) else f"{value:,}")
    return table


@app.command()
def run(
    config: Annotated[
        Path | None, typer.Argument(help="SimConfig TOML (default: built-in).")
    ] = None,
    set_: Annotated[
        list[str] | None, typer.Option("--set", help="Override, e.g. cache.block_size_tokens=32")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Results folder (parquet + summary.json).")
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar.")] = True,
) -> None:
    """Simulate one config and print where the KV memory went."""

    def go() -> None:
        check_out_dir(out)
        overrides = parse_overrides(set_ or [])
        cfg = load_config(config, overrides) if config else config_from_dict({}, overrides)
        import numpy as np

        from kvsim.workload import generate_requests

        requests = generate_requests(
            cfg.workload, np.random.default_rng(cfg.seed), max_model_len=cfg.scheduler.max_model_len
        )
        with tqdm(
            total=len(requests),
            unit="req",
            disable=not progress or len(requests) < 2000,
            desc="simulating",
        ) as bar:
            results = simulate(cfg, requests, on_finish=bar.update)
        title = (
            f"{cfg.model.name} on {cfg.gpu.name}, {cfg.cache.allocator}"
            f"{'' if cfg.cache.allocator == 'paged' else '/' + cfg.cache.reservation}, "
            f"{cfg.capacity_tokens:,} KV slots, {len(requests):,} requests"
        )
        console.print(summary_table(results.summary, title))
        if out is not None:
            results.save(out)
            console.print(f"results written to {out}/")

    _guard(go)


@app.command()
def fig2(
    out: Annotated[Path, typer.Option(help="Output folder.")] = Path("results/fig2"),
    num_requests: Annotated[
        int, typer.Option(min=100, help="Requests per system and seed.")
    ] = 5000,
    seeds: Annotated[int, typer.Option(min=1, help="Independent workloads averaged.")] = 4,
    seed: Annotated[int, typer.Option(help="First workload seed.")] = 0,
    rate: Annotated[float, typer.Option(min=0.01, help="Poisson rate, requests/s.")] = 5.0,
) -> None:
    """Reproduce the PagedAttention paper's Figure 2 (Orca Max/Pow2/Oracle vs vLLM)."""
    from kvsim.repro.fig2 import STACK, run_fig2, workload_source, write_fig2

    def go() -> None:
        check_out_dir(out)
        console.print(
            f"Figure 2 setup: OPT-13B, A100-40GB, 12 GiB KV; {workload_source()}; "
            f"Poisson {rate} req/s; {seeds} seeds x {num_requests:,} requests per system."
        )
        df = run_fig2(
            num_requests,
            rate,
            range(seed, seed + seeds),
            on_system=lambda s: console.print(f"  running {s} ..."),
        )
        table = Table(
            title="Share of KV memory (%), time-weighted over the saturated window, "
            f"mean of {seeds} seeds: kvsim (paper)"
        )
        table.add_column("system", no_wrap=True)
        for header in ("token", "reserved", "internal", "external", "free"):
            table.add_column(header, justify="right")
        table.add_column("running", justify="right")
        for _, row in df.iterrows():
            cells = []
            for c in STACK:
                paper = row[f"paper_{c}_pct"]
                shown = "" if paper is None or paper != paper else f" ({paper:.1f})"
                cells.append(f"{row[f'{c}_pct']:.1f}{shown}")
            cells.append(f"{row['free_pct']:.1f}")
            table.add_row(row["system"], *cells, f"{row['mean_running']:.1f}")
        console.print(table)
        csv_path, png_path = write_fig2(df, out)
        console.print(f"wrote {csv_path} and {png_path}")

    _guard(go)


@app.command()
def presets() -> None:
    """List the model and GPU presets with their key figures."""
    table = Table(title="models")
    for col in ("name", "layers", "kv heads", "head dim", "KiB/token", "params (B)"):
        table.add_column(col)
    for name, m in preset_table("models").items():
        kib = (
            2 * m["num_layers"] * m["num_kv_heads"] * m["head_dim"] * m.get("dtype_bytes", 2) / 1024
        )
        table.add_row(
            name,
            str(m["num_layers"]),
            str(m["num_kv_heads"]),
            str(m["head_dim"]),
            f"{kib:g}",
            f"{m['num_params'] / 1e9:.1f}",
        )
    console.print(table)
    gpus = Table(title="GPUs")
    for col in ("name", "memory (GiB)", "HBM (TB/s)", "FP16 (TFLOP/s)"):
        gpus.add_column(col)
    for name, g in preset_table("gpus").items():
        gpus.add_row(
            name,
            f"{g['memory_bytes'] / 2**30:.1f}",
            f"{g['hbm_bandwidth_bytes_per_s'] / 1e12:.2f}",
            f"{g['fp16_flops_per_s'] / 1e12:.0f}",
        )
    console.print(gpus)


def _register_plugins() -> None:
    """Commands defined beside their subsystems: calibration and the paper reproductions."""
    from kvsim import cli_calibrate, cli_sharing, cli_sweep
    from kvsim.repro import __main__ as repro_cli

    cli_calibrate.register(app)
    cli_sharing.register(app)
    cli_sweep.register(app)
    repro_cli.register(app)


_register_plugins()


def main() -> None:
    """Console-script entry point."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    app()


if __name__ == "__main__":
    main()
