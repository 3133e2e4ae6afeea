"""Step latency: an analytic roofline on a GPU spec. Pure functions of the batch; no SimPy, no state.

One engine step reads the weights once, reads every decoding sequence's KV, and computes the new
tokens (linear layers ``2 * num_params`` FLOPs per token; causal attention ``2 * num_layers *
hidden * P**2`` FLOPs for a P-token prefill and ``4 * num_layers * hidden * context`` per decode
token). Its duration is ``max(bytes / (HBM bandwidth * hbm_efficiency), FLOPs / (peak FP16 FLOP/s *
flops_efficiency)) + step_overhead_s``. The paged layout multiplies the KV-read bytes by
``paged_attention_factor`` (the paper measured its paged kernel 20-26 % slower; a later calibration
replaces this default of 1.0).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from kvsim.config import CostSpec, GpuSpec, ModelSpec

FloatArray = npt.NDArray[np.float64]


class StepCostModel:
    """Seconds per engine step for a model on a GPU.

    Args:
        model: the served model (weights and KV bytes per token).
        gpu: HBM bandwidth (bytes/s) and FP16 FLOP/s.
        cost: efficiency factors and overhead (seconds).
        paged: whether KV is read through block tables (applies ``paged_attention_factor``).
    """

    def __init__(self, model: ModelSpec, gpu: GpuSpec, cost: CostSpec, *, paged: bool) -> None:
        self.weight_bytes = float(model.weight_bytes)
        self.kv_read_bytes_per_token = model.bytes_per_token * (
            cost.paged_attention_factor if paged else 1.0
        )
        self.hidden = model.num_attention_heads * model.head_dim
        self.num_layers = model.num_layers
        self.linear_flops_per_token = 2.0 * model.num_params
        self.bandwidth = gpu.hbm_bandwidth_bytes_per_s * cost.hbm_efficiency
        self.flops = gpu.fp16_flops_per_s * cost.flops_efficiency
        self.overhead_s = cost.step_overhead_s

    def step_duration_s(self, prefill_tokens: Sequence[int], decode_context_tokens: int,
                        num_decode_seqs: int) -> float:
        """Duration of one step in seconds.

        Args:
            prefill_tokens: tokens computed by each prefill in the step.
            decode_context_tokens: total KV tokens read by the decoding sequences.
            num_decode_seqs: decoding sequences (one new token each).
        """
        span = self.decode_span_s(np.array([decode_context_tokens], np.float64), num_decode_seqs,
                                  prefill_tokens)
        return float(span[0])

    def decode_span_s(self, decode_context_tokens: FloatArray, num_decode_seqs: int,
                      prefill_tokens: Sequence[int] = ()) -> FloatArray:
        """Durations (seconds) of consecutive steps; prefills only in the first.

        Args:
            decode_context_tokens: float64[k] total KV tokens read by the decodes in each step.
            num_decode_seqs: decoding sequences in every step.
            prefill_tokens: prefill sizes, tokens, of the first step.

        Returns:
            float64[k] step durations. Raises ``ValueError`` on a negative duration.
        """
        n_prefill = float(sum(prefill_tokens))
        prefill_attn = 2.0 * self.num_layers * self.hidden * float(sum(p * p for p in prefill_tokens))
        mem = self.weight_bytes + decode_context_tokens * self.kv_read_bytes_per_token
        flops = (self.linear_flops_per_token * num_decode_seqs
                 + 4.0 * self.num_layers * self.hidden * decode_context_tokens)
        flops = flops.copy()
        flops[0] += self.linear_flops_per_token * n_prefill + prefill_attn
        durations = np.maximum(mem / self.bandwidth, flops / self.flops) + self.overhead_s
        if (durations < 0).any():
            raise ValueError(f"cost model returned a negative duration: {durations.min()}")
        return durations
