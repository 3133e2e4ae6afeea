"""What ``kvsim calibrate --parts`` times and how: the ranks' layer shapes, the grid, and the
timer (CUDA events with the L2 flushed on a GPU, wall clock on a CPU dry run)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PartModel:
    """The layer shapes of one tensor-parallel rank of a dense Llama-style model.

    Attributes:
        name: the kvsim model preset and tensor-parallel size it stands for.
        hidden: residual width; heads, kv_heads: query and KV heads on the rank; head_dim.
        intermediate: MLP width on the rank; vocab: LM-head rows on the rank; num_layers.
    """

    name: str
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    num_layers: int

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in, out) features of each linear layer of one transformer layer on the rank."""
        qkv = (self.heads + 2 * self.kv_heads) * self.head_dim
        return {
            "qkv": (self.hidden, qkv),
            "o": (self.heads * self.head_dim, self.hidden),
            "gate_up": (self.hidden, 2 * self.intermediate),
            "down": (self.intermediate, self.hidden),
        }

    @property
    def kv_bytes_per_token(self) -> int:
        """K and V bytes of one token over all layers of the rank (bf16)."""
        return 2 * self.num_layers * self.kv_heads * self.head_dim * 2


# Hugging Face configs (meta-llama/Llama-2-7b-hf, meta-llama/Llama-2-70b-hf): 7B has hidden 4096,
# 32 layers, 32 heads of 128, intermediate 11008, vocab 32000; 70B has hidden 8192, 80 layers, 64
# query and 8 KV heads, intermediate 28672. The 70B row is one rank of tensor-parallel size 4
# (heads, MLP width and LM head split four ways), the configuration of the measured 70B runs.
PART_MODELS = (
    PartModel("llama-2-7b tp1", 4096, 32, 32, 128, 11008, 32000, 32),
    PartModel("llama-2-70b tp4", 8192, 16, 2, 128, 7168, 8000, 80),
)


@dataclass(frozen=True)
class PartsGrid:
    """What ``measure_parts`` times (defaults: under a minute of an H200).

    Attributes:
        gemm_tokens: tokens per linear-layer product.
        decode_batches, decode_contexts: decode steps' sequences and tokens per sequence.
        max_decode_tokens: largest batch x context timed (the KV cache of every layer is held).
        prefill_chunks: prefill chunk lengths (one sequence, nothing cached before it).
        hbm_bytes: bytes of the contiguous-read buffer.
        link_sizes: bytes of single host<->GPU copies (pinned host memory).
        block_copies, block_bytes: a batch of small copies (default 2,048 of 32 KiB: one
            16-token block of one layer's K for 8 KV heads of 128 in fp16).
        warmup, repeats: untimed and timed launches per point (the median is kept).
    """

    gemm_tokens: Sequence[int] = (1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
    decode_batches: Sequence[int] = (1, 8, 32, 64, 128, 256)
    decode_contexts: Sequence[int] = (128, 512, 2048, 8192)
    max_decode_tokens: int = 65536
    prefill_chunks: Sequence[int] = (128, 512, 2048, 8192)
    hbm_bytes: int = 8 << 30
    link_sizes: Sequence[int] = (32 << 10, 256 << 10, 2 << 20, 16 << 20, 128 << 20, 1 << 30)
    block_copies: int = 2048
    block_bytes: int = 32 << 10
    warmup: int = 3
    repeats: int = 15


class Timer:
    """Median seconds of a launch: CUDA events with the L2 flushed on a GPU, else wall clock."""

    def __init__(self, torch: Any, device: str, warmup: int, repeats: int) -> None:
        self.torch, self.device, self.warmup, self.repeats = torch, device, warmup, repeats
        self.cuda = device == "cuda"
        l2 = torch.cuda.get_device_properties(0).L2_cache_size if self.cuda else 1 << 20
        self._flush = torch.empty(2 * l2, dtype=torch.uint8, device=device)

    def __call__(self, launch: Callable[[], object]) -> float:
        torch = self.torch
        for _ in range(self.warmup):
            launch()
        times = []
        for _ in range(self.repeats):
            self._flush.fill_(1)
            if self.cuda:
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                start.record()
                launch()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e-3)
            else:
                t0 = time.perf_counter()
                launch()
                times.append(time.perf_counter() - t0)
        times.sort()
        return float(times[len(times) // 2])


def decode_points(grid: PartsGrid) -> list[tuple[int, int]]:
    return [
        (b, c)
        for b in grid.decode_batches
        for c in grid.decode_contexts
        if b * c <= grid.max_decode_tokens
    ]
