"""Step latency: a roofline over the work an engine step runs. Pure functions; no SimPy, no state.

A step computes ``c_i`` new tokens of request ``i`` after ``o_i`` tokens it has already computed
(a prefill chunk: ``c`` prompt tokens after ``o`` computed or cached ones; a decode: ``c = 1``
after ``o = L``). With ``T = sum c_i`` tokens, ``S`` sequences and ``P = sum (2 c_i o_i + c_i**2)``
attention pairs, on one tensor-parallel rank of ``tp`` (summed over the ``pp`` pipeline stages,
which run one after the other), the ``"operator"`` roofline (``CostSpec.roofline``, the default)
prices each operator by the longer of its reads and its FLOPs and adds them up:

    t_linear = max((W_dense + W_experts * coverage(T)) / BW,  2 * N_active * T / F)
    t_head   = max(W_head / BW,                               2 * N_head * S / F)
    t_attn   = max((sum o_i) * kv_bytes_per_token_rank * f_layout(B) / BW,
                   2 * num_layers * heads * head_dim * P / F)
    t_step   = t_linear + t_head + t_attn + step_overhead_s + layer_overhead_s * num_layers
               + per_seq_overhead_s * S + t_allreduce + t_stage_sends (+ t_swap)

with ``BW = HBM B/s * hbm_efficiency`` and ``F = FP16 FLOP/s * flops_efficiency``, every
parameter count and weight size divided by ``tp``. The ``"step"`` roofline (the ``vllm-2023`` and
``lean`` presets) is the 2023 model: ``max((W + (sum o_i) * kv * f) / BW, (2 * num_params * T +
2 * num_layers * heads * head_dim * P) / F)``, every parameter charged to every token.

Speculative decoding: verifying ``k`` drafts is a chunk of ``c = 1 + k`` tokens after the
request's ``o`` computed ones (the sums above: one read of its KV for all ``c`` queries); a
drafter with weights (EAGLE's head, a draft model) then runs ``k`` passes one after the other over
the ``d`` sequences that draft, each ``max(draft_bytes / BW, 2 * draft_params * d / F)``
(``t_draft``, added to ``t_step``; 0 for n-gram lookup or ``draft_num_params = 0``; the
drafter's reads of its own KV, ``draft_num_kv_layers`` layers' a pass, left out: its KV takes
pool slots, ``SimConfig.bytes_per_token``, but no step time).

Sources of each coefficient:

- Weights: every step streams the weights it uses once (decode is memory-bound; Kwon et al.
  2023 §2.3). ``W_head = N_head * dtype_bytes`` is the LM head (``vocab_size * embedding_dim``);
  the input embedding is a table read row by row (no matrix product, its reads negligible), so
  an untied embedding is neither read whole nor multiplied; ``W_dense`` is the rest but the
  routed experts.
- FLOPs: one multiply-add per weight per token (Kaplan et al. 2020, "Scaling laws", Table 1
  forward-pass estimate). The LM head runs once per scheduled sequence, on its last token only
  (vLLM's model runner gathers ``logits_indices`` before ``compute_logits``), not per prompt token.
- Mixture of experts (``ModelSpec.moe``: ``E`` routed experts, top ``k``): a token runs ``k`` of
  them, so ``N_active = N_dense + N_experts * k / E``; a step reads the experts its tokens pick.
  With picks independent and uniform, an expert is left out by all ``T`` tokens with probability
  ``(1 - k / E) ** T``, so ``coverage(T) = 1 - (1 - k / E) ** T`` of the expert weights are read
  (the expected number of distinct experts hit, an occupancy argument; Mixtral's router is close
  to uniform over a batch, Jiang et al. 2024 §5 "Routing analysis").
- Attention: ``QK^T`` and ``PV`` each cost ``2 * heads * head_dim`` FLOPs per layer per (query,
  key) pair; the ``c`` new tokens after ``o`` computed ones attend to ``c * o + c (c + 1) / 2``
  keys, about ``(2 c o + c**2) / 2``: quadratic in the chunk. GQA: query heads set the FLOPs,
  KV heads the bytes read, ``2 * num_layers * max(1, kv_heads // tp) * head_dim *
  kv_dtype_bytes`` per token on a rank (``kvsim.config.hardware``; fp8 KV halves it).
- Tensor parallelism (Megatron-LM, Shoeybi et al. 2019, §3): two all-reduces per layer (after
  attention and after the MLP) of ``T * embedding_dim * dtype_bytes`` bytes each; a ring
  all-reduce moves ``2 (tp - 1) / tp`` of the message over each GPU's link (NCCL's bus-bandwidth
  factor, nccl-tests ``doc/PERFORMANCE.md``), at the link's bandwidth (NVLink, or PCIe for GPUs
  without NVLink: ``GpuSpec.interconnect``) times ``link_efficiency``, plus a latency of
  ``allreduce_latency_s + (tp - 1) * allreduce_latency_per_peer_s`` each (a ring's ``2 (tp -
  1)`` steps each wait a hop's latency).
- Pipeline parallelism: one batch is in flight (the stages run one after the other, so each GPU
  idles ``(pp - 1) / pp`` of the step: GPipe's bubble ``(p - 1) / (m + p - 1)`` with one
  micro-batch, Huang et al. 2019); the ``pp - 1`` stage boundaries each send the step's
  activations over the link, plus one latency.
- HBM bandwidth, FP16 FLOP/s, PCIe and NVLink bandwidths: the GPU preset (vendor datasheets,
  ``kvsim/data/gpus.toml``). Efficiencies and overheads: ``CostSpec``, its unset factors FITTED
  on measured vLLM runs (``kvsim/data/cost_fit.toml``, ``kvsim.config.cost_spec.resolve_cost``);
  ``layer_overhead_s`` is 0 unless given (``kvsim calibrate --fit-parts`` fits it with the
  efficiencies on steps timed on a GPU, ``kvsim/data/calibration/<gpu>-steps.toml``, not used by
  default: ``docs/calibration.md`` says why); the ``vllm-2023`` preset was fitted to the paper's
  Figure 13 (``kvsim/data/costs.toml``).
- ``f_layout(B)``: 1 for contiguous KV; for paged KV at block size ``B``: the factor given
  (``CostSpec.paged_attention_factor``); else the fitted table's (1, fitted with the efficiencies
  it comes with on vLLM runs at block size 16) when the fitted table is used and no calibration
  table is given, times the ratio of the calibration table below at ``B`` to its value at 16
  (the fitted runs say nothing of other block sizes; the analytic ratio is 2.64 / 1.23 at
  ``B = 1``); else the
  paged/contiguous kernel-time ratio of the calibration table given (``CostSpec.calibration``) or
  measured on this GPU and shipped (``kvsim calibrate``; the H200's); else the analytic default
  of ``kvsim.calibrate.table`` (1.23 at B = 16: the paper's "20-26 % slower" kernel of 2023).
- Swap: ``bytes / PCIe B/s + num_blocks * 2 * num_layers * swap_copy_overhead_s`` (vLLM's
  ``swap_blocks`` issues one ``cudaMemcpyAsync`` per block, per layer, for K and for V; a few
  microseconds of API and DMA set-up each: 5 us by default, an assumption that an H200 bore
  out, 5.0-5.2 us a 32 KiB copy beyond its bytes, ``docs/calibration.md``), so tiny blocks swap
  slowly (the paper's §7.3).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence

from kvsim.calibrate.table import resolve_table
from kvsim.config import CostSpec, GpuSpec, ModelSpec, ParallelConfig
from kvsim.config.cost_spec import ResolvedCost, resolve_cost
from kvsim.config.hardware import KvCacheDtype, kv_bytes_per_token_per_gpu

logger = logging.getLogger(__name__)


class StepCostModel:
    """Seconds per engine step for a model on GPUs with a KV layout.

    Args:
        model: the served model (weights, layers, widths, experts).
        gpu: HBM bandwidth (bytes/s), FP16 FLOP/s and link bandwidths (bytes/s).
        cost: efficiency factors, overheads (seconds) and where the layout factor comes from;
            unset factors resolve through the fitted table (``resolve_cost``).
        paged: whether KV is read through block tables.
        block_size_tokens: tokens per KV block of the paged layout (and per swapped block).
        parallel: tensor- and pipeline-parallel sizes.
        kv_cache_dtype: the KV cache's dtype (``"auto"``: the model's).

    Attributes:
        layout_factor: KV-read time multiplier of the layout (1.0 when contiguous).
        layout_source: where ``layout_factor`` came from (says "analytic" when not measured).
        cost_source: where the efficiencies and overheads came from (``ResolvedCost.source``).
    """

    def __init__(
        self,
        model: ModelSpec,
        gpu: GpuSpec,
        cost: CostSpec,
        *,
        paged: bool,
        block_size_tokens: int = 16,
        parallel: ParallelConfig | None = None,
        kv_cache_dtype: KvCacheDtype = "auto",
        draft_passes: int = 0,
        draft_num_params: int = 0,
    ) -> None:
        parallel = parallel or ParallelConfig()
        resolved = resolve_cost(cost, gpu)
        self.cost_source = resolved.source
        self.tp = parallel.tensor_parallel_size
        self.pp = parallel.pipeline_parallel_size
        whole_model = ParallelConfig(tensor_parallel_size=self.tp)  # all layers, one TP rank
        kv_rank = kv_bytes_per_token_per_gpu(model, whole_model, kv_cache_dtype)
        stage = kv_bytes_per_token_per_gpu(model, parallel, kv_cache_dtype)  # what a swap moves
        self.swap_bytes_per_token = float(stage)
        self.hidden = model.hidden_size
        self.num_layers = model.num_layers
        self.act_bytes = float(model.dtype_bytes)
        self.message_bytes_per_token = model.residual_width * self.act_bytes
        self._work_terms(model, resolved.roofline == "step")
        self.attn_flops_per_pair = 2.0 * model.num_layers * self.hidden / self.tp
        self.bandwidth = gpu.hbm_bandwidth_bytes_per_s * resolved.hbm_efficiency
        self.flops = gpu.fp16_flops_per_s * resolved.flops_efficiency
        self.link_bandwidth = gpu.link_bandwidth_bytes_per_s * resolved.link_efficiency
        per_peer = resolved.allreduce_latency_per_peer_s
        self.allreduce_latency_s = resolved.allreduce_latency_s + per_peer * (self.tp - 1)
        self.send_latency_s = resolved.allreduce_latency_s + per_peer  # one peer
        self.pcie_bandwidth = gpu.pcie_bandwidth_bytes_per_s
        self.layer_overhead_s = resolved.layer_overhead_s
        # per step: the engine's fixed time and every layer's small kernels (each rank runs its
        # layers at once; the pipeline stages one after the other, so all num_layers count)
        self.overhead_s = resolved.step_overhead_s + resolved.layer_overhead_s * model.num_layers
        self.per_seq_overhead_s = resolved.per_seq_overhead_s
        self.swap_copy_overhead_s = cost.swap_copy_overhead_s
        self.block_size_tokens = block_size_tokens
        self.layers_per_gpu = -(model.num_layers // -self.pp)
        self.draft_passes = draft_passes
        self.draft_bytes = float(draft_num_params * model.dtype_bytes) / self.tp
        self.draft_flops_per_seq = 2.0 * draft_num_params / self.tp
        if paged and resolved.paged_attention_factor is not None:
            layout = self._fitted_layout(resolved, gpu, block_size_tokens)
        else:
            layout = self._layout(cost, gpu, paged, block_size_tokens)
        self.layout_factor, self.layout_source = layout
        self.kv_read_bytes_per_token = kv_rank * self.layout_factor

    def _work_terms(self, model: ModelSpec, step_roofline: bool) -> None:
        """Weights read and FLOPs per token of the linear layers, the LM head and the routed
        experts on one rank (bytes and FLOPs; the module docstring gives the split)."""
        self.step_roofline = step_roofline
        per_param = float(model.dtype_bytes) / self.tp
        self.weight_bytes = float(model.weight_bytes) / self.tp  # the "step" roofline's W
        head = 0 if step_roofline else model.lm_head_params
        experts = 0 if step_roofline else model.expert_params
        dense = model.num_params - experts - head - (0 if step_roofline else model.embedding_params)
        self.dense_weight_bytes = dense * per_param
        expert_bytes = model.moe.expert_bytes_per_param(model.dtype_bytes) if model.moe else 0.0
        self.expert_weight_bytes = experts * expert_bytes / self.tp
        self.head_weight_bytes = head * per_param
        self.head_flops_per_seq = 2.0 * head / self.tp
        share = (
            0.0
            if model.moe is None or step_roofline
            else model.moe.num_experts_per_tok / (model.moe.num_experts)
        )
        self.expert_miss = 1.0 - share  # an expert is left out by one token's picks
        self.linear_flops_per_token = 2.0 * (dense + experts * share) / self.tp

    def expert_coverage(self, new_tokens: float) -> float:
        """Share of the routed experts' weights a step of ``new_tokens`` tokens reads:
        ``1 - (1 - k / E) ** new_tokens`` (0 for a dense model)."""
        if not self.expert_weight_bytes:
            return 0.0
        return 1.0 - float(self.expert_miss**new_tokens)

    @staticmethod
    def _fitted_layout(resolved: ResolvedCost, gpu: GpuSpec, block_size: int) -> tuple[float, str]:
        """The fitted table's paged factor, fitted on runs at one block size, carried to
        ``block_size`` by the calibration table's ratio (``f_layout`` in the module docstring)."""
        fitted_at = resolved.fitted_block_size_tokens
        assert resolved.paged_attention_factor is not None
        assert fitted_at is not None
        source = f"paged_attention_factor of {resolved.source}"
        if block_size == fitted_at:
            return resolved.paged_attention_factor, source
        table = resolve_table(None, gpu.name)
        ratio = table.layout_factor(block_size) / table.layout_factor(fitted_at)
        return resolved.paged_attention_factor * ratio, (
            f"{source}; fitted at block size {fitted_at}, x {ratio:.3g} at block size "
            f"{block_size} (the calibration table's ratio: {table.describe()})"
        )

    @staticmethod
    def _layout(cost: CostSpec, gpu: GpuSpec, paged: bool, block_size: int) -> tuple[float, str]:
        if not paged:
            return 1.0, "contiguous layout (factor 1 by definition)"
        if cost.paged_attention_factor is not None:
            return cost.paged_attention_factor, "CostSpec.paged_attention_factor"
        table = resolve_table(cost.calibration, gpu.name)
        return table.layout_factor(block_size), table.describe()

    def step_s(
        self,
        new_tokens: float,
        context_tokens: float,
        attention_pairs: float,
        num_seqs: float,
        num_drafting: float = 0.0,
    ) -> float:
        """Duration of one step (seconds), from sums over its sequences.

        Args:
            new_tokens: tokens computed (``sum c_i``).
            context_tokens: KV tokens read (``sum o_i``).
            attention_pairs: ``sum (2 c_i o_i + c_i**2)``.
            num_seqs: sequences scheduled.
            num_drafting: sequences whose drafter runs after the step (speculative decoding:
                ``draft_passes`` passes of the drafter's weights, ``draft_s``).

        Returns:
            The step's duration (swap time not included; see ``swap_s``).

        Raises:
            ValueError: a negative, infinite or NaN duration (a broken coefficient).
        """
        kv_bytes = context_tokens * self.kv_read_bytes_per_token
        if self.step_roofline:
            mem_s = (self.weight_bytes + kv_bytes) / self.bandwidth
            compute_s = self.compute_s(new_tokens, attention_pairs)
            if mem_s != mem_s or compute_s != compute_s:  # NaN: max() would keep either
                raise ValueError("cost model returned an invalid duration: nan")
            duration = mem_s if mem_s >= compute_s else compute_s
        else:
            attn_flops = self.attn_flops_per_pair * attention_pairs
            duration = self._operators_s(new_tokens, kv_bytes, attn_flops, num_seqs)
        duration += self.overhead_s + self.per_seq_overhead_s * num_seqs
        if num_drafting and self.draft_passes:
            duration += self.draft_s(num_drafting)
        if self.tp > 1 or self.pp > 1:
            duration += self.communication_s(new_tokens)
        if not 0 <= duration < math.inf:  # (math.inf: float("inf") would parse a string a step)
            raise ValueError(f"cost model returned an invalid duration: {duration}")
        return duration

    def _operators_s(
        self, new_tokens: float, kv_bytes: float, attn_flops: float, num_seqs: float
    ) -> float:
        """The ``"operator"`` roofline: linear layers, LM head and attention, each the longer of
        its reads and its FLOPs (seconds)."""
        bw, flops = self.bandwidth, self.flops
        weights = self.dense_weight_bytes + self.expert_weight_bytes * self.expert_coverage(
            new_tokens
        )
        linear = max(weights / bw, self.linear_flops_per_token * new_tokens / flops)
        head = max(self.head_weight_bytes / bw, self.head_flops_per_seq * num_seqs / flops)
        attention = max(kv_bytes / bw, attn_flops / flops)
        total = linear + head + attention
        if total != total:
            raise ValueError("cost model returned an invalid duration: nan")
        return total

    def draft_s(self, num_drafting: float) -> float:
        """Seconds the drafter's ``draft_passes`` sequential passes take over ``num_drafting``
        sequences: each reads its weights once (memory-bound) or computes ``2 * params`` FLOPs
        per sequence, whichever is longer."""
        mem_s = self.draft_bytes / self.bandwidth
        compute_s = self.draft_flops_per_seq * num_drafting / self.flops
        return self.draft_passes * (mem_s if mem_s >= compute_s else compute_s)

    def communication_s(self, new_tokens: float) -> float:
        """Tensor-parallel all-reduces and pipeline stage sends of a step computing
        ``new_tokens`` tokens (seconds; 0 without parallelism)."""
        message = new_tokens * self.message_bytes_per_token
        out = 0.0
        if self.tp > 1:
            ring = 2.0 * (self.tp - 1) / self.tp
            per_allreduce = ring * message / self.link_bandwidth + self.allreduce_latency_s
            out += 2 * self.num_layers * per_allreduce
        if self.pp > 1:
            out += (self.pp - 1) * (message / self.link_bandwidth + self.send_latency_s)
        return out

    def step_duration_s(self, chunks: Sequence[tuple[int, int]], swap_blocks: int = 0) -> float:
        """Duration of one step in seconds.

        Args:
            chunks: ``(new tokens, tokens computed before)`` of each scheduled sequence (a decode
                is ``(1, L)``; a prefill chunk ``(c, o)``).
            swap_blocks: KV blocks moved over PCIe in this step (out plus in).
        """
        new = float(sum(c for c, _ in chunks))
        context = float(sum(o for _, o in chunks))
        pairs = float(sum(2 * c * o + c * c for c, o in chunks))
        return self.step_s(new, context, pairs, float(len(chunks))) + self.swap_s(swap_blocks)

    def span_durations(
        self,
        step0_s: float,
        context0: float,
        num_seqs: float,
        num_steps: int,
        until_s: float | None = None,
    ) -> list[float]:
        """A span's step durations (seconds): step 0 of ``step0_s``, then up to ``num_steps``
        decode steps of the same ``num_seqs`` sequences, the first reading ``context0`` tokens
        of KV and each later one ``num_seqs`` more (``step_s`` each), stopping after the first
        step that ends, counted from the span's start, at or after ``until_s`` (none when
        ``None``).

        Raises:
            ValueError: a negative, infinite or NaN duration (a broken coefficient).
        """
        durations = [step0_s]
        end = step0_s
        if until_s is not None and end >= until_s:
            return durations
        for j in range(num_steps):
            context = context0 + num_seqs * float(j)
            duration = self.step_s(num_seqs, context, 2.0 * context + num_seqs, num_seqs)
            durations.append(duration)
            end += duration
            if until_s is not None and end >= until_s:
                break
        return durations

    def swap_bytes(self, num_blocks: int) -> int:
        """Bytes one swap of ``num_blocks`` whole blocks moves over one GPU's PCIe link."""
        return int(num_blocks * self.block_size_tokens * self.swap_bytes_per_token)

    def swap_s(self, num_blocks: int) -> float:
        """Seconds to move ``num_blocks`` KV blocks between GPU and CPU (one direction each).

        ``bytes / pcie_bandwidth + num_blocks * 2 * layers_per_gpu * swap_copy_overhead_s``
        (every GPU moves its own slice of the blocks at the same time).
        """
        if num_blocks < 0:
            raise ValueError(f"num_blocks: must be >= 0, got {num_blocks}")
        copies = num_blocks * 2 * self.layers_per_gpu
        return (
            self.swap_bytes(num_blocks) / self.pcie_bandwidth + copies * self.swap_copy_overhead_s
        )

    def recompute_s(self, num_tokens: int) -> float:
        """Extra seconds a recompute-preempted sequence of ``num_tokens`` costs when re-prefilled.

        The compute of a prefill of ``num_tokens`` (linear + causal attention FLOPs) at the
        achieved FLOP/s; used to compare recompute against ``swap_s`` (the paper's Figure 19a).
        """
        return self.compute_s(float(num_tokens), float(num_tokens) ** 2)

    def compute_s(self, new_tokens: float, attention_pairs: float) -> float:
        """Seconds of the FLOPs of computing ``new_tokens`` tokens with ``attention_pairs``
        (``sum (2 c o + c**2)``) at the achieved FLOP/s: linear layers plus attention."""
        flops = (
            self.linear_flops_per_token * new_tokens + self.attn_flops_per_pair * attention_pairs
        )
        return flops / self.flops
