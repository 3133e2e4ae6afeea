"""KV allocation policies behind one contract (``base.Allocator``), registered by name."""

from __future__ import annotations

import functools
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


def accepted_arguments(name: str) -> set[str]:
    """Keyword arguments the allocator registered as ``name`` takes.

    Raises:
        ValueError: unknown name.
    """
    return set(_init_params(_allocator_class(name)))


def allocator_from_knobs(name: str, **knobs: Any) -> Allocator:
    """``make_allocator(name, ...)`` with the knobs the policy takes; the others (a run's
    settings for other policies) are left out. Unknown names raise ``ValueError``."""
    takes = accepted_arguments(name)
    return make_allocator(name, **{k: v for k, v in knobs.items() if k in takes})


def _allocator_class(name: str) -> type[Allocator]:
    if name not in ALLOCATORS:
        raise ValueError(f"Unknown allocator {name!r}; choose from {sorted(ALLOCATORS)}")
    return ALLOCATORS[name]


@functools.cache
def _init_params(cls: type[Allocator]) -> frozenset[str]:
    """Names of the arguments ``cls(...)`` takes (read once per class). A class compiled by
    mypyc (``kvsim.native``) has only its class signature, where every name is right but each is
    marked positional-only, so the names are read whatever their kind."""
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    parameters = inspect.signature(cls).parameters.values()
    return frozenset(p.name for p in parameters if p.kind not in variadic)


def make_allocator(name: str, **kwargs: Any) -> Allocator:
    """Build the allocator registered as ``name`` with keyword arguments it takes.

    Raises:
        ValueError: unknown name, or an argument that allocator does not take (a misspelt
            ``block_size_tokns`` is an error, not a silent default).
    """
    cls = _allocator_class(name)
    unknown = sorted(set(kwargs) - _init_params(cls))
    if unknown:
        raise ValueError(
            f"make_allocator({name!r}): unknown argument(s) {', '.join(unknown)}; "
            f"{name} takes {', '.join(sorted(_init_params(cls)))}"
        )
    return cls(**kwargs)


__all__ = [
    "ALLOCATORS",
    "AllocResult",
    "Allocator",
    "AllocatorStats",
    "accepted_arguments",
    "allocator_from_knobs",
    "make_allocator",
]
