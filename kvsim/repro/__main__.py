"""``python -m kvsim.repro``: the paper reproductions (Figure 13, Figure 12, §7.3) as commands.

``kvsim/cli.py`` may add the same commands with ``register(app)``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import typer


def fig13(out: Path = typer.Option(Path("results/fig13"), help="output folder"),
          scale: float = typer.Option(1.0, help="requests per run x this (short runs < 1)"),
          seed: int = typer.Option(0)) -> None:
    """Figure 13: average batched requests -> <out>/batched.csv."""
    from kvsim.repro.fig13 import write_fig13

    path = write_fig13(out, scale=scale, seed=seed)
    typer.echo(path.read_text())
    typer.echo(f"wrote {path}")


def fig12(out: Path = typer.Option(Path("results/fig12"), help="output folder"),
          num_requests: int = typer.Option(1000), seed: int = typer.Option(0)) -> None:
    """Figure 12 shape: sustainable request rates and their ratios -> <out>/*.csv."""
    from kvsim.repro.fig12 import fig12_rates, fig12_ratios

    out.mkdir(parents=True, exist_ok=True)
    rates = fig12_rates(num_requests=num_requests, seed=seed)
    ratios = fig12_ratios(rates)
    rates.to_csv(out / "rates.csv", index=False)
    ratios.to_csv(out / "ratios.csv", index=False)
    typer.echo(rates.to_string(index=False))
    typer.echo(ratios.to_string(index=False))


def preemption(out: Path = typer.Option(Path("results/preemption"), help="output folder"),
               rate: float = typer.Option(2.0, help="ShareGPT request rate, req/s"),
               num_requests: int = typer.Option(1000), seed: int = typer.Option(0)) -> None:
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
