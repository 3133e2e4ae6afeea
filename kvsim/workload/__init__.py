"""Workloads: seeded generators and trace readers that turn a spec into requests (no SimPy).

``WorkloadSpec`` describes arrivals (Poisson, gamma, trace replay), lengths (trace rows or
parametric distributions) and filters; ``generate_requests(spec, rng, max_model_len=...)`` returns
sorted :class:`~kvsim.workload.request.Request` records. Named traces are read from
:func:`data_dir`; a user's file may be in any of ``TRACE_FORMATS`` (``kvsim.workload.traces``).

The names below load on first use (PEP 562), so importing one submodule (``catalog``,
``traces``) does not import the generators, pydantic or pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "ALPACA_LIKE": "kvsim.workload.lengths",
    "DEFAULT_NUM_REQUESTS": "kvsim.workload.spec",
    "SHAREGPT_LIKE": "kvsim.workload.lengths",
    "TRACES": "kvsim.workload.catalog",
    "TRACE_FORMATS": "kvsim.workload.traces",
    "DataNotFoundError": "kvsim.workload.catalog",
    "LognormalFit": "kvsim.workload.lengths",
    "Trace": "kvsim.workload.traces",
    "TraceInfo": "kvsim.workload.catalog",
    "WorkloadSpec": "kvsim.workload.spec",
    "data_dir": "kvsim.workload.catalog",
    "generate_requests": "kvsim.workload.generate",
    "load_trace": "kvsim.workload.traces",
    "load_workload": "kvsim.workload.spec",
    "resolve_trace": "kvsim.workload.catalog",
    "workloads_dir": "kvsim.workload.spec",
}

__all__ = [
    "ALPACA_LIKE",
    "DEFAULT_NUM_REQUESTS",
    "SHAREGPT_LIKE",
    "TRACES",
    "TRACE_FORMATS",
    "DataNotFoundError",
    "LognormalFit",
    "Trace",
    "TraceInfo",
    "WorkloadSpec",
    "data_dir",
    "generate_requests",
    "load_trace",
    "load_workload",
    "resolve_trace",
    "workloads_dir",
]

if TYPE_CHECKING:
    from kvsim.workload.catalog import (
        TRACES,
        DataNotFoundError,
        TraceInfo,
        data_dir,
        resolve_trace,
    )
    from kvsim.workload.generate import generate_requests
    from kvsim.workload.lengths import ALPACA_LIKE, SHAREGPT_LIKE, LognormalFit
    from kvsim.workload.spec import DEFAULT_NUM_REQUESTS, WorkloadSpec, load_workload, workloads_dir
    from kvsim.workload.trace_table import TRACE_FORMATS, Trace
    from kvsim.workload.traces import load_trace


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kvsim.workload' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
