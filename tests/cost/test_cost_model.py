"""Step-cost arithmetic worked by hand on a toy model and GPU, monotonicity, swap and layout."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from kvsim.calibrate.table import analytic_layout_factor
from kvsim.config import CostSpec, GpuSpec, ModelSpec
from kvsim.cost import StepCostModel

# Toy model: bytes_per_token = 2 * 2 layers * 2 kv heads * 4 dims * 2 bytes = 64;
# weights = 1000 params * 2 bytes = 2000 bytes; hidden = 2 heads * 4 dims = 8.
MODEL = ModelSpec(
    num_layers=2, num_attention_heads=2, num_kv_heads=2, head_dim=4, num_params=1000, dtype_bytes=2
)
# Effective HBM 1000 * 0.5 = 500 B/s; effective compute 1e5 * 0.5 = 5e4 FLOP/s; PCIe 100 B/s.
GPU = GpuSpec(
    memory_bytes=10**9,
    hbm_bandwidth_bytes_per_s=1000.0,
    fp16_flops_per_s=1e5,
    pcie_bandwidth_bytes_per_s=100.0,
)
COST = CostSpec(
    hbm_efficiency=0.5,
    flops_efficiency=0.5,
    step_overhead_s=0.1,
    per_seq_overhead_s=0.01,
    swap_copy_overhead_s=0.5,
)


def model(paged: bool = False, **cost: float) -> StepCostModel:
    spec = COST.model_copy(update=cost)
    return StepCostModel(MODEL, GPU, spec, paged=paged, block_size_tokens=4)


def test_memory_bound_step_by_hand() -> None:
    # decodes at contexts 10 + 20 = 30 tokens, one prefill of 5 tokens.
    # bytes = 2000 + 30 * 64 = 3920 -> 3920 / 500 = 7.84 s
    # flops = 2*1000*(2 + 5) + 2*2*8*5**2 + 4*2*8*30 = 14000 + 800 + 1920 = 16720 -> 0.3344 s
    # t = max(7.84, 0.3344) + 0.1 + 0.01 * 3 sequences = 7.97 s
    assert model().step_duration_s([5], 30, 2) == pytest.approx(7.97)


def test_compute_bound_step_by_hand() -> None:
    # prefill of 100 tokens: flops = 2*1000*102 + 2*2*8*100**2 + 1920 = 204000 + 320000 + 1920
    # = 525920 -> 10.5184 s > 7.84 s of memory; t = 10.5184 + 0.1 + 0.03 = 10.6484 s
    assert model().step_duration_s([100], 30, 2) == pytest.approx(10.6484)


def test_paged_factor_scales_kv_reads_only() -> None:
    # bytes = 2000 + 30 * 64 * 1.5 = 4880 -> 9.76 s; + 0.13 s = 9.89 s
    cost = model(paged=True, paged_attention_factor=1.5)
    assert cost.step_duration_s([5], 30, 2) == pytest.approx(9.89)
    assert cost.layout_source == "CostSpec.paged_attention_factor"


def test_decode_span_only_first_step_has_prefills() -> None:
    # step 2 reads 32 tokens: (2000 + 32 * 64) / 500 = 8.096 s; + 0.1 + 0.01 * 2 = 8.216 s
    spans = model().decode_span_s(np.array([30.0, 32.0]), 2, [5])
    np.testing.assert_allclose(spans, [7.97, 8.216])


def test_swap_seconds_by_hand() -> None:
    # 3 blocks of 4 tokens * 64 bytes = 768 bytes / 100 B/s = 7.68 s
    # copies: 3 blocks * 2 (K, V) * 2 layers = 12, * 0.5 s = 6 s -> 13.68 s
    cost = model()
    assert cost.swap_bytes(3) == 768
    assert cost.swap_s(3) == pytest.approx(13.68)
    assert cost.step_duration_s([5], 30, 2, swap_blocks=3) == pytest.approx(7.97 + 13.68)


def test_recompute_seconds_by_hand() -> None:
    # 5 tokens: 2*1000*5 + 2*2*8*25 = 10000 + 800 = 10800 FLOPs / 5e4 = 0.216 s
    assert model().recompute_s(5) == pytest.approx(0.216)


def test_analytic_layout_factor_by_hand() -> None:
    # 1 + (0.23 - 1.5/16) + 1.5/B: B=16 -> 1.23; B=1 -> 1 + 0.13625 + 1.5 = 2.63625
    assert analytic_layout_factor(16) == pytest.approx(1.23)
    assert analytic_layout_factor(1) == pytest.approx(2.63625)
    cost = model(paged=True)
    assert cost.layout_factor == pytest.approx(1 + 0.13625 + 1.5 / 4)
    assert "analytic" in cost.layout_source


@pytest.mark.parametrize("paged", [False, True])
def test_more_context_never_costs_less(paged: bool) -> None:
    cost = model(paged=paged)
    contexts = np.arange(0, 5000, 37, dtype=np.float64)
    spans = cost.decode_span_s(contexts, 3)
    assert np.all(np.diff(spans) >= 0)


def test_more_work_never_costs_less() -> None:
    cost = model()
    base = cost.step_duration_s([5], 30, 2)
    assert cost.step_duration_s([5], 30, 3) >= base
    assert cost.step_duration_s([5, 1], 30, 2) >= base
    assert cost.step_duration_s([6], 30, 2) >= base
    assert cost.step_duration_s([5], 30, 2, swap_blocks=1) >= base


def test_smaller_blocks_never_cheaper() -> None:
    factors = [analytic_layout_factor(b) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    assert all(a >= b for a, b in itertools.pairwise(factors))
    assert min(factors) > 1.0


def test_negative_swap_rejected() -> None:
    with pytest.raises(ValueError, match="num_blocks"):
        model().swap_s(-1)


def test_vllm_2023_preset_loads() -> None:
    spec = CostSpec.model_validate("vllm-2023")
    assert spec.name == "vllm-2023"
    assert spec.per_seq_overhead_s > 0
