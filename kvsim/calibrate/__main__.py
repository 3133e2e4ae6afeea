"""``python -m kvsim.calibrate``: the ``kvsim calibrate`` command on its own."""

from __future__ import annotations

import typer

from kvsim.calibrate.cli import register


def main() -> None:
    app = typer.Typer(add_completion=False)
    register(app)
    app()


if __name__ == "__main__":
    main()
