"""Packed vectors grown by doubling and filled from a kept one: the per-request and per-step
vectors of the offload tiers and the scheduler's step counts (``librt.vecs``; no int object an
entry)."""

from __future__ import annotations

from librt.vecs import extend, vec
from mypy_extensions import i64


def grown(values: vec[i64], length: i64, fill: i64) -> vec[i64]:
    """``values`` if it has ``length`` entries, else grown to at least ``length`` and at least
    twice its length (a request's stores grow it step after step: a few copies a request, not
    one a block), the new ones ``fill``."""
    if len(values) >= length:
        return values
    more = max(length, 2 * len(values)) - len(values)
    return extend(values, filled(fill, more))


_FILLED: dict[int, vec[i64]] = {}  # fill -> a vector of it that ``filled`` slices


def filled(fill: i64, n: i64) -> vec[i64]:
    """A new vector of ``n`` entries ``fill``: a slice of a kept one (one copy, where building
    it from a list converts an int object an entry)."""
    kept = _FILLED.get(fill)
    if kept is None or len(kept) < n:
        kept = vec[i64]([fill] * max(n, 2 * (len(kept) if kept is not None else 0), 1024))
        _FILLED[fill] = kept
    return kept[0:n]
