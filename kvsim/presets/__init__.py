"""Shipped presets read with ``importlib.resources``: capacity-planning questions (``plans/``)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def plans_dir() -> Path:
    """The folder of the shipped plan TOMLs (``kvsim plan NAME``)."""
    return Path(str(files(__name__) / "plans"))
