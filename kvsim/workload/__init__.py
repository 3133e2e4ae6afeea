"""Workloads: seeded generators and trace readers that turn a spec into requests (no SimPy).

``WorkloadSpec`` describes arrivals (Poisson, gamma, trace replay), lengths (trace rows or
parametric distributions) and filters; ``generate_requests(spec, rng, max_model_len=...)`` returns
sorted :class:`~kvsim.request.Request` records. Named traces are read from :func:`data_dir`; a
user's file may be in any of ``TRACE_FORMATS`` (``kvsim.workload.traces``).
"""

from __future__ import annotations

from kvsim.workload.catalog import TRACES, DataNotFoundError, TraceInfo, data_dir, resolve_trace
from kvsim.workload.generate import generate_requests
from kvsim.workload.lengths import ALPACA_LIKE, SHAREGPT_LIKE, LognormalFit
from kvsim.workload.spec import DEFAULT_NUM_REQUESTS, WorkloadSpec, load_workload, workloads_dir
from kvsim.workload.traces import TRACE_FORMATS, Trace, load_trace

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
