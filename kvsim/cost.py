"""Step latency: a roofline over the batch an engine step runs. Pure functions; no SimPy, no state.

One step of ``n`` decoding sequences (total context ``C`` tokens) and prefills of ``P_i`` tokens:

    bytes  = W + C * bytes_per_token * f_layout(B)
    flops  = 2 * num_params * (n + sum P_i)                     linear layers
           + 2 * num_layers * hidden * sum P_i**2               causal prefill attention
           + 4 * num_layers * hidden * C                        decode attention
    t_step = max(bytes / (HBM B/s * hbm_eff), flops / (FP16 FLOP/s * flops_eff))
           + step_overhead_s + per_seq_overhead_s * (n + #prefills) + t_swap

Sources of each coefficient:

- ``W = num_params * dtype_bytes``: every step streams all weights once (decode is memory-bound;
  Kwon et al. 2023 §2.3). ``bytes_per_token = 2 * layers * kv_heads * head_dim * dtype_bytes``.
- ``2 * num_params`` FLOPs per token: one multiply-add per weight (Kaplan et al. 2020, "Scaling
  laws", Table 1 forward-pass estimate).
- Attention FLOPs: QK^T and PV are each ``2 * hidden * (context)`` FLOPs per query token and layer;
  a causal prefill of ``P`` tokens sums the context over ``1..P``, about ``P**2 / 2``, so both
  matrices give ``2 * layers * hidden * P**2``; a decode token at context ``c`` gives
  ``4 * layers * hidden * c``.
- HBM bandwidth, FP16 FLOP/s and PCIe bandwidth: the GPU preset (vendor datasheets,
  ``kvsim/data/gpus.toml``). ``hbm_efficiency``, ``flops_efficiency``, ``step_overhead_s`` and
  ``per_seq_overhead_s``: ``CostSpec`` (defaults: a lean engine; preset ``vllm-2023`` fitted to
  the paper's Figure 13 as ``kvsim/data/costs.toml`` explains).
- ``f_layout(B)``: 1 for contiguous KV; for paged KV at block size ``B`` the paged/contiguous
  kernel-time ratio from the calibration table (``kvsim calibrate``), else the analytic default
  of ``kvsim.calibrate.table`` (1.23 at B = 16: the paper's "20-26 % slower" kernel).
- Swap: ``bytes / PCIe B/s + num_blocks * 2 * num_layers * swap_copy_overhead_s`` (vLLM's
  ``swap_blocks`` issues one ``cudaMemcpyAsync`` per block, per layer, for K and for V; a few
  microseconds of API and DMA set-up each, an assumption of 5 us by default), so tiny blocks swap
  slowly (the paper's §7.3).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from kvsim.calibrate.table import resolve_table
from kvsim.config import CostSpec, GpuSpec, ModelSpec

FloatArray = npt.NDArray[np.float64]
logger = logging.getLogger(__name__)


class StepCostModel:
    """Seconds per engine step for a model on a GPU with a KV layout.

    Args:
        model: the served model (weights, layers, hidden size, KV bytes per token).
        gpu: HBM bandwidth (bytes/s), FP16 FLOP/s and host link bandwidth (bytes/s).
        cost: efficiency factors, overheads (seconds) and where the layout factor comes from.
        paged: whether KV is read through block tables.
        block_size_tokens: tokens per KV block of the paged layout (and per swapped block).

    Attributes:
        layout_factor: KV-read time multiplier of the layout (1.0 when contiguous).
        layout_source: where ``layout_factor`` came from (says "analytic" when not measured).
    """

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        cost: CostSpec,
        *,
        paged: bool,
        block_size_tokens: int = 16,
    ) -> None:
        self.bytes_per_token = float(model.bytes_per_token)
        self.weight_bytes = float(model.weight_bytes)
        self.hidden = model.num_attention_heads * model.head_dim
        self.num_layers = model.num_layers
        self.linear_flops_per_token = 2.0 * model.num_params
        self.bandwidth = gpu.hbm_bandwidth_bytes_per_s * cost.hbm_efficiency
        self.flops = gpu.fp16_flops_per_s * cost.flops_efficiency
        self.pcie_bandwidth = gpu.pcie_bandwidth_bytes_per_s
        self.overhead_s = cost.step_overhead_s
        self.per_seq_overhead_s = cost.per_seq_overhead_s
        self.swap_copy_overhead_s = cost.swap_copy_overhead_s
        self.block_size_tokens = block_size_tokens
        self.layout_factor, self.layout_source = self._layout(cost, gpu, paged, block_size_tokens)
        self.kv_read_bytes_per_token = self.bytes_per_token * self.layout_factor

    @staticmethod
    def _layout(cost: CostSpec, gpu: GpuSpec, paged: bool, block_size: int) -> tuple[float, str]:
        if not paged:
            return 1.0, "contiguous layout (factor 1 by definition)"
        if cost.paged_attention_factor is not None:
            return cost.paged_attention_factor, "CostSpec.paged_attention_factor"
        table = resolve_table(cost.calibration, gpu.name)
        return table.layout_factor(block_size), table.describe()

    def step_duration_s(
        self,
        prefill_tokens: Sequence[int],
        decode_context_tokens: int,
        num_decode_seqs: int,
        swap_blocks: int = 0,
    ) -> float:
        """Duration of one step in seconds.

        Args:
            prefill_tokens: tokens computed by each prefill in the step.
            decode_context_tokens: total KV tokens read by the decoding sequences (all of them).
            num_decode_seqs: decoding sequences (one new token each).
            swap_blocks: KV blocks moved over PCIe in this step (out plus in).
        """
        span = self.decode_span_s(
            np.array([decode_context_tokens], np.float64), num_decode_seqs, prefill_tokens
        )
        return float(span[0]) + self.swap_s(swap_blocks)

    def decode_span_s(
        self,
        decode_context_tokens: FloatArray,
        num_decode_seqs: int | FloatArray,
        prefill_tokens: Sequence[int] = (),
    ) -> FloatArray:
        """Durations (seconds) of consecutive steps of the same sequences; prefills in the first.

        Args:
            decode_context_tokens: float64[k] total KV tokens read by the decodes in each step.
            num_decode_seqs: decoding sequences in every step, or float64[k] per step.
            prefill_tokens: prefill sizes, tokens, of the first step.

        Returns:
            float64[k] step durations (swap time not included; see ``swap_s``).

        Raises:
            ValueError: a negative or non-finite duration (a broken coefficient).
        """
        contexts = np.asarray(decode_context_tokens, dtype=np.float64)
        n_prefill = float(sum(prefill_tokens))
        prefill_attn = (
            2.0 * self.num_layers * self.hidden * float(sum(p * p for p in prefill_tokens))
        )
        mem = self.weight_bytes + contexts * self.kv_read_bytes_per_token
        flops = (
            self.linear_flops_per_token * num_decode_seqs
            + 4.0 * self.num_layers * self.hidden * contexts
        )
        if len(flops):
            flops[0] += self.linear_flops_per_token * n_prefill + prefill_attn
        per_step = self.overhead_s + self.per_seq_overhead_s * num_decode_seqs
        durations = np.maximum(mem / self.bandwidth, flops / self.flops) + per_step
        if len(durations):
            durations[0] += self.per_seq_overhead_s * len(prefill_tokens)
        shortest, longest = durations.min(), durations.max()
        if not (shortest >= 0 and longest < np.inf):  # NaN fails both comparisons
            raise ValueError(f"cost model returned an invalid duration: {durations.min()}")
        return durations

    def swap_bytes(self, num_blocks: int) -> int:
        """Bytes one swap of ``num_blocks`` whole blocks moves over PCIe."""
        return int(num_blocks * self.block_size_tokens * self.bytes_per_token)

    def swap_s(self, num_blocks: int) -> float:
        """Seconds to move ``num_blocks`` KV blocks between GPU and CPU (one direction each).

        ``bytes / pcie_bandwidth + num_blocks * 2 * num_layers * swap_copy_overhead_s``.
        """
        if num_blocks < 0:
            raise ValueError(f"num_blocks: must be >= 0, got {num_blocks}")
        copies = num_blocks * 2 * self.num_layers
        return (
            self.swap_bytes(num_blocks) / self.pcie_bandwidth + copies * self.swap_copy_overhead_s
        )

    def recompute_s(self, num_tokens: int) -> float:
        """Extra seconds a recompute-preempted sequence of ``num_tokens`` costs when re-prefilled.

        The compute of a prefill of ``num_tokens`` (linear + causal attention FLOPs) at the
        achieved FLOP/s; used to compare recompute against ``swap_s`` (the paper's Figure 19a).
        """
        flops = (
            self.linear_flops_per_token * num_tokens
            + 2.0 * self.num_layers * self.hidden * float(num_tokens) ** 2
        )
        return flops / self.flops
