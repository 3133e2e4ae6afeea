"""``kvsim run``: simulate one config and print where the KV memory went."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kvsim.cli.common import (
    SET_EXAMPLE,
    check_out_dir,
    console,
    guard,
    not_an_override,
    parse_overrides,
)


def run(
    config: Annotated[
        Path | None,
        typer.Argument(help="SimConfig TOML (default: built-in).", callback=not_an_override),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", metavar="KEY=VALUE", help=f"Override, e.g. {SET_EXAMPLE}"),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Results folder (parquet + summary.json).")
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show a progress bar (on a terminal).")] = True,
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
            help="Memory-map frames over the arrivals, written with --out (0: none); a run "
            "that goes on after them keeps at most twice as many over its whole length.",
        ),
    ] = 200,
) -> None:
    """Simulate one config and print where the KV memory went."""

    def go() -> None:
        from tqdm import tqdm

        from kvsim.config import config_from_dict, load_config
        from kvsim.engine import simulate
        from kvsim.intake import requests_for
        from kvsim.summary_view import summary_table

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

            every = map_interval_s([r.arrival_time_s for r in requests], map_frames)
            if out is None or cfg.cache.allocator == "radix":
                every = None  # frames are only written with --out; a radix tree has no map
            results = simulate(
                cfg,
                requests,
                on_finish=bar.update,
                strict=strict,
                on_start=start,
                map_every_s=every,
                map_max_frames=2 * map_frames if every is not None else None,
            )
        console.print(summary_table(results.summary, run_title(cfg, len(requests))))
        if out is not None:
            results.save(out)
            console.print(f"results written to {out}/")

    guard(go)


def map_interval_s(arrival_times_s: list[float], num_frames: int) -> float | None:
    """Seconds between memory-map frames so that ``num_frames`` cover the arrivals (``None``
    for no frames)."""
    if num_frames <= 0 or not arrival_times_s:
        return None
    return max(max(arrival_times_s), 1.0) / num_frames


def run_title(cfg: object, num_requests: int) -> str:
    """The summary's header: engine profile and preemption mode, model, GPUs, allocator, pool
    (slots and blocks), requests."""
    from kvsim.config import SimConfig

    assert isinstance(cfg, SimConfig)
    args = cfg.engine_args
    par = cfg.parallel
    gpus = f" x{par.world_size} (TP {par.tensor_parallel_size}, PP {par.pipeline_parallel_size})"
    policy = cfg.cache.allocator
    pool = f"{cfg.capacity_tokens:,} KV slots"
    if cfg.cache.allocator == "paged":
        policy += f" {cfg.cache.block_size_tokens}-token blocks"
        policy += ", prefix caching" if args.enable_prefix_caching else ""
        pool += f" = {cfg.capacity_tokens // cfg.cache.block_size_tokens:,} blocks"
    elif cfg.cache.allocator != "radix":
        policy += "/" + cfg.cache.reservation
    preemption = args.preemption_mode or "recompute" + (
        " (swap for multi-sequence groups)" if args.engine == "vllm-v0" else ""
    )
    batching = ", request-level batching" if args.batching == "request" else ""
    return (
        f"{args.engine} (preemption: {preemption}{batching}): {cfg.model.name} on {cfg.gpu.name}"
        f"{gpus if par.world_size > 1 else ''}, {policy}, {pool} "
        f"({cfg.kv_cache_bytes / 2**30:,.2f} GiB per GPU), {num_requests:,} requests"
    )


def register(app: typer.Typer) -> None:
    """Add ``run`` to the ``kvsim`` app."""
    app.command("run")(run)
