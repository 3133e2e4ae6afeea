"""``kvsim calibrate``: the command lives in ``kvsim.calibrate.cli`` so that the GPU runbook
(``python -m kvsim.calibrate``) needs nothing but numpy, typer and CuPy."""

from __future__ import annotations

from kvsim.calibrate.cli import register

__all__ = ["register"]
