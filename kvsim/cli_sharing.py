"""``kvsim sharing``: Figure 15 (KV saved by sharing) and prefix-cache hit rates (Mooncake).

``kvsim/cli.py`` adds the command with ``register(app)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def sharing(
    out: Annotated[Path, typer.Option(help="output folder")] = Path("results/sharing"),
    num_requests: Annotated[int, typer.Option(help="Alpaca requests per Figure 15 run")] = 400,
    fit_width: Annotated[int, typer.Option(help="beam width the survival is fitted on")] = 4,
    mooncake_requests: Annotated[
        int, typer.Option(help="Mooncake requests replayed (0: the whole trace)")
    ] = 2000,
) -> None:
    """Figure 15 -> <out>/savings.csv; Mooncake hit rates and the prefix plot -> <out>/*."""
    from kvsim.repro.sharing import write_sharing
    from kvsim.workload import DataNotFoundError

    try:
        paths = write_sharing(
            out,
            num_requests=num_requests,
            fit_width=fit_width,
            mooncake_requests=mooncake_requests or None,
        )
    except (ValueError, OSError, DataNotFoundError) as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None
    typer.echo(paths[0].read_text())
    typer.echo(paths[1].read_text())
    typer.echo(paths[2].read_text())
    typer.echo(f"wrote {', '.join(str(p) for p in paths)}")


def register(app: typer.Typer) -> None:
    """Add ``sharing`` to a Typer app."""
    app.command("sharing")(sharing)
