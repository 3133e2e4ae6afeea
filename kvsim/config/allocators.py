"""The KV allocation policies a config may name: each one's layout and the cache settings it reads.

``kvsim.core.kv`` registers one class per name, whose keyword arguments are exactly
``COMMON_ARGUMENTS`` plus the policy's ``POLICY_ARGUMENTS`` (its tests check it); the engine
hands each policy those of the run's settings, and ``config.ignored`` warns about a setting the
named policy does not read.
"""

from __future__ import annotations

from typing import Literal

Layout = Literal["slabs", "blocks", "pages", "tokens"]
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
    "vattention": frozenset({"page_size_bytes", "num_kv_tensors", "watermark", "kv_cache_bytes"}),
}
LAYOUTS: dict[str, Layout] = {
    "first_fit": "slabs",  # one contiguous slab per sequence
    "best_fit": "slabs",
    "buddy": "slabs",
    "paged": "blocks",
    "radix": "tokens",  # a radix tree of single-token pages
    "vattention": "pages",  # page rows mapped on demand into one contiguous virtual range each
}
SLAB_ALLOCATORS = tuple(name for name, layout in LAYOUTS.items() if layout == "slabs")
PAGED_ALLOCATORS = tuple(name for name, layout in LAYOUTS.items() if layout == "blocks")
POWER_OF_TWO_SLABS = ("buddy",)  # slabs rounded up to a power of two (the buddy system)


def caches_prefixes_always(name: str) -> bool:
    """A prefix tree caches whatever ``enable_prefix_caching`` says (SGLang's RadixCache)."""
    return LAYOUTS[name] == "tokens"


def caches_prefixes(name: str, enable_prefix_caching: bool) -> bool:
    """The policy's pool caches prefixes: a block pool when ``enable_prefix_caching`` is on (the
    profile's default or the user's), a prefix tree always (SGLang's ``RadixCache``), slabs and
    vAttention's pages never (``enable_prefix_caching`` can only be the profile's default there,
    which the policy does not read)."""
    layout = LAYOUTS[name]
    return layout == "tokens" or (layout == "blocks" and enable_prefix_caching)


def has_memory_map(name: str) -> bool:
    """Every slot is owned by one request at an address (slabs, blocks, pages), so the pool can
    be drawn; a tree's slots are shared along its paths."""
    return LAYOUTS[name] in ("slabs", "blocks", "pages")


def maps_virtual_pages(name: str) -> bool:
    """Each request one contiguous virtual range, physical pages mapped into it on demand
    (vAttention): no block table, no block shared between requests."""
    return LAYOUTS[name] == "pages"


def hands_out_blocks(name: str) -> bool:
    """The pool hands out blocks one by one (a block table, or vAttention's pages), so vLLM v0's
    swap can move them (``Allocator.paged``); slabs and a prefix tree's pages cannot."""
    return LAYOUTS[name] in ("blocks", "pages")


def keys_blocks_by_hash(name: str) -> bool:
    """Full blocks carry a prefix-cache hash chained over their parents' (vLLM's block pool), the
    key a KV offload tier stores them under (``kvsim.config.offload``); a radix tree's
    single-token pages and a request's own pages have none."""
    return LAYOUTS[name] == "blocks"


def serves_sequence_groups(name: str) -> bool:
    """Parallel samples and beams (copy-on-write blocks, or one slab per sequence)."""
    return LAYOUTS[name] in ("slabs", "blocks")


def vattention_pages(
    kv_bytes: int, bytes_per_token: int, page_size_bytes: int, num_kv_tensors: int
) -> tuple[int, int]:
    """``(tokens_per_page, num_pages)`` of a vAttention pool (Prabhu et al., ASPLOS'25).

    vAttention keeps one virtual tensor per layer for K and one for V (``num_kv_tensors`` on a
    GPU: ``2 * layers``, or ``layers`` for an MLA latent) and maps physical pages of
    ``page_size_bytes`` into them. A page of one tensor holds ``page_size_bytes //
    (bytes_per_token / num_kv_tensors)`` tokens, an integer division (microsoft/vattention
    ``vattention/vattention.cu``, ``init_kv_block_size``); a request maps pages in all its tensors
    at once, so a *page row* (``num_kv_tensors`` pages) is the unit, and the pool holds
    ``kv bytes // page_size`` pages rounded down to whole rows (``vattention/utils.h``,
    ``get_num_phys_blocks``).

    Args:
        kv_bytes: the KV budget of one GPU, bytes (not rounded to whole tokens first: a row
            is pages of bytes).
        bytes_per_token: KV bytes of one token on one GPU, all tensors.
        page_size_bytes: physical page size, bytes.
        num_kv_tensors: virtual KV tensors on one GPU.

    Raises:
        ValueError: a page smaller than one token of one tensor, or tensors that do not split a
            token's bytes evenly.
    """
    if num_kv_tensors < 1 or bytes_per_token % num_kv_tensors:
        raise ValueError(
            f"num_kv_tensors: {num_kv_tensors} tensors do not split {bytes_per_token} bytes per "
            "token evenly"
        )
    tensor_bytes = bytes_per_token // num_kv_tensors
    tokens_per_page = page_size_bytes // tensor_bytes
    if tokens_per_page < 1:
        raise ValueError(
            f"page_size_bytes: a {page_size_bytes:,}-byte page holds no token of one KV tensor "
            f"({tensor_bytes:,} bytes); raise it"
        )
    num_pages = kv_bytes // (page_size_bytes * num_kv_tensors)
    return tokens_per_page, num_pages


def serves_hybrid_groups(name: str) -> bool:
    """vLLM v1's hybrid KV cache groups (sliding-window and state layers, ``config.layers``):
    a block pool's policy; the others treat every attention layer as full attention."""
    return LAYOUTS[name] == "blocks"


def accepted_arguments(name: str) -> frozenset[str]:
    """The keyword arguments the policy registered as ``name`` takes.

    Raises:
        ValueError: unknown name.
    """
    if name not in POLICY_ARGUMENTS:
        raise ValueError(f"Unknown allocator {name!r}; choose from {sorted(POLICY_ARGUMENTS)}")
    return COMMON_ARGUMENTS | POLICY_ARGUMENTS[name]
