"""kvsim: a discrete-event simulator of KV-cache allocation policies for LLM serving.

Three lines to a result::

    from kvsim import config_from_dict, simulate
    results = simulate(config_from_dict({"model": "llama-3.1-8b", "gpu": "h100-80gb"}))
    results.summary["time_to_first_token_seconds_p99"]

The names below load on first use, so ``import kvsim`` itself costs nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "SimConfig": "kvsim.config",
    "config_from_dict": "kvsim.config",
    "load_config": "kvsim.config",
    "simulate": "kvsim.fleet",
    "Results": "kvsim.results",
    "requests_for": "kvsim.engine.intake",
    "Request": "kvsim.workload.request",
    "RequestSpec": "kvsim.workload.request",
    "open_experiment": "kvsim.study.sweep",
    "load_sweep": "kvsim.study.load",
}

__all__ = [
    "Request",
    "RequestSpec",
    "Results",
    "SimConfig",
    "__version__",
    "config_from_dict",
    "load_config",
    "load_sweep",
    "open_experiment",
    "requests_for",
    "simulate",
]

if TYPE_CHECKING:
    __version__: str
    from kvsim.config import SimConfig, config_from_dict, load_config
    from kvsim.engine.intake import requests_for
    from kvsim.fleet import simulate
    from kvsim.results import Results
    from kvsim.study.load import load_sweep
    from kvsim.study.sweep import open_experiment
    from kvsim.workload.request import Request, RequestSpec


def _version() -> str:
    """The installed distribution's version (``importlib.metadata`` costs a few tens of ms, so
    it is read on first use)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("kvsim")
    except PackageNotFoundError:  # a source tree that is not installed
        return "0.0.0"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        globals()[name] = value = _version()
        return value
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvsim' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
