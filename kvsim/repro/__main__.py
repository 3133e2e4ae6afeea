"""``python -m kvsim.repro``: the paper reproductions (Figure 13, Figure 12, §7.3) as commands.

``kvsim/cli.py`` may add the same commands with ``register(app)``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer


def fig13(
    out: Annotated[Path, typer.Option(help="output folder")] = Path("results/fig13"),
    scale: Annotated[float, typer.Option(help="requests per run x this (short runs < 1)")] = 1.0,
    seed: Annotated[int, typer.Option(help="the runs' seed")] = 0,
) -> None:
    """Figure 13: average batched requests -> <out>/batched.csv."""
    from kvsim.repro.fig13 import write_fig13

    path = write_fig13(out, scale=scale, seed=seed)
    typer.echo(path.read_text())
    typer.echo(f"wrote {path}")


def fig12(
    out: Annotated[Path, typer.Option(help="output folder")] = Path("results/fig12"),
    num_requests: Annotated[int, typer.Option(help="requests per run")] = 1000,
    seed: Annotated[int, typer.Option(help="the runs' seed")] = 0,
) -> None:
    """Figure 12 shape: sustainable request rates and their ratios -> <out>/*.csv."""
    from kvsim.repro.fig12 import fig12_rates, fig12_ratios

    out.mkdir(parents=True, exist_ok=True)
    rates = fig12_rates(num_requests=num_requests, seed=seed)
    ratios = fig12_ratios(rates)
    rates.to_csv(out / "rates.csv", index=False)
    ratios.to_csv(out / "ratios.csv", index=False)
    typer.echo(rates.to_string(index=False))
    typer.echo(ratios.to_string(index=False))


def preemption(
    out: Annotated[Path, typer.Option(help="output folder")] = Path("results/preemption"),
    rate: Annotated[float, typer.Option(help="ShareGPT request rate, req/s")] = 2.0,
    num_requests: Annotated[int, typer.Option(help="requests per run")] = 1000,
    seed: Annotated[int, typer.Option(help="the runs' seed")] = 0,
) -> None:
    """§7.3: recompute vs swap against block size -> <out>/*.csv."""
    from kvsim.repro.preemption import overhead_per_token, recompute_vs_swap

    out.mkdir(parents=True, exist_ok=True)
    micro = overhead_per_token()
    e2e = recompute_vs_swap(rate_per_s=rate, num_requests=num_requests, seed=seed)
    micro.to_csv(out / "overhead_per_token.csv", index=False)
    e2e.to_csv(out / "recompute_vs_swap.csv", index=False)
    typer.echo(micro.to_string(index=False))
    typer.echo(e2e.to_string(index=False))


def register(app: typer.Typer) -> None:
    """Add ``fig13``, ``fig12`` and ``preemption`` to a Typer app."""
    app.command("fig13")(fig13)
    app.command("fig12")(fig12)
    app.command("preemption")(preemption)


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    app = typer.Typer(add_completion=False, help=__doc__)
    register(app)
    app()


if __name__ == "__main__":
    main()
