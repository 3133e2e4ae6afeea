"""CuPy ``RawKernel`` decode-attention microkernel, reading KV contiguously or through block tables.

One CUDA block per (KV head, sequence); ``NUM_WARPS`` warps stripe the sequence's tokens
(token ``t`` -> warp ``t % NUM_WARPS``). For each token a warp loads the K row and the V row of its
KV head (lane ``i`` holds elements ``[i * HEAD_DIM/32, (i+1) * HEAD_DIM/32)``, fp16), scores all
``GROUP`` query heads that share the KV head (grouped-query attention: K/V are read once per group),
and updates an online softmax in fp32. The warps' partial (max, sum, acc) are merged through shared
memory. The only difference between the layouts is the row address:

    contiguous  row = (b * max_ctx + t) * num_kv_heads + kv_head
    paged       row = (block_tables[b, t / BLOCK_SIZE] * BLOCK_SIZE + t % BLOCK_SIZE)
                      * num_kv_heads + kv_head

``HEAD_DIM``, ``GROUP``, ``NUM_WARPS``, ``PAGED`` and ``BLOCK_SIZE`` are compile-time constants
(vLLM templates its paged kernel on block size the same way). ``reference.decode_attention_online``
is the NumPy version of the same maths. CuPy is imported lazily: only ``kvsim[gpu]`` needs it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

KERNEL_SOURCE = r"""
#include <cuda_fp16.h>

#define ELEMS (HEAD_DIM / 32)
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ void load_row(const __half* __restrict__ p, float* r) {
    #pragma unroll
    for (int e = 0; e < ELEMS; e += 2) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(p + e));
        r[e] = f.x;
        r[e + 1] = f.y;
    }
}

extern "C" __global__ void decode_attention(
    const __half* __restrict__ q,             // [batch, num_kv_heads * GROUP, HEAD_DIM]
    const __half* __restrict__ k,             // contiguous [batch, max_ctx, kvh, D] or pool
    const __half* __restrict__ v,             //   [num_blocks, BLOCK_SIZE, kvh, D]
    const int* __restrict__ block_tables,     // [batch, max_blocks] (paged only)
    const int* __restrict__ context_lens,     // [batch]
    float* __restrict__ out,                  // [batch, num_kv_heads * GROUP, HEAD_DIM]
    const int num_kv_heads, const int max_ctx, const int max_blocks, const float scale)
{
    const int kvh = blockIdx.x;
    const int b = blockIdx.y;
    const int warp = threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    const int num_heads = num_kv_heads * GROUP;
    const int ctx = context_lens[b];

    float qr[GROUP][ELEMS], acc[GROUP][ELEMS], m[GROUP], l[GROUP];
    #pragma unroll
    for (int g = 0; g < GROUP; ++g) {
        load_row(q + ((size_t)b * num_heads + kvh * GROUP + g) * HEAD_DIM + lane * ELEMS, qr[g]);
        m[g] = NEG_INF;
        l[g] = 0.f;
        #pragma unroll
        for (int e = 0; e < ELEMS; ++e) acc[g][e] = 0.f;
    }

    for (int t = warp; t < ctx; t += NUM_WARPS) {
#if PAGED
        const int blk = block_tables[(size_t)b * max_blocks + t / BLOCK_SIZE];
        const size_t row = ((size_t)blk * BLOCK_SIZE + (t % BLOCK_SIZE)) * num_kv_heads + kvh;
#else
        const size_t row = ((size_t)b * max_ctx + t) * num_kv_heads + kvh;
#endif
        float kr[ELEMS], vr[ELEMS];
        load_row(k + row * HEAD_DIM + lane * ELEMS, kr);
        load_row(v + row * HEAD_DIM + lane * ELEMS, vr);
        #pragma unroll
        for (int g = 0; g < GROUP; ++g) {
            float s = 0.f;
            #pragma unroll
            for (int e = 0; e < ELEMS; ++e) s += qr[g][e] * kr[e];
            #pragma unroll
            for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
            s *= scale;
            const float m_new = fmaxf(m[g], s);
            const float alpha = (m[g] == NEG_INF) ? 0.f : __expf(m[g] - m_new);
            const float p = __expf(s - m_new);
            l[g] = l[g] * alpha + p;
            #pragma unroll
            for (int e = 0; e < ELEMS; ++e) acc[g][e] = acc[g][e] * alpha + p * vr[e];
            m[g] = m_new;
        }
    }

    __shared__ float sm_m[NUM_WARPS][GROUP];
    __shared__ float sm_l[NUM_WARPS][GROUP];
    __shared__ float sm_acc[NUM_WARPS][GROUP][HEAD_DIM];
    #pragma unroll
    for (int g = 0; g < GROUP; ++g) {
        if (lane == 0) { sm_m[warp][g] = m[g]; sm_l[warp][g] = l[g]; }
        #pragma unroll
        for (int e = 0; e < ELEMS; ++e) sm_acc[warp][g][lane * ELEMS + e] = acc[g][e];
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < GROUP * HEAD_DIM; idx += NUM_WARPS * 32) {
        const int g = idx / HEAD_DIM, d = idx % HEAD_DIM;
        float big_m = NEG_INF;
        for (int w = 0; w < NUM_WARPS; ++w) big_m = fmaxf(big_m, sm_m[w][g]);
        float total = 0.f, o = 0.f;
        for (int w = 0; w < NUM_WARPS; ++w) {
            const float wt = (sm_m[w][g] == NEG_INF) ? 0.f : __expf(sm_m[w][g] - big_m);
            total += sm_l[w][g] * wt;
            o += sm_acc[w][g][d] * wt;
        }
        out[((size_t)b * num_heads + kvh * GROUP + g) * HEAD_DIM + d] = o / total;
    }
}
"""


class CalibrationUnavailableError(RuntimeError):
    """CuPy or a CUDA GPU is missing; the message says which and how to get it."""


def import_cupy() -> Any:
    """Import CuPy and check that a CUDA device is visible.

    Raises:
        CalibrationUnavailableError: CuPy is not installed, or no CUDA GPU/driver is usable.
    """
    try:
        import cupy
    except ImportError:
        raise CalibrationUnavailableError(
            "kvsim calibrate needs CuPy and an NVIDIA GPU: CuPy is not installed. Install the GPU "
            "extra (pip install -e '.[gpu]', i.e. cupy-cuda12x) on a machine with a CUDA driver. "
            "The simulator itself does not need this: it uses the analytic layout factor."
        ) from None
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as err:  # CUDARuntimeError without a driver
        raise CalibrationUnavailableError(
            f"kvsim calibrate needs an NVIDIA GPU: CuPy is installed but CUDA reports {err}. "
            "Run it on a machine with a GPU and driver."
        ) from None
    if count < 1:
        raise CalibrationUnavailableError(
            "kvsim calibrate needs an NVIDIA GPU: none is visible (check CUDA_VISIBLE_DEVICES)."
        )
    return cupy


@dataclass(frozen=True)
class KernelShape:
    """Heads of the microkernel.

    Attributes:
        num_heads: query heads.
        num_kv_heads: KV heads (``num_heads`` must be a multiple; GQA group = the quotient).
        head_dim: elements per head; 64, 128 or 256 (fp16 pairs per lane).
        num_warps: warps per CUDA block, striping the tokens.
    """

    num_heads: int = 32
    num_kv_heads: int = 8
    head_dim: int = 128
    num_warps: int = 8

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads})"
            )
        if self.head_dim not in (64, 128, 256):
            raise ValueError(f"head_dim: must be 64, 128 or 256, got {self.head_dim}")

    @property
    def group(self) -> int:
        return self.num_heads // self.num_kv_heads


class DecodeAttentionKernel:
    """The compiled kernel for one layout.

    Args:
        shape: heads and warps.
        block_size_tokens: ``None`` for the contiguous layout, else the paged block size.
    """

    def __init__(self, shape: KernelShape, block_size_tokens: int | None) -> None:
        cp = import_cupy()
        self.shape = shape
        self.block_size_tokens = block_size_tokens
        paged = block_size_tokens is not None
        options = (
            f"-DHEAD_DIM={shape.head_dim}",
            f"-DGROUP={shape.group}",
            f"-DNUM_WARPS={shape.num_warps}",
            f"-DPAGED={int(paged)}",
            f"-DBLOCK_SIZE={block_size_tokens or 1}",
        )
        self._kernel = cp.RawKernel(KERNEL_SOURCE, "decode_attention", options=options)
        self._cp = cp
        self._no_tables = cp.zeros(1, cp.int32)  # allocated once: no memset inside a timed launch

    def __call__(
        self,
        q: Any,
        k: Any,
        v: Any,
        context_lens: Any,
        out: Any,
        *,
        block_tables: Any = None,
        max_ctx: int,
    ) -> None:
        """Launch on the current stream (asynchronous).

        Args:
            q: fp16[batch, num_heads, head_dim]; k, v: fp16 contiguous caches
                [batch, max_ctx, num_kv_heads, head_dim] or pools
                [num_blocks, block_size, num_kv_heads, head_dim].
            context_lens: int32[batch]; out: float32[batch, num_heads, head_dim].
            block_tables: int32[batch, max_blocks] for the paged layout.
            max_ctx: tokens per sequence region of the contiguous cache.
        """
        cp = self._cp
        batch = int(q.shape[0])
        if self.block_size_tokens is None:
            tables, max_blocks = self._no_tables, 0
        else:
            tables, max_blocks = block_tables, int(block_tables.shape[1])
        s = self.shape
        self._kernel(
            (s.num_kv_heads, batch),
            (s.num_warps * 32,),
            (
                q,
                k,
                v,
                tables,
                context_lens,
                out,
                cp.int32(s.num_kv_heads),
                cp.int32(max_ctx),
                cp.int32(max_blocks),
                cp.float32(1.0 / math.sqrt(s.head_dim)),
            ),
        )
