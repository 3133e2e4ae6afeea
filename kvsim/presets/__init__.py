"""Presets shipped inside the package (read with ``importlib.resources``, so they work from an
installed wheel): workloads (``workloads/``), experiments (``experiments/``) and capacity-planning
questions (``plans/``). In a source checkout the repository's ``workloads`` and ``experiments``
are links to these folders.
"""

from __future__ import annotations

import functools
from importlib.resources import files
from pathlib import Path


@functools.cache  # the package does not move while it runs; importlib.resources costs ~60 µs
def _folder(name: str) -> Path:
    return Path(str(files(__name__) / name))


def workloads_dir() -> Path:
    """The shipped workload presets (``workload = "azure_conv"``)."""
    return _folder("workloads")


def experiments_dir() -> Path:
    """The shipped experiments (``kvsim sweep experiments/NAME.toml``, ``open_experiment``)."""
    return _folder("experiments")


def plans_dir() -> Path:
    """The shipped plan TOMLs (``kvsim plan NAME``)."""
    return _folder("plans")


def names(folder: Path) -> list[str]:
    """The presets in a folder, by file stem, sorted."""
    return sorted(p.stem for p in folder.glob("*.toml"))
