"""The engine: a run built from its config (``build``), driven by SimPy (``loop``) and returned
as ``Results`` (``simulate``)."""

from kvsim.engine.intake import prepare_requests
from kvsim.engine.simulate import simulate

__all__ = ["prepare_requests", "simulate"]
