"""The KV allocation policies a config may name: each one's layout and the cache settings it reads.

``kvsim.core.kv`` registers one class per name, whose keyword arguments are exactly
``COMMON_ARGUMENTS`` plus the policy's ``POLICY_ARGUMENTS`` (its tests check it); the engine
hands each policy those of the run's settings, and ``config.ignored`` warns about a setting the
named policy does not read.
"""

from __future__ import annotations

from typing import Literal

Layout = Literal["slabs", "blocks", "tokens"]
COMMON_ARGUMENTS = frozenset({"capacity_tokens", "bytes_per_token"})
_SLAB = frozenset({"reservation", "max_model_len", "full_context_tokens"})
POLICY_ARGUMENTS: dict[str, frozenset[str]] = {
    "first_fit": _SLAB,
    "best_fit": _SLAB,
    "buddy": _SLAB,
    "paged": frozenset(
        {
            "block_size_tokens",
            "watermark",
            "enable_prefix_caching",
            "share_sequence_groups",
            "reserve_null_block",
            "vllm_v1_pool",  # (not a config field: follows reserve_null_block unless set)
        }
    ),
    "radix": frozenset(),
}
LAYOUTS: dict[str, Layout] = {
    "first_fit": "slabs",  # one contiguous slab per sequence
    "best_fit": "slabs",
    "buddy": "slabs",
    "paged": "blocks",
    "radix": "tokens",  # a radix tree of single-token pages
}
SLAB_ALLOCATORS = tuple(name for name, layout in LAYOUTS.items() if layout == "slabs")
PAGED_ALLOCATORS = tuple(name for name, layout in LAYOUTS.items() if layout == "blocks")
POWER_OF_TWO_SLABS = ("buddy",)  # slabs rounded up to a power of two (the buddy system)


def caches_prefixes_always(name: str) -> bool:
    """A prefix tree caches whatever ``enable_prefix_caching`` says (SGLang's RadixCache)."""
    return LAYOUTS[name] == "tokens"


def has_memory_map(name: str) -> bool:
    """Every slot is owned by one request at an address (slabs, blocks), so the pool can be
    drawn; a tree's slots are shared along its paths."""
    return LAYOUTS[name] in ("slabs", "blocks")


def serves_sequence_groups(name: str) -> bool:
    """Parallel samples and beams (copy-on-write blocks, or one slab per sequence)."""
    return LAYOUTS[name] in ("slabs", "blocks")


def accepted_arguments(name: str) -> frozenset[str]:
    """The keyword arguments the policy registered as ``name`` takes.

    Raises:
        ValueError: unknown name.
    """
    if name not in POLICY_ARGUMENTS:
        raise ValueError(f"Unknown allocator {name!r}; choose from {sorted(POLICY_ARGUMENTS)}")
    return COMMON_ARGUMENTS | POLICY_ARGUMENTS[name]
