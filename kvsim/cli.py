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

from kvsim.config import SimConfig, config_from_dict, load_config, preset_table
from kvsim.engine import simulate
from kvsim.intake import requests_for
from kvsim.request import Request
from kvsim.summary_view import compare_table, summary_table
from kvsim.workload import DataNotFoundError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="kvsim: simulate KV-cache allocation policies for LLM serving.",
)
console = Console()
err_console = Console(stderr=True)
T = TypeVar("T")


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
    strict: Annotated[
        bool,
        typer.Option(
            help="Fail on requests that cannot run instead of skipping and counting them."
        ),
    ] = False,
    map_frames: Annotated[
        int,
        typer.Option(
            min=0,
            help="Memory-map frames captured over the arrivals, written with --out (0: none).",
        ),
    ] = 200,
) -> None:
    """Simulate one config and print where the KV memory went."""

    def go() -> None:
        check_out_dir(out)
        overrides = parse_overrides(set_ or [])
        cfg = load_config(config, overrides) if config else config_from_dict({}, overrides)
        requests = requests_for(cfg)
        with tqdm(
            total=len(requests),
            unit="req",
            disable=None if progress and len(requests) >= 2000 else True,  # None: tty only
            desc="simulating",
        ) as bar:

            def start(num_runnable: int) -> None:
                bar.total = num_runnable  # some may be skipped (counted in the summary)
                bar.refresh()

            every = map_interval_s(requests, map_frames) if out is not None else None
            if every is not None and cfg.cache.allocator == "radix":
                every = None  # a radix tree has no physical map
            results = simulate(
                cfg,
                requests,
                on_finish=bar.update,
                strict=strict,
                on_start=start,
                map_every_s=every,
            )
        console.print(summary_table(results.summary, run_title(cfg, len(requests))))
        if out is not None:
            results.save(out)
            console.print(f"results written to {out}/")

    _guard(go)


def map_interval_s(requests: list[Request], num_frames: int) -> float | None:
    """Seconds between memory-map frames so that ``num_frames`` cover the arrivals (``None``
    for no frames)."""
    if num_frames <= 0 or not requests:
        return None
    last = max(r.arrival_time_s for r in requests)
    return max(last, 1.0) / num_frames


def run_title(cfg: SimConfig, num_requests: int) -> str:
    """The summary's header: engine profile and preemption mode, model, GPUs, allocator, pool
    (slots and blocks), requests."""
    args = cfg.engine_args
    par = cfg.parallel
    gpus = f" x{par.world_size} (TP {par.tensor_parallel_size}, PP {par.pipeline_parallel_size})"
    policy = cfg.cache.allocator
    pool = f"{cfg.capacity_tokens:,} KV slots"
    if cfg.cache.allocator in ("paged",):
        policy += f" {cfg.cache.block_size_tokens}-token blocks"
        policy += ", prefix caching" if args.enable_prefix_caching else ""
        pool += f" = {cfg.capacity_tokens // cfg.cache.block_size_tokens:,} blocks"
    elif cfg.cache.allocator != "radix":
        policy += "/" + cfg.cache.reservation
    preemption = args.preemption_mode or "recompute" + (
        " (swap for multi-sequence groups)" if args.engine == "vllm-v0" else ""
    )
    return (
        f"{args.engine} (preemption: {preemption}): {cfg.model.name} on {cfg.gpu.name}"
        f"{gpus if par.world_size > 1 else ''}, {policy}, {pool} "
        f"({cfg.kv_cache_bytes / 2**30:,.2f} GiB per GPU), {num_requests:,} requests"
    )


@app.command()
def compare(
    run_a: Annotated[Path, typer.Argument(help="A results folder (kvsim run --out A).")],
    run_b: Annotated[Path, typer.Argument(help="Another results folder.")],
) -> None:
    """Print two runs' summaries side by side with their differences (B - A)."""

    def go() -> None:
        summaries = []
        for folder in (run_a, run_b):
            path = folder / "summary.json" if folder.is_dir() else folder
            if not path.is_file():
                raise ValueError(
                    f"{folder}: no summary.json (a folder written by `kvsim run --out`, or a "
                    "sweep point under results/NAME/points/)"
                )
            try:
                summaries.append(json.loads(path.read_text(encoding="utf-8")))
            except (json.JSONDecodeError, UnicodeDecodeError) as err:
                raise ValueError(f"{path}: not a kvsim summary ({err})") from None
        console.print(compare_table(summaries[0], summaries[1], str(run_a), str(run_b)))

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
    from kvsim import cli_calibrate, cli_plan, cli_report, cli_reproduce, cli_sweep
    from kvsim.cli_data import register as register_data

    cli_calibrate.register(app)
    cli_report.register(app)
    cli_sweep.register(app)
    cli_plan.register(app)
    cli_reproduce.register(app)
    register_data(app)


_register_plugins()


def main() -> None:
    """Console-script entry point."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    app()


if __name__ == "__main__":
    main()
