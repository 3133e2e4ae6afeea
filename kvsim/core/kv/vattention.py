"""Virtual contiguity (vAttention, Prabhu et al., ASPLOS'25): a contiguous virtual KV range per
request, physical pages mapped into it on demand.

vAttention keeps, for every layer's K and V, one virtual tensor with a contiguous range per
request slot (``max_context_length`` tokens, virtual only) and maps physical pages of
``page_size_bytes`` (2 MiB with stock CUDA's virtual-memory API; 64, 128 or 256 KiB with the
authors' driver) as the request grows. A page of one tensor holds ``tokens_per_page =
page_size // (num_kv_heads * head_size * dtype_bytes)`` tokens, an integer division
(microsoft/vattention ``vattention/vattention.cu``, ``init_kv_block_size``); a request of ``L``
tokens maps ``cdiv(L, tokens_per_page)`` pages in each of its tensors (``vattention/utils.h``,
``tokens_to_pages``), all ``2 * num_layers`` of them at once (``KVBLOCKS_TO_PAGES``). The
physical pool is the free memory in pages, rounded down to whole page rows
(``get_num_phys_blocks``): ``kvsim.config.allocators.vattention_pages``.

In kvsim's slots (one token across all layers) a page row is a block of ``tokens_per_page``
slots taken from a pool of page rows: a request holds its slots up to the end of its last page,
and the unfilled tail of that page is its reservation or internal fragmentation, as a paged
block's tail is. When a page is not a whole number of tokens (OPT-13B: 10 KiB per token and
tensor, so a 64 KiB page holds 6 tokens and 4 KiB more), the sub-token tail of every page and the
pool's remainder are overhead slots (``overhead_slots``: external fragmentation and other).

Attention reads each request's KV from its one contiguous virtual range: no block table, so the
cost model's layout factor is 1 (``reads_block_table = False``). No prefix caching and no
sharing between sequences (vAttention serves each request its own range); pages are mapped
lazily, one page row when the last one fills (vAttention can map a page ahead of time,
``need_new_page_async``'s ``eager_step_count``, to hide the mapping latency; not modelled, it
holds at most one row more per request), and a finished request's pages are free at once
(vAttention's deferred reclamation keeps them mapped to the request slot until memory is short:
free memory all the same).
"""

from __future__ import annotations

from kvsim.base.units import MiB
from kvsim.config.allocators import vattention_pages
from kvsim.core.kv.paged import PagedAllocator


class VAttentionAllocator(PagedAllocator):
    """vAttention's demand-paged contiguous virtual ranges (see the module docstring).

    Args:
        capacity_tokens: pool size in token slots (``kv bytes // bytes_per_token``).
        bytes_per_token: KV bytes one token takes on one GPU, all layers.
        page_size_bytes: physical page size (64 KiB to 2 MiB).
        num_kv_tensors: virtual KV tensors on one GPU (``2 * layers``; ``layers`` for an MLA
            latent), ``kvsim.config.hardware.kv_tensors_per_gpu``.
        watermark: share of the pool vLLM v0's admission keeps free (``PagedAllocator``).
        kv_cache_bytes: the KV budget, bytes, that the page rows divide (``None``:
            ``capacity_tokens * bytes_per_token``, the budget rounded down to whole tokens).

    Attributes:
        tokens_per_page: tokens one page of one tensor holds (``block_size_tokens``).
        num_pages: page rows in the pool (``num_blocks``).
    """

    name = "vattention"
    caches_prefixes = False
    reads_block_table = False

    def __init__(
        self,
        *,
        capacity_tokens: int,
        bytes_per_token: int = 1,
        page_size_bytes: int = 2 * MiB,
        num_kv_tensors: int = 2,
        watermark: float = 0.0,
        kv_cache_bytes: int | None = None,
    ) -> None:
        kv_bytes = capacity_tokens * bytes_per_token if kv_cache_bytes is None else kv_cache_bytes
        tokens_per_page, num_pages = vattention_pages(
            kv_bytes, bytes_per_token, page_size_bytes, num_kv_tensors
        )
        if num_pages < 1:
            raise ValueError(
                f"page_size_bytes: the {kv_bytes:,}-byte KV pool holds "
                f"no row of {num_kv_tensors} pages of {page_size_bytes:,} bytes; lower the page "
                "size or raise the KV budget"
            )
        self.page_size_bytes = page_size_bytes
        self.num_kv_tensors = num_kv_tensors
        self.tokens_per_page = tokens_per_page
        self.num_pages = num_pages
        super().__init__(
            capacity_tokens=capacity_tokens,
            bytes_per_token=bytes_per_token,
            block_size_tokens=tokens_per_page,
            watermark=watermark,
            enable_prefix_caching=False,
            share_sequence_groups=False,
            reserve_null_block=False,
            vllm_v1_pool=False,
        )

    def _pool_blocks(self, capacity_tokens: int, block_size_tokens: int) -> int:
        """Page rows, not ``capacity // tokens_per_page``: a page may hold a token's fraction
        more than its whole tokens."""
        return self.num_pages

    @property
    def num_gpu_blocks(self) -> int | None:
        """Page rows (vAttention's pages per tensor)."""
        return self.num_pages
