"""The PyTorch parts harness: its layer shapes by hand, and (on a GPU) a tiny grid end to end."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from kvsim.calibrate.parts_setup import PART_MODELS, PartModel, PartsGrid


def test_tp4_rank_of_llama_2_70b() -> None:
    # Llama-2-70B (hidden 8192, 64 query / 8 KV heads of 128, MLP 28672, 80 layers) split 4 ways:
    # 16 query and 2 KV heads -> QKV out = (16 + 2 * 2) * 128 = 2560; gate/up = 2 * 7168 = 14336.
    rank = next(m for m in PART_MODELS if m.name == "llama-2-70b tp4")
    assert rank.linear_shapes() == {
        "qkv": (8192, 2560),
        "o": (2048, 8192),
        "gate_up": (8192, 14336),
        "down": (7168, 8192),
    }
    # K and V, 80 layers, 2 KV heads x 128, 2 bytes: 2 * 80 * 256 * 2 = 81,920 bytes per token.
    assert rank.kv_bytes_per_token == 81_920


def test_llama_2_7b_weights_per_layer() -> None:
    # 4 * 4096^2 (Q, K, V, O) + 3 * 4096 * 11008 (gate, up, down) = 202,375,168 per layer;
    # x 32 layers + 2 * 32000 * 4096 (embedding, LM head) = 6.738e9, the preset's num_params.
    rank = next(m for m in PART_MODELS if m.name == "llama-2-7b tp1")
    per_layer = sum(k * n for k, n in rank.linear_shapes().values())
    assert per_layer == 202_375_168
    assert per_layer * rank.num_layers + 2 * rank.vocab * rank.hidden == pytest.approx(
        6.738e9, rel=1e-3
    )


@pytest.mark.gpu
def test_tiny_parts_grid_on_the_gpu(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from kvsim.calibrate.parts import measure_parts

    grid = PartsGrid(
        gemm_tokens=(1, 64),
        decode_batches=(2,),
        decode_contexts=(256,),
        prefill_chunks=(128,),
        hbm_bytes=1 << 28,
        link_sizes=(1 << 20,),
        block_copies=16,
        block_bytes=32 << 10,
        warmup=1,
        repeats=3,
    )
    model = PartModel("tiny", 1024, 8, 2, 128, 2048, 4096, 2)
    files = measure_parts(tmp_path, grid, [model], say=lambda _: None)
    assert [f.name for f in files] == ["hbm.csv", "host.csv", "gemm.csv", "sdpa.csv", "steps.csv"]
    for f in files:
        rows = list(csv.DictReader(line for line in f.open() if not line.startswith("#")))
        assert rows
        assert all(float(r["seconds"]) > 0 for r in rows)
