"""KV allocation policies behind one contract (``base.Allocator``), registered by name."""

from __future__ import annotations

import inspect
from typing import Any

from kvsim.allocators.base import Allocator, AllocatorStats, AllocResult
from kvsim.allocators.buddy import BuddyAllocator
from kvsim.allocators.contiguous import BestFitAllocator, FirstFitAllocator
from kvsim.allocators.paged import PagedAllocator
from kvsim.allocators.radix import RadixAllocator

ALLOCATORS: dict[str, type[Allocator]] = {
    "first_fit": FirstFitAllocator,
    "best_fit": BestFitAllocator,
    "buddy": BuddyAllocator,
    "paged": PagedAllocator,
    "radix": RadixAllocator,
}


def _init_params(cls: type[Allocator]) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            sig = inspect.signature(klass.__init__)  # type: ignore[misc]
            names |= {p.name for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY}
    return names


def make_allocator(name: str, **kwargs: Any) -> Allocator:
    """Build the allocator registered as ``name``, passing it the keyword arguments it takes.

    Raises:
        ValueError: unknown name.
    """
    if name not in ALLOCATORS:
        raise ValueError(f"Unknown allocator {name!r}; choose from {sorted(ALLOCATORS)}")
    cls = ALLOCATORS[name]
    accepted = _init_params(cls)
    return cls(**{k: v for k, v in kwargs.items() if k in accepted})


__all__ = ["ALLOCATORS", "AllocResult", "Allocator", "AllocatorStats", "make_allocator"]
