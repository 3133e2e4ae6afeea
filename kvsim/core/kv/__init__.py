"""KV allocation policies behind one contract (``base.Allocator``), registered by name."""

from __future__ import annotations

from typing import Any

from kvsim.config.allocators import accepted_arguments
from kvsim.core.kv.base import Allocator, AllocatorStats, AllocResult
from kvsim.core.kv.buddy import BuddyAllocator
from kvsim.core.kv.contiguous import BestFitAllocator, FirstFitAllocator
from kvsim.core.kv.paged import PagedAllocator
from kvsim.core.kv.radix import RadixAllocator
from kvsim.core.kv.vattention import VAttentionAllocator

ALLOCATORS: dict[str, type[Allocator]] = {
    "first_fit": FirstFitAllocator,
    "best_fit": BestFitAllocator,
    "buddy": BuddyAllocator,
    "paged": PagedAllocator,
    "radix": RadixAllocator,
    "vattention": VAttentionAllocator,
}


def allocator_from_knobs(name: str, **knobs: Any) -> Allocator:
    """``make_allocator(name, ...)`` with the knobs the policy takes
    (``kvsim.config.allocators.accepted_arguments``); the others (a run's settings for other
    policies) are left out. Unknown names raise ``ValueError``."""
    takes = accepted_arguments(name)
    return ALLOCATORS[name](**{k: v for k, v in knobs.items() if k in takes})


def make_allocator(name: str, **kwargs: Any) -> Allocator:
    """Build the allocator registered as ``name`` with keyword arguments it takes.

    Raises:
        ValueError: unknown name, or an argument that allocator does not take (a misspelt
            ``block_size_tokns`` is an error, not a silent default).
    """
    takes = accepted_arguments(name)
    unknown = sorted(set(kwargs) - takes)
    if unknown:
        raise ValueError(
            f"make_allocator({name!r}): unknown argument(s) {', '.join(unknown)}; "
            f"{name} takes {', '.join(sorted(takes))}"
        )
    return ALLOCATORS[name](**kwargs)


__all__ = [
    "ALLOCATORS",
    "AllocResult",
    "Allocator",
    "AllocatorStats",
    "accepted_arguments",
    "allocator_from_knobs",
    "make_allocator",
]
